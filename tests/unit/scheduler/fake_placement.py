"""An in-memory Placement with the arithmetic and generations of the real one,
standing in for ``nova_sched.placement.PlacementClient`` in unit tests (the
functional test of a nova cloud uses the real Placement)."""

from __future__ import annotations

from nova_sched import exception
from nova_sched.placement import Response


class FakePlacement:
    """Providers with inventories, consumers with allocations."""

    def __init__(self):
        self.inventories_of: dict[str, dict[str, dict]] = {}
        self.consumers: dict[str, dict] = {}  # uuid -> {allocations, generation, ...}
        self.down = False
        self.puts: list[tuple[str, dict]] = []

    # -- set-up ---------------------------------------------------------------
    def add_provider(self, uuid: str, vcpus: int, memory_mb: int, disk_gb: int,
                     cpu_ratio: float = 1.0, ram_ratio: float = 1.0,
                     reserved_mb: int = 0) -> None:
        self.inventories_of[uuid] = {
            "VCPU": {"total": vcpus, "reserved": 0, "allocation_ratio": cpu_ratio},
            "MEMORY_MB": {"total": memory_mb, "reserved": reserved_mb,
                          "allocation_ratio": ram_ratio},
            "DISK_GB": {"total": disk_gb, "reserved": 0, "allocation_ratio": 1.0},
        }

    def _check(self) -> None:
        if self.down:
            raise exception.PlacementUnavailable("ConnectFailure: refused")

    def reachable(self):
        return "ConnectFailure: refused" if self.down else None

    def capacity(self, rp: str, rc: str) -> int:
        inv = self.inventories_of[rp][rc]
        return int((inv["total"] - inv["reserved"]) * inv["allocation_ratio"])

    def used(self, rp: str, rc: str) -> int:
        return sum(c["allocations"].get(rp, {}).get("resources", {}).get(rc, 0)
                   for c in self.consumers.values())

    # -- PlacementClient's surface -------------------------------------------
    def allocations_of(self, consumer):
        self._check()
        found = self.consumers.get(consumer)
        if not found:
            return {}, None
        return ({rp: {"resources": dict(a["resources"])}
                 for rp, a in found["allocations"].items()}, found["generation"])

    def put_allocations(self, consumer, payload):
        self._check()
        self.puts.append((consumer, payload))
        found = self.consumers.get(consumer)
        expected = found["generation"] if found else None
        if payload.get("consumer_generation") != expected:
            return Response(409, {"errors": [{
                "code": "placement.concurrent_update",
                "detail": f"consumer generation conflict - expected {expected}"}]}, "")
        before = found["allocations"] if found else {}
        for rp, alloc in payload["allocations"].items():
            for rc, amount in alloc["resources"].items():
                mine = before.get(rp, {}).get("resources", {}).get(rc, 0)
                if self.used(rp, rc) - mine + amount > self.capacity(rp, rc):
                    return Response(409, {"errors": [{
                        "code": "placement.undefined_code",
                        "detail": f"Unable to allocate inventory: {rc} on {rp} "
                                  "would exceed the capacity"}]}, "")
        self.consumers[consumer] = {
            "allocations": {rp: {"resources": dict(a["resources"])}
                            for rp, a in payload["allocations"].items()},
            "generation": (expected or 0) + 1,
            "project_id": payload.get("project_id"), "user_id": payload.get("user_id")}
        return Response(204, None, "")

    def delete_allocations(self, consumer):
        self._check()
        if self.consumers.pop(consumer, None) is None:
            return Response(404, {"errors": [{"code": "placement.undefined_code",
                                              "detail": "no such consumer"}]}, "")
        return Response(204, None, "")

    def usages(self, rp):
        self._check()
        if rp not in self.inventories_of:
            return None
        return {rc: self.used(rp, rc) for rc in self.inventories_of[rp]}

    def inventories(self, rp):
        self._check()
        return self.inventories_of.get(rp)

    def provider_summaries(self, resources, wait=0.0):
        self._check()
        wanted = dict(part.split(":") for part in resources.split(","))
        found = {}
        for rp, invs in self.inventories_of.items():
            if all(self.capacity(rp, rc) - self.used(rp, rc) >= int(n)
                   for rc, n in wanted.items()):
                found[rp] = {rc: {"capacity": self.capacity(rp, rc),
                                  "used": self.used(rp, rc)} for rc in invs}
        return found
