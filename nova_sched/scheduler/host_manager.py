"""HostManager: the cache of host states every decision reads.

Like kube-scheduler's cache, it is fed by events (compute reports handled
by this daemon, applied from the validated report itself; its own claims
and releases) and reconciled with its host source (``sources``: the
scheduler's database fed by compute reports, or nova's cells and
Placement) by reading only what changed since the last look, so other
daemons' claims and reports show up within ``REFRESH_INTERVAL`` seconds
without reading every node per request. Where the source asks for it, a
full reload every ``[scheduler] host_state_resync_interval`` seconds
repairs anything a clock skew between daemons could have hidden. In the
daemon a thread of its own does both (``host_refresher``), so that no
request waits for the database's answer; without it, decisions refresh
the table themselves.

Applying a node is cheap when only its figures moved: a report whose
descriptive fields (capabilities, stats, PCI pools, NUMA cells...) are the
text the table already holds only updates the row's numbers; texts shared
by hosts of one model are parsed once.

All reads and writes of the table happen under ``self.lock``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import sys
import threading
import time
from typing import Any, Mapping

import numpy as np

from nova_sched import json_text
from nova_sched.capacity import RESOURCES
from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.scheduler.claim_stores.base import Claim
from nova_sched.scheduler.cloud.host_state import NODE_RATIO_COLUMNS, HostState, HostTable
from nova_sched.scheduler.cloud.sources.base import HostRows, HostSource
from nova_sched.scheduler.cloud.sources.compute_reports import ComputeReportsSource

LOG = logging.getLogger(__name__)

# Minimum seconds between incremental refreshes (and the HostRefresher's
# period): bounds the database load; staleness it allows only costs a lost
# claim.
REFRESH_INTERVAL = 0.5
# Rows a full resync applies per hold of the table's lock: a few ms each.
_REAPPLIED_PER_LOCK = 500
_BETWEEN_CHUNKS_S = 0.001
# Rows stamped this long before the previous refresh are read again: a
# transaction that committed late, or another daemon's clock a little
# behind ours, would otherwise be missed until the next full resync.
_OVERLAP_US = 2_000_000


# The report fields a HostState is built from; the rest are row numbers.
_DESCRIPTIVE = ("uuid", "cell_uuid", "hypervisor_type", "hypervisor_version", "cpu_info", "host_ip",
                "supported_instances", "stats", "metrics", "pci_stats",
                "numa_topology")
# Of those, the texts hosts of one model share: kept once (interned), not
# once per host, and parsed once.
_SHARED_TEXTS = ("hypervisor_type", "cpu_info", "supported_instances", "pci_stats",
                 "numa_topology")
# Distinct report texts kept parsed.
_PARSED_TEXTS_MAX = 20_000


@dataclasses.dataclass
class _Service:
    """What the table needs of a host's compute service."""

    disabled: bool
    reason: str | None
    updated: float  # epoch seconds of the last heartbeat


def _json(text: str | None, default: Any) -> Any:
    if not text:
        return default
    try:
        return json_text.loads(text)
    except ValueError:
        return default


def _epoch(value) -> float:
    if value is None:
        return 0.0
    return value.replace(tzinfo=dt.timezone.utc).timestamp()


def _service_of(row: Mapping, heard: float) -> _Service:
    """A services row, its heartbeat the newer of the row's and ``heard``."""
    return _Service(bool(row["disabled"]), row["disabled_reason"],
                    max(_epoch(row["updated_at"]), heard))


def _services_of(rows: HostRows) -> dict[str, _Service]:
    """A full load's services by host, made before the table's lock is
    taken (10,000 rows' timestamps cost it about 25 ms)."""
    return {row["host"]: _service_of(row, 0.0) for row in rows.services}


class HostManager:
    """Owns the HostTable and keeps it in step with the database."""

    def __init__(self, source: HostSource | None = None):
        self.source = source if source is not None else ComputeReportsSource()
        self.lock = threading.RLock()
        self.table = HostTable()
        self._services: dict[str, _Service] = {}
        self._last_refresh_us = 0
        self._last_refresh_mono = 0.0
        self._last_full_mono = 0.0
        # One reader of the source at a time: an older read applied after
        # a newer one would take rows back.
        self._refreshing = threading.RLock()
        # The source answered a read of changes with everything.
        self._full_wanted = False
        # A HostRefresher keeps the table fresh: decisions do not read.
        self.refreshed_elsewhere = False
        # How many operators' changes (db.operator_changes) the table has
        # read at least; claims carry it (SchedulingCycle.claim_for).
        self.operator_changes = 0
        # row -> the descriptive texts its HostState was built from.
        self._described: dict[int, tuple] = {}
        self._parsed_texts: dict[str, Any] = {}
        # host -> instances it runs that hold no claim (reported by nova,
        # db.allocations.unclaimed_by_host): counted in num_instances.
        self._unclaimed: dict[str, int] = {}
        # How far behind the queue runs, and a broker outage's length with
        # when its grace ends (monotonic): see set_report_lag.
        self._backlog = 0.0
        self._outage: tuple[float, float] | None = None

    # -- reconciliation ---------------------------------------------------
    def full_resync(self, between_decisions=None) -> None:
        """Reload every node, service and aggregate from the source.

        The rows are applied to the table as it stands, a few hundred at a
        time under the table's lock, so that decisions and reports go on
        meanwhile (a rebuild at 10,000 hosts held every one of them for
        250-450 ms). Only an empty table, or one a quarter of whose rows
        are deleted nodes, is built anew: that replaces the table, and
        ``between_decisions`` (``SchedulingCycle``'s lock; None: the caller
        holds it) is taken for it, so that no decision holds rows of the
        old one.
        """
        with self._refreshing:
            started_us = db_api.now_us()
            # The nodes known before the read: a node joins the table only
            # once its row is stored (a report's writer, a read of changed
            # rows), so each of them is in the read unless deleted; one that
            # joins while it runs is not taken for gone.
            with self.lock:
                known = list(self.table.index)
            rows = self.source.load_all()
            live = {(node["host"], node["hypervisor_hostname"]) for node in rows.nodes
                    if not node["deleted"]}
            gone = [key for key in known if key not in live]
            if known and len(gone) * 4 < len(known):
                self._reapply(rows, len(live), gone, started_us)
                return
            with between_decisions or contextlib.nullcontext():
                self._rebuild(rows, started_us)

    def _reapply(self, rows: HostRows, live: int, gone: list, started_us: int) -> None:
        """Every row of the source applied to the table in place (a full
        resync of a table worth keeping); ``gone``: the nodes known before
        the read that it no longer has, or has deleted."""
        services = _services_of(rows)
        with self.lock:
            self._replace_services(services)
            # Every node's num_instances is counted again below, with these.
            self._unclaimed = rows.unclaimed or {}
            self.table.set_aggregates(rows.aggregates or [])
            for key in gone:
                row = self.table.index.get(key)
                if row is not None:
                    self.table.deactivate(row)
            # The services and aggregates, where operators' changes land,
            # are in place from here on.
            self._count_operator_changes(rows)
        for start in range(0, len(rows.nodes), _REAPPLIED_PER_LOCK):
            with self.lock:
                for node in rows.nodes[start:start + _REAPPLIED_PER_LOCK]:
                    self._apply_node(node)
            # A thread woken by the release would otherwise find the lock
            # taken again by the next chunk before it runs.
            time.sleep(_BETWEEN_CHUNKS_S)
        with self.lock:
            self._loaded_all(started_us)
        LOG.info("Reloaded %d compute nodes and %d aggregates", live,
                 len(rows.aggregates or ()))

    def _rebuild(self, rows: HostRows, started_us: int) -> None:
        fresh = HostTable(capacity=max(64, len(rows.nodes)))
        services = _services_of(rows)
        with self.lock:
            fresh.report_lag = self.table.report_lag
            self.table.retire()
            self.table = fresh
            self._described = {}
            self._replace_services(services)
            self._unclaimed = rows.unclaimed or {}
            self.table.set_aggregates(rows.aggregates or [])
            for row in rows.nodes:
                if not row["deleted"]:
                    self._apply_node(row)
            self._count_operator_changes(rows)
            self._loaded_all(started_us)
        LOG.info("Loaded %d compute nodes and %d aggregates", len(self.table.index),
                 len(rows.aggregates or ()))

    def _replace_services(self, services: dict[str, _Service]) -> None:
        """The services of a full load, each keeping the newer heartbeat
        this daemon heard itself (see ``_remember_service``); the caller
        holds ``self.lock``."""
        for host, service in services.items():
            known = self._services.get(host)
            if known is not None and known.updated > service.updated:
                service.updated = known.updated
        self._services = services

    def _loaded_all(self, started_us: int) -> None:
        self._last_refresh_us = started_us
        self._last_refresh_mono = self._last_full_mono = time.monotonic()
        self._full_wanted = False

    def full_resync_due(self) -> bool:
        """Whether the next refresh must reload everything."""
        return self._full_wanted or (
            self.source.periodic_resync and time.monotonic() - self._last_full_mono
            > CONF.scheduler.host_state_resync_interval)

    def refresh(self, force: bool = False) -> None:
        """Bring the table up to date before a decision: read what changed
        since the last look (rate-limited unless forced), or everything
        when a full resync is due. While a HostRefresher keeps the table
        fresh, only a forced refresh reads."""
        if self.refreshed_elsewhere and not force:
            return
        if self.full_resync_due():
            self.full_resync()
            return
        if not force and time.monotonic() - self._last_refresh_mono < REFRESH_INTERVAL:
            return
        self.refresh_changes()

    def refresh_changes(self, may_rebuild: bool = True) -> None:
        """Read and apply the rows changed since the last look. A source
        answering with everything rebuilds the table, or, where the caller
        may not replace it (``may_rebuild`` False: decisions may be holding
        its rows), makes a full resync due instead."""
        with self._refreshing:
            now = time.monotonic()
            started_us = db_api.now_us()
            rows = self.source.load_changed(self._last_refresh_us - _OVERLAP_US)
            if rows.full:
                if may_rebuild:
                    self._rebuild(rows, started_us)
                else:
                    self._full_wanted = True
                return
            with self.lock:
                self._apply_rows(rows)
                self._last_refresh_us = started_us
                self._last_refresh_mono = now

    def _apply_rows(self, rows: HostRows) -> None:
        for service in rows.services:
            self._apply_service(service)
        if rows.unclaimed is not None:
            self._set_unclaimed(rows.unclaimed)
        for row in rows.nodes:
            self._apply_node(row)
        if rows.aggregates is not None:
            self.table.set_aggregates(rows.aggregates)
        self._count_operator_changes(rows)

    def _count_operator_changes(self, rows: HostRows) -> None:
        if rows.operator_changes is not None:
            self.operator_changes = rows.operator_changes

    def catch_up(self) -> None:
        """Apply every change an operator made before this call, and what
        the source was told meanwhile, before returning (read your writes).

        With a source that counts operators' changes, one read of the
        count, and a read of what changed only when the table is behind
        it; a source without one applies what it holds in memory (nova's
        fanout casts). The caller must not hold ``SchedulingCycle``'s lock:
        a refresh under way may be waiting for it to rebuild the table.
        """
        changes = self.source.operator_changes()
        if changes is None or changes > self.operator_changes:
            self.refresh_changes(may_rebuild=False)

    def behind_operators(self, seen: int) -> bool:
        """Whether operators made more changes than the ``seen`` a decision
        read from ``operator_changes`` before it began (one read of the
        count; False for a source without one)."""
        changes = self.source.operator_changes()
        return changes is not None and changes > seen

    def has_unclaimed(self) -> bool:
        """Whether any host runs instances without a claim."""
        return bool(self._unclaimed)

    def recount_unclaimed(self) -> None:
        """Re-read the instances hosts run without a claim (after nova said
        which instances a host runs) and count them in num_instances."""
        unclaimed = self.source.unclaimed_by_host()
        with self.lock:
            self._set_unclaimed(unclaimed)

    def _set_unclaimed(self, unclaimed: dict[str, int]) -> None:
        table = self.table
        for host in set(unclaimed) | set(self._unclaimed):
            change = unclaimed.get(host, 0) - self._unclaimed.get(host, 0)
            for row in table.host_rows.get(host, ()):
                table.columns["num_instances"][row] += change
        self._unclaimed = unclaimed

    def set_report_lag(self, seconds: float) -> None:
        """How far behind its queue the daemon runs: a host's reports wait
        there too, so its heartbeat is judged as of that long ago."""
        self._backlog = max(0.0, float(seconds))
        self._apply_report_lag()

    def note_broker_outage(self, seconds: float) -> None:
        """The daemon was without the broker for ``seconds``: no heartbeat
        could reach it meanwhile. Until ``service_down_time`` after it came
        back, heartbeats are judged as of that long ago, so that a node
        alive before the outage is not taken for down because of it (it
        reports again within its interval)."""
        length = max(0.0, float(seconds))
        ends = time.monotonic() + CONF.service_down_time + length
        if self._outage is not None and time.monotonic() < self._outage[1]:
            # A short reconnect right after a long outage keeps the long
            # one's grace.
            length, ends = max(length, self._outage[0]), max(ends, self._outage[1])
        self._outage = (length, ends)
        self._apply_report_lag()

    def _apply_report_lag(self) -> None:
        lag = self._backlog
        if self._outage is not None:
            length, ends = self._outage
            if time.monotonic() < ends:
                lag = max(lag, length)
            else:
                self._outage = None
        self.table.report_lag = lag

    def read_through_us(self) -> int:
        """Every row change stamped before this has been read by this table."""
        return max(0, self._last_refresh_us - _OVERLAP_US)

    def refresh_node(self, node_id: int) -> None:
        """Re-read one node and its service: after a report this daemon
        stored, a release, or another daemon winning a claim on it."""
        rows = self.source.load_node(node_id)
        with self.lock:
            self._apply_rows(rows)

    def settle_doubts(self) -> bool:
        """Have the source read again the nodes whose figures may count a
        claim twice; whether any was read."""
        rows = self.source.settle_doubts()
        if rows is None:
            return False
        with self.lock:
            self._apply_rows(rows)
        return True

    def hosts_of(self, instance_uuids) -> dict[str, str]:
        """uuid -> host of the instances that are on a host or claimed."""
        return self.source.hosts_of(instance_uuids)

    def unreachable_cells(self) -> frozenset[str]:
        """Uuids of the cells whose database the source's last read could
        not reach (none for a source without cells)."""
        unreachable = getattr(self.source, "unreachable_cells", None)
        return unreachable() if unreachable is not None else frozenset()

    def provider_host(self, node_uuid: str) -> tuple[str, int] | None:
        """(host, node id) of the node whose uuid (resource provider) this
        is, or whose provider tree holds it (a GPU or PCI device under it,
        where the source keeps Placement's model)."""
        model = getattr(self.source, "provider_model", None)
        if model is not None:
            provider = model.providers.get(node_uuid)
            if provider is not None:
                node_uuid = provider.root_uuid
        with self.lock:
            for state in self.table.states:
                if state.uuid == node_uuid:
                    return state.host, state.node_id
        return None

    # -- applying rows ------------------------------------------------------
    def _remember_service(self, row: Mapping) -> _Service:
        """A services row read from the database. Its heartbeat is the newer of
        the row's and the last report this daemon applied itself: a report
        applied but not yet stored, as during a database outage, must not be
        taken back by an older row."""
        known = self._services.get(row["host"])
        service = self._services[row["host"]] = _service_of(
            row, known.updated if known is not None else 0.0)
        return service

    def _apply_service(self, row: Mapping) -> None:
        service = self._remember_service(row)
        table = self.table
        for table_row in table.host_rows.get(row["host"], []):
            table.columns["service_updated"][table_row] = service.updated
            table.columns["disabled"][table_row] = service.disabled
            table.states[table_row].disabled_reason = service.reason

    def _apply_node(self, node: Mapping) -> None:
        """A compute_nodes row read from the database (claims included)."""
        if node["deleted"]:
            row = self.table.row_of(node["host"], node["hypervisor_hostname"])
            if row is not None:
                self.table.deactivate(row)
            return
        self._apply(node, node["id"], claims=node)

    def apply_report(self, values: Mapping, node_id: int) -> None:
        """A validated report of node ``node_id``: the figures it reports and a
        heartbeat now. Claims are the scheduler's own and stay as they are."""
        now = time.time()
        with self.lock:
            service = self._services.get(values["host"])
            if service is None:
                self._services[values["host"]] = _Service(False, None, now)
            else:
                service.updated = now
            self._apply(values, node_id, claims=None)

    def _apply(self, node: Mapping, node_id: int, claims: Mapping | None) -> None:
        table = self.table
        service = self._services.get(node["host"])
        row = table.row_of(node["host"], node["hypervisor_hostname"])
        described = tuple(
            sys.intern(node[field]) if field in _SHARED_TEXTS and node.get(field)
            else node.get(field) for field in _DESCRIPTIVE)
        stats = _json(node.get("stats"), {})
        stats = stats if isinstance(stats, dict) else {}
        io_ops = stats.get("io_workload", node.get("current_workload"))
        try:
            io_ops = int(io_ops or 0)
        except (TypeError, ValueError):
            io_ops = 0
        values = {
            "memory_mb": node["memory_mb"] or 0,
            "vcpus": node["vcpus"] or 0,
            "disk_mb": (node["local_gb"] or 0) * 1024,
            "reserved_memory_mb": node.get("reserved_host_memory_mb") or 0,
            "reserved_disk_mb": node.get("reserved_host_disk_mb") or 0,
            "reserved_cpus": node.get("reserved_host_cpus") or 0,
            "num_io_ops": io_ops,
            "disabled": service.disabled if service else False,
            "service_updated": service.updated if service else 0.0,
            "active": True,
        }
        if claims is not None:
            values.update(claimed_memory_mb=claims["claimed_memory_mb"],
                          claimed_vcpus=claims["claimed_vcpus"],
                          claimed_disk_mb=claims["claimed_disk_mb"],
                          num_instances=claims["claimed_instances"]
                          + self._unclaimed.get(node["host"], 0))
        # The node's own ratios (NULL: none, 0.0 in the table);
        # scheduler.cloud.resources decides which ratio applies.
        for resource in RESOURCES:
            values[NODE_RATIO_COLUMNS[resource.name]] = float(
                node.get(resource.ratio_option) or 0.0)
        if (row is not None and self._described.get(row) == described
                and table.states[row].node_id == node_id):
            # Only the figures moved: no new HostState, nothing re-parsed.
            table.update_row(row, values)
            return
        text = dict(zip(_DESCRIPTIVE, described))
        state = HostState(
            host=node["host"],
            nodename=node["hypervisor_hostname"],
            node_id=node_id,
            uuid=text["uuid"],
            cell_uuid=text["cell_uuid"],
            hypervisor_type=text["hypervisor_type"],
            hypervisor_version=text["hypervisor_version"],
            hypervisor_hostname=node["hypervisor_hostname"],
            cpu_info=text["cpu_info"],
            host_ip=text["host_ip"],
            supported_instances=self._parsed(text["supported_instances"], []),
            stats=stats,
            metrics=_json(text["metrics"], []),
            pci_stats=self._parsed(text["pci_stats"], []),
            numa_topology=self._parsed(text["numa_topology"], None),
            disabled_reason=service.reason if service else None,
        )
        if claims is None and row is None:
            values.update(claimed_memory_mb=0, claimed_vcpus=0, claimed_disk_mb=0,
                          num_instances=0)
        row = table.upsert(state, values)
        self._described[row] = described

    def _parsed(self, text: str | None, default: Any) -> Any:
        """A report's JSON text, parsed once per distinct text: hosts of one
        model share their capabilities, PCI pools and NUMA cells (and the
        parsed objects, which nothing modifies). Stats differ per host and
        are not kept here."""
        if not text:
            return default
        cache = self._parsed_texts
        value = cache.get(text)
        if value is None:
            value = _json(text, default)
            if len(cache) >= _PARSED_TEXTS_MAX:
                cache.clear()
            cache[text] = value
        return value

    # -- events from this daemon ------------------------------------------------
    def node_id_of(self, host: str, nodename: str) -> int | None:
        """The id of a node the table holds (None for one it has not seen)."""
        row = self.table.row_of(host, nodename)
        return None if row is None else self.table.states[row].node_id

    def note_deleted(self, host: str, nodename: str) -> None:
        with self.lock:
            row = self.table.row_of(host, nodename)
            if row is not None:
                self.table.deactivate(row)

    def consume(self, row: int, claim: Claim) -> None:
        """Count a successful claim in the cache, so the next instance sees it."""
        with self.lock:
            cols = self.table.columns
            cols["claimed_memory_mb"][row] += claim.memory_mb
            cols["claimed_vcpus"][row] += claim.vcpus
            cols["claimed_disk_mb"][row] += claim.disk_mb
            cols["num_instances"][row] += 1
            # nova counts a build as an I/O operation until the node reports.
            cols["num_io_ops"][row] += 1
            state = self.table.states[row]
        if claim.instance_uuid:
            self.source.note_claimed(claim, state.host)

    def candidates(self) -> np.ndarray:
        """Rows of every live node (filters then narrow them down)."""
        return self.table.active_rows()
