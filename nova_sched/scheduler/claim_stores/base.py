"""What a claim is, and the interface every claim store offers.

The cycle takes a claim for the chosen node with the ratios its decision
used (``scheduler.cloud.resources``), so a store that judges fit itself (the
local one) judges the node exactly as the filters did. Two stores stand
behind this interface: ``local`` (guarded updates in the scheduler's own
database) and ``placement`` (allocations in nova's Placement).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Protocol

from nova_sched.capacity import RESOURCES
from nova_sched.db.instances import NewRequest
from nova_sched.scheduler.cloud import resources


@dataclasses.dataclass(frozen=True)
class Claim:
    """Resources one instance holds on one node, and the ratios that admit it.

    Without ``ratios`` the options' ratios apply (a claim made outside a
    decision, such as a test's or an operator's). ``node_uuid``,
    ``project_id`` and ``user_id`` are what Placement records with an
    allocation; ``keep_on_hosts`` names the hosts where allocations the
    instance already holds are a move's source, to be kept beside the new
    one (nova's evacuate), rather than an earlier claim of the same request
    to be replaced.
    """

    instance_uuid: str
    node_id: int
    memory_mb: int
    vcpus: int
    disk_mb: int
    ratios: Mapping[str, float] = dataclasses.field(default_factory=dict)
    node_uuid: str | None = None
    project_id: str | None = None
    user_id: str | None = None
    keep_on_hosts: frozenset[str] = frozenset()
    #: Set when the claimer counted the claim in its host table already,
    #: a table that has read every change stamped before this (see
    #: ``HostManager.read_through_us``); a store that writes the node's
    #: row can then spare the claimer reading it back.
    counted_through_us: int | None = None
    #: How many operators' changes the decision's host table had read
    #: (``db.operator_changes``): a store that can tell refuses the claim
    #: with HostTableBehind when more were made. None: not checked.
    operator_changes: int | None = None
    #: The Placement allocation candidate chosen (``{rp uuid: {resource
    #: class: amount}}`` over the node's provider tree and any sharing
    #: provider) and its ``mappings`` (request group suffix -> providers),
    #: when the decision asked Placement's model; None: the node's own
    #: provider with ``placement_resources``.
    allocations: Mapping[str, Mapping[str, int]] | None = None
    mappings: Mapping[str, tuple[str, ...]] | None = None

    def ratio_of_each(self) -> dict[str, float]:
        # The option only for a resource the decision gave no ratio.
        return {res.name: float(self.ratios[res.name] if res.name in self.ratios
                                else resources.option_ratio(res))
                for res in RESOURCES}

    def placement_resources(self) -> dict[str, int]:
        """The claim in Placement's resource classes, as nova counts them:
        disk in whole GB rounded up (root + ephemeral + swap, the root
        already 0 for a boot from volume), amounts of 0 left out."""
        amounts = {"VCPU": self.vcpus, "MEMORY_MB": self.memory_mb,
                   "DISK_GB": -(-self.disk_mb // 1024)}
        return {rc: amount for rc, amount in amounts.items() if amount > 0}

    def placement_allocations(self) -> dict[str, dict[str, int]]:
        """``{rp uuid: {resource class: amount}}`` this claim writes in
        Placement: the chosen candidate's, else the node's own provider's."""
        if self.allocations is not None:
            return {rp: dict(amounts) for rp, amounts in self.allocations.items()}
        return {self.node_uuid: self.placement_resources()} if self.node_uuid else {}


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where an instance goes, recorded with its claim.

    ``previous_host`` is where the instance's record placed it when the
    decision began (None: nowhere yet). The record is changed only if it
    still says so; otherwise another handler of the same request placed
    it meanwhile, and the claim fails with AlreadyPlaced.

    ``new_request``: the instance has no record yet (its request is seen
    for the first time); a store that ``records_new_requests`` writes it,
    placed, with the claim, and raises AlreadyRecorded if it exists after
    all.

    ``casts``: records of earlier casts (``db.instances.Cast``) that such a
    store writes in the claim's transaction; none of them if it fails.
    """

    host: str
    node: str
    launch_index: int
    previous_host: str | None = None
    new_request: NewRequest | None = None
    casts: tuple = ()


class ClaimStore(Protocol):
    """Where claims are kept."""

    #: Whether ``claim`` writes a ``Placement``'s ``new_request`` in the
    #: claim's own transaction (the scheduler's database holds both).
    records_new_requests: bool

    def claim(self, claim: Claim, placement: Placement | None = None) -> None:
        """Take the claim (ClaimFailed when the node cannot hold it)."""

    def release(self, instance_uuids: list[str]) -> list[int]:
        """Give back the claims this scheduler took for the instances (a
        request that could not be completed); the ids of the nodes freed."""

    def forget(self, instance_uuids: list[str]) -> list[int]:
        """The instances are gone (deleted, or nova says they left a host):
        their claims end if this store keeps them; the nodes freed."""

    def held_on_host(self, host: str) -> dict[str, int]:
        """instance uuid -> node id of the claims this store keeps on ``host``."""

    def older_than(self, instance_uuids: list[str], cutoff) -> list[str]:
        """Those of the instances whose claim was taken before ``cutoff``."""

    def allocation_request(self, claim: Claim) -> dict | None:
        """What a caller would send to take ``claim`` itself (nova's
        conductor claiming an alternate), or None where it cannot."""
