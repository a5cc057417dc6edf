"""Kind codes: per-row integers saying which nodes look alike to a filter.

Fleets are made of few kinds of node. A filter whose verdict depends on a
node only through what the node *reported* (its ``supported_instances`` and
hypervisor version, its PCI pools, the capability an extra spec reads, the
metrics it sends) asks the host table's ``HostKinds`` for the codes of a
*kind*: a function of the node's HostState, named once. Equal values get
equal codes, so a decision hands the codes to ``alike_hosts.judge_rows``
and judges one node per code, whatever the size of the fleet.

Codes are worked out for every row the first time a kind is asked for, then
kept current by the table: ``HostTable.upsert`` (a node's new report, which
brings a new HostState) calls ``HostKinds.update`` for the row. Figures that
claims change (free RAM, instance counts, ratios) are columns, never kinds:
a kind's function must read only the report's descriptive fields, which
stay as they are until the node's next report. Aggregates are the table's
own codes (``agg_code``, ``az_code``).

Besides codes, a kind may be a fixed-width row of numbers (``numbers``): a
node's parsed address, its NUMA cells' figures, one metric's value, so that
filters and weighers over them are vector operations.

The module also says what each attribute of a HostState is, for the
filters whose requests name attributes (ComputeCapabilitiesFilter,
JsonFilter): a report field (a kind), a figure (``figure_column``), an
aggregate code, or something to read host by host.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import weakref
from typing import TYPE_CHECKING, Any, Callable, Hashable

import numpy as np

from nova_sched.capacity import DISK, RAM, VCPU

if TYPE_CHECKING:
    from nova_sched.scheduler.cloud.host_state import HostState, HostTable

# Kinds kept current at once; the least recently asked is dropped beyond
# this (requests can name any capability path or JSON variable, and every
# kind costs a little at each report and 4 bytes per row).
MAX_KINDS = 32


def freeze(value: Any) -> Hashable:
    """A hashable image of ``value``: equal only for values that compare,
    print and nest alike (``1``, ``1.0`` and ``True`` stay apart)."""
    cls = value.__class__
    if cls is str:
        return value
    if cls is list or cls is tuple:
        return (cls, tuple(freeze(item) for item in value))
    if cls is dict:
        try:
            items = sorted((freeze(k), freeze(v)) for k, v in value.items())
        except TypeError:  # keys of mixed types
            items = sorted(((freeze(k), freeze(v)) for k, v in value.items()),
                           key=repr)
        return (dict, tuple(items))
    if cls is set or cls is frozenset:
        return (frozenset, frozenset(freeze(item) for item in value))
    try:
        hash(value)
    except TypeError:
        return _Unshared()  # nothing else is alike
    return (cls, value)


class _Unshared:
    """A key equal to nothing but itself."""


@dataclasses.dataclass
class _CodeKind:
    """Interned values of one kind and each row's code."""

    value_of: Callable[["HostState"], Any]
    codes: np.ndarray
    index: dict = dataclasses.field(default_factory=dict)
    values: list = dataclasses.field(default_factory=list)

    def compute(self, state) -> int:
        value = self.value_of(state)
        key = freeze(value)
        code = self.index.get(key)
        if code is None:
            code = self.index[key] = len(self.values)
            self.values.append(value)
        return code

    def set(self, row: int, state) -> None:
        self.codes[row] = self.compute(state)

    def compact(self, size: int) -> None:
        """Forget values no row has any more (reports moved on)."""
        used, remapped = np.unique(self.codes[:size], return_inverse=True)
        keys = {code: key for key, code in self.index.items()}
        self.values = [self.values[c] for c in used.tolist()]
        self.index = {keys[c]: i for i, c in enumerate(used.tolist())}
        self.codes[:size] = remapped


@dataclasses.dataclass
class _NumberKind:
    """A number, or a fixed number of them, per node."""

    value_of: Callable[["HostState"], Any]
    codes: np.ndarray  # (capacity,) or (width, capacity)

    def set(self, row: int, state) -> None:
        self.codes[..., row] = self.value_of(state)


class HostKinds:
    """The kinds of a HostTable's rows, by name (see the module docstring)."""

    def __init__(self, table: "HostTable"):
        # A proxy: the table holds its kinds, and a strong reference back
        # would make a cycle that only the cyclic collector's full pass
        # frees once a rebuild replaced the table (nova_sched.long_lived).
        self._table = weakref.proxy(table)
        self._kinds: collections.OrderedDict = collections.OrderedDict()
        # name -> (the table's aggregate_sets list, a value per set).
        self._by_aggregates: dict[Hashable, tuple[list, list]] = {}

    def codes(self, name: Hashable, value_of: Callable[["HostState"], Any]
              ) -> np.ndarray:
        """Each row's code of the kind ``name`` (``value_of(state)``
        interned), for every row of the table."""
        kind = self._kind(name, lambda: _CodeKind(
            value_of, np.zeros(self._capacity(), dtype=np.int32)))
        return kind.codes[: self._table.size]

    def values(self, name: Hashable) -> list:
        """code -> the value it stands for, for a kind asked with ``codes``."""
        return self._kinds[name].values

    def numbers(self, name: Hashable, value_of: Callable[["HostState"], Any],
                dtype=np.float64, width: int | None = None) -> np.ndarray:
        """Each row's ``value_of(state)``: a number, or ``width`` numbers.

        With ``width`` the array is ``(width, rows)``: its k-th row holds
        every node's k-th number (contiguous, for vector operations).
        """
        shape = (self._capacity(),) if width is None else (width, self._capacity())
        kind = self._kind(name, lambda: _NumberKind(value_of, np.zeros(shape, dtype)))
        return kind.codes[..., : self._table.size]

    def per_aggregate_set(self, name: Hashable,
                          value_of: Callable[[tuple], Any]) -> list:
        """``value_of(aggregates)`` for each set of aggregates of the table
        (``agg_code`` indexes the list), kept until the aggregates change."""
        sets = self._table.aggregate_sets
        cached = self._by_aggregates.get(name)
        if cached is None or cached[0] is not sets:
            cached = self._by_aggregates[name] = (sets, [])
        values = cached[1]
        for aggregates in sets[len(values):]:
            values.append(value_of(aggregates))
        return values

    def update(self, row: int) -> None:
        """Row ``row`` holds a new HostState: recompute its kinds."""
        if not self._kinds:
            return
        state = self._table.states[row]
        for kind in self._kinds.values():
            if row >= kind.codes.shape[-1]:
                kind.codes = _grown(kind.codes, self._capacity())
            kind.set(row, state)
            if isinstance(kind, _CodeKind) and \
                    len(kind.values) > 2 * self._table.size + 64:
                kind.compact(self._table.size)

    def forget(self) -> None:
        """Drop every kind (they are recomputed when next asked)."""
        self._kinds.clear()
        self._by_aggregates.clear()

    # -- internals ------------------------------------------------------
    def _capacity(self) -> int:
        return max(self._table.size, 1)

    def _kind(self, name, make):
        kind = self._kinds.get(name)
        if kind is not None:
            self._kinds.move_to_end(name)
            return kind
        kind = make()
        states = self._table.states
        for row in range(self._table.size):
            kind.set(row, states[row])
        self._kinds[name] = kind
        while len(self._kinds) > MAX_KINDS:
            self._kinds.popitem(last=False)
        return kind


def _grown(array: np.ndarray, at_least: int) -> np.ndarray:
    """``array`` with room for more rows (its last axis)."""
    size = array.shape[-1]
    bigger = np.zeros(array.shape[:-1] + (max(at_least, 2 * size),), dtype=array.dtype)
    bigger[..., :size] = array
    return bigger


# -- what a HostState attribute is ----------------------------------------------

REPORT = "report"          # from the node's report: a kind
FIGURE = "figure"          # a number claims change: figure_column
AGGREGATES = "aggregates"  # the node's aggregates or zones: agg_code / az_code
BY_HOST = "by host"        # changes outside reports: read host by host
ABSENT = "absent"          # private, a method, or no such attribute

# Figures, as HostState computes them from its row, for many rows at once.
_FIGURES: dict[str, Callable[[Any, np.ndarray], np.ndarray]] = {
    "total_usable_ram_mb": lambda c, rows: c.resources.total(RAM, rows),
    "free_ram_mb": lambda c, rows: c.resources.unclaimed(RAM, rows),
    "vcpus_total": lambda c, rows: c.resources.total(VCPU, rows),
    "vcpus_used": lambda c, rows: c.resources.used(VCPU, rows),
    "total_usable_disk_gb": lambda c, rows: c.resources.total(DISK, rows) // 1024,
    "free_disk_mb": lambda c, rows: c.resources.unclaimed(DISK, rows),
    "ram_allocation_ratio": lambda c, rows: c.resources.ratio(RAM, rows),
    "cpu_allocation_ratio": lambda c, rows: c.resources.ratio(VCPU, rows),
    "disk_allocation_ratio": lambda c, rows: c.resources.ratio(DISK, rows),
    "num_instances": lambda c, rows: c.table.values_of("num_instances", rows),
    "num_io_ops": lambda c, rows: c.table.values_of("num_io_ops", rows),
    "service_disabled": lambda c, rows: c.table.values_of("disabled", rows),
    "service_updated": lambda c, rows: c.table.values_of("service_updated", rows),
}
_AGGREGATE_CODES = {"aggregates": "agg_code", "availability_zones": "az_code"}
# Fields the daemon changes without a new report.
_CHANGED_IN_PLACE = frozenset({"disabled_reason"})
# Properties computed from the report alone.
_REPORT_PROPERTIES = frozenset({"failed_builds"})


@functools.lru_cache(maxsize=256)
def attribute(name: str, state_class: type) -> str:
    """What the attribute ``name`` of ``state_class`` (HostState) is: REPORT, FIGURE, ...

    The class is passed in, not imported: the host table imports this
    module for its kinds.
    """
    HostState = state_class  # noqa: N806 - read as the class it is
    if not name or name.startswith("_"):
        return ABSENT
    if name in _FIGURES:
        return FIGURE
    if name in _AGGREGATE_CODES:
        return AGGREGATES
    if name in _CHANGED_IN_PLACE:
        return BY_HOST
    fields = {f.name for f in dataclasses.fields(HostState)}
    if name in fields or name in _REPORT_PROPERTIES:
        return REPORT
    found = getattr(HostState, name, None)
    if found is None:
        return ABSENT
    if isinstance(found, property):
        return BY_HOST  # a property this module does not know: ask each host
    return ABSENT if callable(found) else BY_HOST


def figure_column(cycle, name: str, rows: np.ndarray) -> np.ndarray:
    """The figure ``name`` (a FIGURE attribute) of each of ``rows``."""
    return _FIGURES[name](cycle, rows)


def aggregate_codes(cycle, name: str, rows: np.ndarray) -> tuple[np.ndarray, list]:
    """Codes of an AGGREGATES attribute for ``rows`` and code -> its value
    (the value HostState gives: a list of aggregates, a set of zones)."""
    table = cycle.table
    column = _AGGREGATE_CODES[name]
    if name == "aggregates":
        values = [list(aggs) for aggs in table.aggregate_sets]
    else:
        values = list(table.az_sets)
    return table.values_of(column, rows), values


def by_host_codes(cycle, rows: np.ndarray, value_of: Callable[["HostState"], Any]
                  ) -> tuple[np.ndarray, list]:
    """``value_of`` read host by host and interned: codes and their values.

    For attributes that are neither report fields nor known figures; a
    per-host loop, only for requests that name such an attribute.
    """
    states = cycle.table.states
    index: dict = {}
    values: list = []
    codes = np.empty(len(rows), dtype=np.int64)
    for i, row in enumerate(rows.tolist()):
        value = value_of(states[row])
        key = freeze(value)
        code = index.get(key)
        if code is None:
            code = index[key] = len(values)
            values.append(value)
        codes[i] = code
    return codes, values
