"""Claims kept in the scheduler's own database (one guarded UPDATE each)."""

from __future__ import annotations

from nova_sched.db import allocations as db_allocations
from nova_sched.scheduler.claim_stores.base import Claim, Placement


class DatabaseClaims:
    """The ``local`` claim store: ``db.allocations`` judges and records."""

    records_new_requests = True

    def claim(self, claim: Claim, placement: Placement | None = None) -> None:
        db_allocations.claim(
            claim.instance_uuid, claim.node_id, claim.memory_mb, claim.vcpus,
            claim.disk_mb, claim.ratio_of_each(),
            None if placement is None else (placement.host, placement.node,
                                            placement.launch_index,
                                            placement.previous_host),
            new=None if placement is None else placement.new_request,
            counted_through_us=claim.counted_through_us,
            casts=None if placement is None else placement.casts,
            operator_changes=claim.operator_changes)

    def release(self, instance_uuids: list[str]) -> list[int]:
        return db_allocations.release(instance_uuids)

    def forget(self, instance_uuids: list[str]) -> list[int]:
        return db_allocations.release(instance_uuids)

    def held_on_host(self, host: str) -> dict[str, int]:
        return db_allocations.held_on_host(host)

    def older_than(self, instance_uuids: list[str], cutoff) -> list[str]:
        return db_allocations.older_than(instance_uuids, cutoff)

    def allocation_request(self, claim: Claim) -> dict | None:
        # Only this scheduler takes these claims: a caller cannot.
        return None
