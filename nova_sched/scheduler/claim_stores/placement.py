"""Claims as allocations in nova's Placement, taken as nova-scheduler takes them.

A claim is ``PUT /allocations/{instance_uuid}`` with the chosen allocation
candidate (every provider of the node's tree it allocates from, and any
sharing provider; without Placement's model, the node's own provider with
the flavor's VCPU, MEMORY_MB and DISK_GB), the request's project and user, and the consumer generation nova would send:
null for a new consumer, the current one when the instance holds
allocations already. Placement judges the fit under its own generations, so
a 409 (the node filled meanwhile, another scheduler's claim) is a lost
claim: the cycle decides again. Nothing is claimed twice.

Allocations the instance already holds are handled as nova's report client
does for a move (its ``claim_resources``): those on a move's source (a host
the request ignores: nova's evacuate) are kept beside the new one; any
other is an earlier claim of this very request, delivered again after its
daemon died, and is replaced, not doubled.

Once nova has an instance's allocation, nova owns it: its compute and
conductor move and delete it. ``forget`` (an instance deleted, or gone from
a host) therefore leaves Placement alone, and only ``release`` (a request
this scheduler could not complete: the all-or-nothing rule) gives back what
this scheduler took, restoring what the instance held before.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from nova_sched import exception
from nova_sched.placement import PlacementClient
from nova_sched.scheduler.claim_stores.base import Claim, Placement

LOG = logging.getLogger(__name__)

# Times a claim is sent again after Placement reports a generation race
# that is not about capacity (another writer touched the provider or the
# consumer between our read and our write).
_RACE_RETRIES = 3


class PlacementClaims:
    """The ``placement`` claim store.

    ``provider_host`` maps a resource provider's uuid to its host and node
    id as the host table knows them (None for a provider it does not know).
    """

    # Placement holds the claims, the scheduler's database the instances.
    records_new_requests = False

    def __init__(self, client: PlacementClient,
                 provider_host: Callable[[str], tuple[str, int] | None]):
        self.client = client
        self._provider_host = provider_host
        # instance -> the allocations it held before this scheduler's claim
        # (kept beside it), so that a release can put them back.
        self._before: dict[str, dict] = {}
        self._lock = threading.Lock()

    def allocation_request(self, claim: Claim) -> dict | None:
        """nova's allocation_request for the claim's node (``mappings`` as
        placement 1.36 returns them with a candidate)."""
        if not claim.node_uuid:
            return None
        allocations = claim.placement_allocations()
        mappings = ({suffix: list(providers) for suffix, providers in claim.mappings.items()}
                    if claim.mappings is not None else {"": [claim.node_uuid]})
        return {"allocations": {rp: {"resources": amounts}
                                for rp, amounts in allocations.items()},
                "mappings": mappings}

    def claim(self, claim: Claim, placement: Placement | None = None) -> None:
        if not claim.node_uuid:
            raise exception.ClaimFailed(
                f"compute node {claim.node_id} has no resource provider uuid")
        wanted = {rp: {"resources": amounts}
                  for rp, amounts in claim.placement_allocations().items()}
        for _attempt in range(_RACE_RETRIES + 1):
            current, generation = self.client.allocations_of(claim.instance_uuid)
            kept = {rp: alloc for rp, alloc in current.items()
                    if rp not in wanted and self._is_move_source(rp, claim)}
            payload = {"allocations": dict(kept, **wanted),
                       "project_id": claim.project_id or "",
                       "user_id": claim.user_id or "",
                       "consumer_generation": generation if current else None}
            resp = self.client.put_allocations(claim.instance_uuid, payload)
            if resp.status == 204:
                with self._lock:
                    if kept:
                        self._before[claim.instance_uuid] = {
                            "allocations": kept, "project_id": payload["project_id"],
                            "user_id": payload["user_id"]}
                    else:
                        self._before.pop(claim.instance_uuid, None)
                return
            if resp.status == 409 and resp.error_code() == "placement.concurrent_update":
                # Another writer changed the provider or the consumer between
                # our read and our write (nova's report client retries too);
                # a capacity refusal has another code.
                LOG.info("Placement generation race on the claim of %s; trying "
                         "again: %s", claim.instance_uuid, resp.error_detail())
                continue
            if resp.status == 409:
                raise exception.ClaimFailed(
                    f"claim for {claim.instance_uuid} on provider {claim.node_uuid} "
                    f"refused by Placement: {resp.error_detail()}")
            raise exception.NovaSchedException(
                f"Placement refused the claim of {claim.instance_uuid} "
                f"(HTTP {resp.status}): {resp.error_detail()}")
        raise exception.ClaimFailed(
            f"claim for {claim.instance_uuid} on provider {claim.node_uuid} lost "
            f"{_RACE_RETRIES + 1} generation races in Placement")

    def _is_move_source(self, rp_uuid: str, claim: Claim) -> bool:
        known = self._provider_host(rp_uuid)
        return known is not None and known[0] in claim.keep_on_hosts

    def release(self, instance_uuids: list[str]) -> list[int]:
        freed = []
        for uuid in instance_uuids:
            current, generation = self.client.allocations_of(uuid)
            with self._lock:
                before = self._before.pop(uuid, None)
            if before:
                # A move's source allocations: they stay, ours go.
                resp = self.client.put_allocations(
                    uuid, dict(before, consumer_generation=generation))
            else:
                resp = self.client.delete_allocations(uuid)
            if resp.status not in (204, 404):
                LOG.error("Could not give back the claim of %s in Placement "
                          "(HTTP %s): %s", uuid, resp.status, resp.error_detail())
            for rp_uuid in current:
                if before and rp_uuid in before["allocations"]:
                    continue
                known = self._provider_host(rp_uuid)
                if known is not None:
                    freed.append(known[1])
        return freed

    def forget(self, instance_uuids: list[str]) -> list[int]:
        with self._lock:
            for uuid in instance_uuids:
                self._before.pop(uuid, None)
        return []

    def held_on_host(self, host: str) -> dict[str, int]:
        # No claim stays this scheduler's once nova has it.
        return {}

    def older_than(self, instance_uuids: list[str], cutoff) -> list[str]:
        return []
