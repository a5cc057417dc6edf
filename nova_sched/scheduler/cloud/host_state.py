"""The in-memory host-state store: one row per compute node, in columns.

Numbers that filters and weighers compare (capacity, reservations, claims,
heartbeats) live in NumPy arrays indexed by row, so a decision over 100,000
nodes is a handful of vector operations. ``HostState`` is a thin per-node
view over its row plus the node's descriptive fields, so custom filters keep
nova's ``host_passes(host_state, spec)`` API and always see current numbers.

The store is mutated only under its owner's lock (HostManager): reports and
claims update rows in place; a decision reads them.

Rows are grouped by the set of aggregates their host belongs to
(``agg_code``, an index into ``aggregate_sets``): anything a host's
aggregates decide (its zones, an aggregate's ratio or multiplier) is worked
out once per set rather than once per host.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable

import numpy as np

from nova_sched.capacity import DISK, RAM, VCPU
from nova_sched.db.aggregates import AggregateInfo
from nova_sched.scheduler.cloud import host_kinds, monitor_metrics, resources
from nova_sched.scheduler.cloud.host_kinds import HostKinds

_INT_COLUMNS = (
    "node_id",
    "num_instances",
    "num_io_ops",
    "az_code",
    "agg_code",
    # Index into HostTable.cell_uuids: a move kept in its cell narrows the
    # candidates with one comparison over this column.
    "cell_code",
    # Derived from the descriptive fields at upsert, so that weighers over
    # them are column reads too.
    "hypervisor_version",
    "failed_builds",
)
# The node's own allocation ratios as it reported them (0: none reported).
NODE_RATIO_COLUMNS = {RAM.name: "node_ram_ratio", VCPU.name: "node_cpu_ratio",
                      DISK.name: "node_disk_ratio"}
_RATIO_COLUMN_NAMES = tuple(NODE_RATIO_COLUMNS.values())
# Each resource's total, reserved and claimed amounts. Whole numbers, kept
# as float64 because the resource model computes in it (``total x ratio -
# reserved``, then ``claimed + requested`` against that): int64 columns cost
# a decision a conversion pass over every row for each figure, the largest
# single item of its time at 100,000 hosts. Below 2**53 (8 EiB of MB) every
# whole number and every sum of them is exact in float64.
_FIGURE_COLUMNS = (
    "memory_mb",
    "vcpus",
    "disk_mb",
    "reserved_memory_mb",
    "reserved_disk_mb",
    "reserved_cpus",
    "claimed_memory_mb",
    "claimed_vcpus",
    "claimed_disk_mb",
)
# The columns a node's capacity is worked out from (what it can hand out,
# its smallest total): results over them are kept across decisions
# (``HostTable.capacity_derived``) until one of them changes.
_CAPACITY_COLUMNS = frozenset(
    ("memory_mb", "vcpus", "disk_mb", "reserved_memory_mb", "reserved_disk_mb",
     "reserved_cpus", "active") + tuple(NODE_RATIO_COLUMNS.values()))
_FLOAT_COLUMNS = (("service_updated",) + _FIGURE_COLUMNS
                  + tuple(NODE_RATIO_COLUMNS.values()))
_BOOL_COLUMNS = ("active", "disabled")
# Columns HostTable.upsert derives itself rather than taking from values.
_DERIVED_COLUMNS = ("node_id", "az_code", "agg_code", "cell_code",
                    "hypervisor_version", "failed_builds")
# The columns a caller of upsert supplies.
VALUE_COLUMNS = tuple(
    c for c in _INT_COLUMNS + _FLOAT_COLUMNS + _BOOL_COLUMNS
    if c not in _DERIVED_COLUMNS)


__all__ = ["AggregateInfo", "HostState", "HostTable", "VALUE_COLUMNS"]


@dataclasses.dataclass(eq=False)
class HostState:
    """One compute node as filters and weighers see it.

    Descriptive fields are plain attributes; resource figures are properties
    that read the node's row in the owning HostTable.
    """

    host: str
    nodename: str
    node_id: int
    uuid: str | None = None  # today's nova's compute node uuid
    cell_uuid: str | None = None  # the nova cell it was read from
    hypervisor_type: str | None = None
    hypervisor_version: int | None = None
    hypervisor_hostname: str | None = None
    cpu_info: Any = None
    host_ip: str | None = None
    supported_instances: list = dataclasses.field(default_factory=list)
    stats: dict = dataclasses.field(default_factory=dict)
    metrics: list = dataclasses.field(default_factory=list)
    # [{vendor_id, product_id, count, ...}] pools the node reports.
    pci_stats: list = dataclasses.field(default_factory=list)
    # {"cells": [{"id", "cpus": [..], "memory_mb", ...}]} or None.
    numa_topology: dict | None = None
    disabled_reason: str | None = None
    _table: "HostTable | None" = dataclasses.field(default=None, repr=False)
    _row: int = -1
    _derived: dict = dataclasses.field(default_factory=dict, repr=False)

    def _col(self, name: str):
        assert self._table is not None, "HostState is not attached to a table"
        return self._table.columns[name][self._row]

    # -- capacity: the resource model's figures for this node ---------
    def _figure(self, figure: str, resource) -> Any:
        assert self._table is not None, "HostState is not attached to a table"
        view = resources.view_of(self._table)
        return getattr(view, figure)(resource, np.array([self._row]))[0]

    @property
    def total_usable_ram_mb(self) -> int:
        return int(self._figure("total", RAM))

    @property
    def free_ram_mb(self) -> int:
        return int(self._figure("unclaimed", RAM))

    @property
    def vcpus_total(self) -> int:
        return int(self._figure("total", VCPU))

    @property
    def vcpus_used(self) -> int:
        return int(self._figure("used", VCPU))

    @property
    def total_usable_disk_gb(self) -> int:
        return int(self._figure("total", DISK)) // 1024

    @property
    def free_disk_mb(self) -> int:
        return int(self._figure("unclaimed", DISK))

    # -- the effective ratios (scheduler.cloud.resources decides which applies) --
    @property
    def ram_allocation_ratio(self) -> float:
        return float(self._figure("ratio", RAM))

    @property
    def cpu_allocation_ratio(self) -> float:
        return float(self._figure("ratio", VCPU))

    @property
    def disk_allocation_ratio(self) -> float:
        return float(self._figure("ratio", DISK))

    @property
    def num_instances(self) -> int:
        return int(self._col("num_instances"))

    @property
    def num_io_ops(self) -> int:
        return int(self._col("num_io_ops"))

    # -- service ------------------------------------------------------
    @property
    def service_disabled(self) -> bool:
        return bool(self._col("disabled"))

    @property
    def service_updated(self) -> float:
        """Epoch seconds of the last heartbeat (0 when never seen)."""
        return float(self._col("service_updated"))

    @property
    def failed_builds(self) -> int:
        """``stats['failed_builds']``: builds failed since the last success."""
        count = self.stats.get("failed_builds") if isinstance(self.stats, dict) else None
        try:
            count = int(count or 0)
        except (TypeError, ValueError, OverflowError):
            return 0
        return max(count, 0)

    @property
    def aggregates(self) -> list[AggregateInfo]:
        assert self._table is not None
        return list(self._table.aggregate_sets[int(self._col("agg_code"))])

    def numeric_metrics(self) -> dict[str, float]:
        """name -> value of the metrics this node reports with a finite number,
        as nova's scheduler sees them (``monitor_metrics``).

        What MetricsFilter checks and MetricsWeigher weighs (nova's
        metrics list of ``{"name", "value", ...}``), read once per report.
        """
        return self.derived("numeric_metrics", _numeric_metrics)

    def derived(self, name: str, compute: Callable[["HostState"], Any]) -> Any:
        """``compute(self)``, worked out once per report of this node.

        For what filters derive from a report (a parsed address, NUMA
        cells, PCI pools): a new report brings a new HostState, so the
        value never outlives the figures it came from.
        """
        try:
            return self._derived[name]
        except KeyError:
            value = self._derived[name] = compute(self)
            return value

    @property
    def availability_zones(self) -> frozenset[str]:
        """Zones from aggregate metadata; empty when in no zoned aggregate."""
        assert self._table is not None
        return self._table.az_sets[int(self._col("az_code"))]

    def __repr__(self) -> str:
        return f"HostState({self.host!r}, {self.nodename!r})"


def _numeric_metrics(host_state: HostState) -> dict[str, float]:
    found: dict[str, float] = {}
    for metric in host_state.metrics or ():
        if not isinstance(metric, dict) or not isinstance(metric.get("name"), str):
            continue
        value = monitor_metrics.scheduler_value(metric["name"], metric.get("value"))
        if value is not None:
            found[metric["name"]] = value
    return found


class HostTable:
    """Columns of every known compute node, addressed by row number.

    Rows are appended and never reused; a deleted node's row is marked
    inactive. A full resynchronisation builds a new table, which leaves the
    inactive rows behind.
    """

    def __init__(self, capacity: int = 64):
        self.size = 0
        self._capacity = max(capacity, 1)
        # Seconds the daemon runs behind its queue, where the reports that
        # stamp service_updated wait (HostManager.set_report_lag).
        self.report_lag = 0.0
        self._arrays: dict[str, np.ndarray] = {}
        self._every_row: np.ndarray | None = None
        # Rows marked inactive, and the node-ratio columns any report ever
        # set: what a decision would otherwise learn by reading every row
        # of a column (all active? any node with its own ratio?).
        self._inactive: set[int] = set()
        self._ratios_reported: set[str] = set()
        # Moves after any write that changed a _CAPACITY_COLUMNS value or
        # a node's aggregates; capacity_derived's results carry the value
        # they were worked out at.
        self._capacity_version = 0
        self._capacity_derived: dict[Any, tuple[tuple[int, int], Any]] = {}
        for name in _INT_COLUMNS:
            self._arrays[name] = np.zeros(self._capacity, dtype=np.int64)
        for name in _FLOAT_COLUMNS:
            self._arrays[name] = np.zeros(self._capacity, dtype=np.float64)
        for name in _BOOL_COLUMNS:
            self._arrays[name] = np.zeros(self._capacity, dtype=bool)
        self.states: list[HostState] = []
        # Moves when a row's node uuid (its resource provider) changes, so
        # that what is kept by row and uuid knows to work it out again.
        self.uuids_changed = 0
        # One shared supported_instances list per distinct content: fleets
        # have a few hardware kinds, so filters can judge each kind once.
        self._supported_kinds: dict[tuple, list] = {}
        self.index: dict[tuple[str, str], int] = {}
        self.node_rows: dict[int, int] = {}
        self.host_rows: dict[str, list[int]] = {}
        self.aggregates: list[AggregateInfo] = []
        self.aggregates_by_host: dict[str, list[AggregateInfo]] = {}
        # agg_code indexes aggregate_sets; code 0 is "in no aggregate".
        self.aggregate_sets: list[tuple[AggregateInfo, ...]] = [()]
        self._agg_codes: dict[tuple[int, ...], int] = {(): 0}
        # az_code indexes az_sets; code 0 is "no zone from aggregates".
        self.az_sets: list[frozenset[str]] = [frozenset()]
        self._az_codes: dict[frozenset[str], int] = {frozenset(): 0}
        # cell_code indexes cell_uuids; code 0 is "no cell" (a node not read
        # from nova's cells).
        self.cell_uuids: list[str | None] = [None]
        self._cell_codes: dict[str | None, int] = {None: 0}
        # Per-row kind codes of report-derived keys (scheduler.cloud.host_kinds).
        self.kinds = HostKinds(self)

    # -- columns --------------------------------------------------------
    @property
    def columns(self) -> dict[str, np.ndarray]:
        """Full-capacity arrays; rows past ``size`` are unused."""
        return self._arrays

    def col(self, name: str) -> np.ndarray:
        """The live part of one column (a view: writes go to the table)."""
        return self._arrays[name][: self.size]

    def active_rows(self) -> np.ndarray:
        """Rows of the live nodes, ascending: ``every_row()`` when all are."""
        if not self._inactive:
            return self.every_row()
        return np.flatnonzero(self._arrays["active"][: self.size])

    def ratio_reported(self, name: str) -> bool:
        """Whether any node's report set node-ratio column ``name`` (a
        ``NODE_RATIO_COLUMNS`` value) to something other than 0 since this
        table was built; False: the column is 0.0 on every row."""
        return name in self._ratios_reported

    def values_of(self, name: str, rows) -> np.ndarray:
        """Column ``name``'s values at ``rows`` (``pick`` of ``col(name)``)."""
        return self.pick(self.col(name), rows)

    def every_row(self) -> np.ndarray:
        """``0 .. size - 1``, read-only, the same array until the table grows:
        ``pick`` knows it by identity."""
        rows = self._every_row
        if rows is None or len(rows) != self.size:
            rows = np.arange(self.size)
            rows.flags.writeable = False
            self._every_row = rows
        return rows

    def pick(self, values: np.ndarray, rows) -> np.ndarray:
        """``values[rows]`` for an array with a value per row of this table.

        When ``rows`` is ``every_row()`` (the candidates of a decision before
        any filter removed one, in most clouds) that is the array itself,
        read-only: no gather of every row into a copy.
        """
        if rows is self._every_row:
            whole = values[: len(rows)].view()
            whole.flags.writeable = False
            return whole
        return values[rows] if isinstance(rows, slice) else values.take(rows)

    def capacity_derived(self, name: Any, compute: Callable[[], Any]) -> Any:
        """``compute()``, a result over the capacity columns of every row
        (say, what each node can hand out), kept under ``name`` until one
        of those columns changes, a node joins or aggregates change:
        reports mostly repeat a node's capacity, so decisions need not
        work it out again each time."""
        # Read before computing: a write meanwhile moves the version after
        # its values, so a result that may have missed it is never kept
        # as current.
        stamp = (self._capacity_version, self.size)
        kept = self._capacity_derived.get(name)
        if kept is not None and kept[0] == stamp:
            return kept[1]
        value = compute()
        self._capacity_derived[name] = (stamp, value)
        return value

    def _grow(self) -> None:
        self._capacity *= 2
        for name, arr in self._arrays.items():
            bigger = np.zeros(self._capacity, dtype=arr.dtype)
            bigger[: arr.shape[0]] = arr
            self._arrays[name] = bigger

    # -- rows -----------------------------------------------------------
    def upsert(self, state: HostState, values: dict[str, Any]) -> int:
        """Insert or update a node; ``values`` maps column names to numbers."""
        key = (state.host, state.nodename)
        row = self.index.get(key)
        if row is None:
            if self.size == self._capacity:
                self._grow()
            row = self.size
            self.size += 1
            self.states.append(state)
            self.index[key] = row
            self.host_rows.setdefault(state.host, []).append(row)
        else:
            old = self.states[row]
            if old.node_id != state.node_id:
                self.node_rows.pop(old.node_id, None)
            if old.uuid != state.uuid:
                self.uuids_changed += 1
            self.states[row] = state
        self.node_rows[state.node_id] = row
        state._table = self
        state._row = row
        state.supported_instances = self._shared_supported(state.supported_instances)
        values = dict(values)
        values.setdefault("active", True)
        values["node_id"] = state.node_id
        values["cell_code"] = self._cell_code(state.cell_uuid)
        values["hypervisor_version"] = min(int(state.hypervisor_version or 0), 2**62)
        values["failed_builds"] = min(state.failed_builds, 2**62)
        self._write(row, values)
        self._set_aggregate_codes(state.host, [row])
        self.kinds.update(row)
        return row

    def _cell_code(self, cell_uuid: str | None) -> int:
        code = self._cell_codes.get(cell_uuid)
        if code is None:
            code = self._cell_codes[cell_uuid] = len(self.cell_uuids)
            self.cell_uuids.append(cell_uuid)
        return code

    def cell_code(self, cell_uuid: str) -> int | None:
        """The ``cell_code`` of the nodes of cell ``cell_uuid``; None when
        no node was ever read from it."""
        return self._cell_codes.get(cell_uuid)

    def update_row(self, row: int, values: dict[str, Any]) -> None:
        """New figures for a node whose report describes it as before."""
        self._write(row, values)

    def _write(self, row: int, values: dict[str, Any]) -> None:
        changed = False
        for name, value in values.items():
            column = self._arrays[name]
            if name in _CAPACITY_COLUMNS and column[row] != value:
                changed = True
            column[row] = value
        if changed:
            self._capacity_version += 1
        active = values.get("active")
        if active is not None:
            if active:
                self._inactive.discard(row)
            else:
                self._inactive.add(row)
        for name in _RATIO_COLUMN_NAMES:
            if values.get(name):
                self._ratios_reported.add(name)

    def _shared_supported(self, supported: list) -> list:
        try:
            key = tuple(tuple(item) if isinstance(item, (list, tuple)) else item
                        for item in supported or ())
            return self._supported_kinds.setdefault(key, supported)
        except TypeError:  # unhashable entries: keep the node's own list
            return supported

    def retire(self) -> None:
        """Let go of every host's state, once a rebuilt table replaced this
        one: each state points back at its table, and reference counting
        frees the old table only without that cycle (the cyclic collector
        would need a full pass over every long-lived object,
        nova_sched.long_lived). A state still held elsewhere keeps reading
        its row."""
        self.states = []

    def deactivate(self, row: int) -> None:
        self._arrays["active"][row] = False
        self._inactive.add(row)
        self._capacity_version += 1

    def row_of(self, host: str, nodename: str) -> int | None:
        return self.index.get((host, nodename))

    def state(self, row: int) -> HostState:
        return self.states[row]

    # -- aggregates -------------------------------------------------------
    def set_aggregates(self, aggregates: Iterable[AggregateInfo]) -> None:
        """Replace every aggregate and regroup the nodes by them."""
        self.aggregates = list(aggregates)
        by_host: dict[str, list[AggregateInfo]] = {}
        for agg in self.aggregates:
            for host in agg.hosts:
                by_host.setdefault(host, []).append(agg)
        self.aggregates_by_host = by_host
        self.aggregate_sets = [()]
        self._agg_codes = {(): 0}
        for host, rows in self.host_rows.items():
            self._set_aggregate_codes(host, rows)

    def _set_aggregate_codes(self, host: str, rows: list[int]) -> None:
        aggs = self.aggregates_by_host.get(host)
        if not aggs:
            # Most hosts: in no aggregate, code 0 and the empty zone set.
            code = zone_code = 0
        else:
            aggs = tuple(aggs)
            key = tuple(agg.id for agg in aggs)
            code = self._agg_codes.get(key)
            if code is None:
                code = self._agg_codes[key] = len(self.aggregate_sets)
                self.aggregate_sets.append(aggs)
            zones = frozenset(agg.metadata["availability_zone"] for agg in aggs
                              if "availability_zone" in agg.metadata)
            zone_code = self._az_codes.get(zones)
            if zone_code is None:
                zone_code = self._az_codes[zones] = len(self.az_sets)
                self.az_sets.append(zones)
        agg_codes, az_codes = self._arrays["agg_code"], self._arrays["az_code"]
        for row in rows:
            agg_codes[row] = code
            az_codes[row] = zone_code
        self._capacity_version += 1  # aggregates may set a node's ratios


def attribute_kind(name: str) -> str:
    """What HostState's attribute ``name`` is (``host_kinds.REPORT``, ``FIGURE``, ...)."""
    return host_kinds.attribute(name, HostState)
