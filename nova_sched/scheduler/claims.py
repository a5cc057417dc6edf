"""Claims: what an instance holds on a node, and where claims are kept.

The cycle takes a claim for the chosen node with the ratios its decision
used (``scheduler.resources``), so the guard judges the node exactly as the
filters did. The claim store is a small interface (``claim``, ``release``,
``held_on_host``, ``older_than``) so that another keeper of claims (nova's
Placement) can stand in for the scheduler's database; ``DatabaseClaims``
keeps them in ``db.allocations``.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Protocol

from nova_sched.capacity import RESOURCES
from nova_sched.db import allocations as db_allocations
from nova_sched.scheduler import resources


@dataclasses.dataclass(frozen=True)
class Claim:
    """Resources one instance holds on one node, and the ratios that admit it.

    Without ``ratios`` the options' ratios apply (a claim made outside a
    decision, such as a test's or an operator's).
    """

    instance_uuid: str
    node_id: int
    memory_mb: int
    vcpus: int
    disk_mb: int
    ratios: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def ratio_of_each(self) -> dict[str, float]:
        return {res.name: float(self.ratios.get(res.name, resources.option_ratio(res)))
                for res in RESOURCES}


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where an instance goes, recorded with its claim."""

    host: str
    node: str
    launch_index: int


class ClaimStore(Protocol):
    """Where claims are kept."""

    def claim(self, claim: Claim, placement: Placement | None = None) -> None:
        """Take the claim (ClaimFailed when the node cannot hold it)."""

    def release(self, instance_uuids: list[str]) -> list[int]:
        """Give the instances' claims back; the ids of the nodes freed."""

    def held_on_host(self, host: str) -> dict[str, int]:
        """instance uuid -> node id of the claims on ``host``."""

    def older_than(self, instance_uuids: list[str], cutoff) -> list[str]:
        """Those of the instances whose claim was taken before ``cutoff``."""


class DatabaseClaims:
    """Claims kept in the scheduler's database (one guarded UPDATE each)."""

    def claim(self, claim: Claim, placement: Placement | None = None) -> None:
        db_allocations.claim(
            claim.instance_uuid, claim.node_id, claim.memory_mb, claim.vcpus,
            claim.disk_mb, claim.ratio_of_each(),
            None if placement is None else dataclasses.astuple(placement))

    def release(self, instance_uuids: list[str]) -> list[int]:
        return db_allocations.release(instance_uuids)

    def held_on_host(self, host: str) -> dict[str, int]:
        return db_allocations.held_on_host(host)

    def older_than(self, instance_uuids: list[str], cutoff) -> list[str]:
        return db_allocations.older_than(instance_uuids, cutoff)
