"""The ``compute_reports`` host source: what compute nodes report, as stored.

Compute nodes report themselves with ``compute_node_update`` casts; the
daemon applies each report to its host table at once and stores it
(``report_ingest``). This source reads the scheduler's own database:
every row whose ``changed_at`` stamp moved (another daemon's report or
claim, an operator's command), skipping the rows this process wrote
itself (``changed_by``: it applied its reports before storing them, and
counted its claims before taking them), and the aggregates when their
stamp moved. When the operators' count of changes moved
(``db.operator_changes``), every service row is read as well, whatever its
stamp: a command run on a host whose clock is behind must not be missed.
"""

from __future__ import annotations

from typing import Iterable

from nova_sched.db import aggregates as db_aggregates
from nova_sched.db import allocations as db_allocations
from nova_sched.db import api as db_api
from nova_sched.db import compute_nodes as db_nodes
from nova_sched.db import operator_changes as db_operator_changes
from nova_sched.scheduler.cloud.sources.base import HostRows


class ComputeReportsSource:
    """Host rows from the scheduler's database, fed by compute reports."""

    # Clock skew between daemons can hide a change from a stamp-based read.
    periodic_resync = True
    tracks_instances = False

    def __init__(self):
        self._aggregate_stamp: int | None = None
        self._operator_changes: int | None = None

    def load_all(self) -> HostRows:
        # Read first: the rows below hold at least these changes.
        changes = db_operator_changes.current()
        nodes, services = db_nodes.load_changed(0)
        stamp, aggregates = db_aggregates.load_with_stamp()
        self._aggregate_stamp = stamp
        self._operator_changes = changes
        return HostRows(nodes, services, aggregates,
                        db_allocations.unclaimed_by_host(), full=True,
                        operator_changes=changes)

    def load_changed(self, since_us: int) -> HostRows:
        counters = db_operator_changes.counters()
        changes = counters.get(db_operator_changes.NAME, 0)
        # Reports this process stored were applied before they were stored,
        # and claims it took were counted before they were taken.
        nodes, services = db_nodes.load_changed(since_us,
                                                skip_writer=db_api.writer_id())
        if changes != self._operator_changes:
            services = db_nodes.load_services()
        rows = HostRows(nodes, services, operator_changes=changes)
        if counters.get(db_aggregates.STAMP_NAME, 0) != self._aggregate_stamp:
            self._aggregate_stamp, rows.aggregates = db_aggregates.load_with_stamp()
        self._operator_changes = changes
        return rows

    def operator_changes(self) -> int | None:
        return db_operator_changes.current()

    def load_node(self, node_id: int) -> HostRows:
        node, service = db_nodes.load_node(node_id)
        return HostRows([node] if node is not None else [],
                        [service] if service is not None else [])

    def unclaimed_by_host(self) -> dict[str, int]:
        return db_allocations.unclaimed_by_host()

    def hosts_of(self, instance_uuids: Iterable[str]) -> dict[str, str]:
        return db_allocations.hosts_of(instance_uuids)

    def note_claimed(self, claim, host: str) -> None:
        # The claim's own row says where the instance is.
        pass

    def note_confirmed(self, claim) -> None:
        pass

    def note_withdrawn(self, claim) -> None:
        # The node is read again from the database, which never had it.
        pass

    def settle_doubts(self) -> HostRows | None:
        # Claims and rows are one transaction here: no doubt arises.
        return None

    def problem(self) -> str | None:
        # The database probe of /healthz covers this source.
        return None

    def stop(self) -> None:
        pass
