"""What a host source hands the host table, and the interface it offers.

A host source is where the scheduler learns which compute nodes exist,
whether their services are up, what they hold and which aggregates they
are in. Two stand behind this interface: ``compute_reports`` (the nodes
the compute_node_update casts report, kept in the scheduler's database)
and ``nova_cells`` (today's nova's API and cell databases, and Placement).
The host table (``HostManager``) applies what a source returns the same
way whichever it is: node rows in the shape of the scheduler's own
``compute_nodes`` rows (claims included) and service rows in the shape of
its ``services`` rows.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping, Protocol

from nova_sched.db.aggregates import AggregateInfo


@dataclasses.dataclass
class HostRows:
    """Rows for the host table.

    ``aggregates`` and ``unclaimed`` (host -> instances running there
    without a claim of this scheduler) are None when unchanged. With
    ``full`` the rows are the whole cloud and the table is rebuilt from
    them.
    """

    nodes: list[Mapping] = dataclasses.field(default_factory=list)
    services: list[Mapping] = dataclasses.field(default_factory=list)
    aggregates: list[AggregateInfo] | None = None
    unclaimed: dict[str, int] | None = None
    full: bool = False
    # How many operators' changes (db.operator_changes) the rows hold at
    # least; None: the source keeps no such count.
    operator_changes: int | None = None


class HostSource(Protocol):
    """Where the host table's rows come from."""

    # Whether the table must be reloaded from ``load_all`` every [scheduler]
    # host_state_resync_interval (a source that cannot miss a change, or
    # reconciles itself with what it reads, as nova_cells does every
    # [nova_cells] resync_interval, says no).
    periodic_resync: bool
    # Whether the source knows each host's instances itself (nova's cells),
    # so that nova's instance-info casts go to it (note_instances,
    # forget_instance, sync_instances, set_aggregates) rather than to the
    # scheduler's database.
    tracks_instances: bool

    def load_all(self) -> HostRows:
        """Every node, service and aggregate (``full`` set)."""

    def load_changed(self, since_us: int) -> HostRows:
        """What changed since ``since_us`` (microseconds since the epoch, as
        ``db.api.now_us``); may be a full picture."""

    def load_node(self, node_id: int) -> HostRows:
        """One node and its service, read again now."""

    def operator_changes(self) -> int | None:
        """How many changes operators have made to what decisions read
        (``db.operator_changes``), read now; None: the source keeps no
        such count (what it is told is in its memory at once)."""

    def unclaimed_by_host(self) -> dict[str, int]:
        """host -> instances it runs that hold no claim of this scheduler."""

    def hosts_of(self, instance_uuids: Iterable[str]) -> dict[str, str]:
        """uuid -> host of those instances that are on a host (or claimed)."""

    def note_claimed(self, claim, host: str) -> None:
        """This scheduler just counted ``claim`` (a Claim) on a node of ``host``."""

    def note_confirmed(self, claim) -> None:
        """The claim store accepted ``claim`` (the same object)."""

    def note_withdrawn(self, claim) -> None:
        """The claim store refused ``claim``, or it was never sent."""

    def settle_doubts(self) -> HostRows | None:
        """Rows read again for nodes whose figures may count one of this
        scheduler's claims twice (before a NoValidHost); None: no doubt."""

    def problem(self) -> str | None:
        """Why the source cannot be read now (for /healthz), else None."""

    def stop(self) -> None:
        """Stop reading in the background (the daemon is stopping)."""
