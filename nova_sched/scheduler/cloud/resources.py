"""The resource model: each node's effective ratio, limit and free amount.

One place decides which allocation ratio applies to a node, for RAM, vCPUs
and disk alike (CONTRACT section 3):

1. the node's own ratio, when its report carries one (today's nova sends
   ``cpu_allocation_ratio`` and friends; absent, null or 0.0 mean none);
2. else, while the resource's Aggregate*Filter is enabled, the smallest
   ``*_allocation_ratio`` of the node's aggregates;
3. else the ``[filter_scheduler]`` option.

From the ratio, ``nova_sched.capacity`` gives the limit (``total x ratio -
reserved``) and the fit (``claimed + requested <= limit``). Filters,
weighers, the ``limits`` sent to the compute node, the claim (which carries
the ratios the decision used into its guarded UPDATE) and the demo's report
all read these figures here, so they cannot disagree.

``ResourceView`` serves one decision over the host table: it computes each
resource's ratios (and, when asked for most rows, fits) for the whole
table on first use and keeps them until the decision ends. Each node's
limit and the live nodes' smallest total outlive the decision: the host
table keeps them (``HostTable.capacity_derived``) until a node's capacity,
its aggregates or the ratio option change, which reports seldom do.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np

from nova_sched import capacity
from nova_sched.capacity import DISK, RAM, RESOURCES, VCPU, Resource
from nova_sched.conf import CONF
from nova_sched.scheduler.cloud import aggregate_metadata

if TYPE_CHECKING:
    from nova_sched.scheduler.cloud.host_state import HostTable
    from nova_sched.scheduler.wire.request import RequestSpec

# HostTable columns of each resource: total, reserved, claimed, own ratio.
_COLUMNS = {
    RAM.name: ("memory_mb", "reserved_memory_mb", "claimed_memory_mb",
               "node_ram_ratio"),
    VCPU.name: ("vcpus", "reserved_cpus", "claimed_vcpus", "node_cpu_ratio"),
    DISK.name: ("disk_mb", "reserved_disk_mb", "claimed_disk_mb",
                "node_disk_ratio"),
}


def requested(spec: "RequestSpec") -> dict[str, int]:
    """What one instance of the request takes of each resource."""
    return {RAM.name: spec.memory_mb, VCPU.name: spec.vcpus,
            DISK.name: spec.disk_mb}


# The group's handle, kept (see nova_sched.conf).
_FILTER_SCHEDULER = CONF.filter_scheduler


def option_ratio(resource: Resource) -> float:
    """The cloud-wide ratio of ``[filter_scheduler]``."""
    return float(_FILTER_SCHEDULER[resource.ratio_option])


def aggregates_apply(resource: Resource) -> bool:
    """Whether aggregates may set this resource's ratio (its Aggregate*Filter runs)."""
    return resource.aggregate_filter in _FILTER_SCHEDULER.enabled_filters


def effective_ratio(resource: Resource, node_ratio, aggregate_ratio):
    """The rule above, on arrays or scalars.

    ``node_ratio`` is what the node reported (0 or NaN for none);
    ``aggregate_ratio`` the smallest of its aggregates' values (NaN for
    none), ignored unless the resource's Aggregate*Filter is enabled.
    """
    ratio = option_ratio(resource)
    if aggregates_apply(resource):
        ratio = np.where(np.isnan(aggregate_ratio), ratio, aggregate_ratio)
    node_ratio = np.nan_to_num(np.asarray(node_ratio, dtype=np.float64))
    return np.where(node_ratio > 0, node_ratio, ratio)


def aggregate_ratio(resource: Resource, aggregates) -> float:
    """The smallest of the aggregates' ratios for ``resource``; NaN for none."""
    return aggregate_metadata.number(aggregates, resource.ratio_option, np.nan)


# Rows computed at once by _by_blocks: the temporaries of a block stay small
# (and in the CPU's caches) instead of being fresh arrays of every row.
_BLOCK = 16384


def _by_blocks(size: int, compute) -> np.ndarray:
    """``compute(slice(None))`` worked out block by block of rows."""
    if size <= _BLOCK:
        return compute(slice(0, size))
    first = compute(slice(0, _BLOCK))
    whole = np.empty(size, dtype=first.dtype)
    whole[:_BLOCK] = first
    for start in range(_BLOCK, size, _BLOCK):
        whole[start:start + _BLOCK] = compute(slice(start, start + _BLOCK))
    return whole


class ResourceView:
    """Ratios, limits and free amounts of a host table's nodes, for one decision."""

    def __init__(self, table: "HostTable"):
        self.table = table
        self._ratios: dict[str, np.ndarray] = {}
        # Per resource, its ratio option and whether aggregates apply, read
        # once a decision (a reload may change them between two).
        self._options: dict[str, tuple[float, bool]] = {}
        # Figures of every row worked out for this decision, by name.
        self._whole: dict[tuple, np.ndarray] = {}

    def _column(self, resource: Resource, which: int, rows) -> np.ndarray:
        return self.table.values_of(_COLUMNS[resource.name][which], rows)

    def total(self, resource: Resource, rows) -> np.ndarray:
        return self._column(resource, 0, rows)

    def reserved(self, resource: Resource, rows) -> np.ndarray:
        return self._column(resource, 1, rows)

    def claimed(self, resource: Resource, rows) -> np.ndarray:
        return self._column(resource, 2, rows)

    def _ratios_of(self, resource: Resource, rows) -> np.ndarray | float:
        """The effective ratios of ``rows``: one number when all share it."""
        ratios = self._ratios.get(resource.name)
        if ratios is None:
            ratios = self._ratios[resource.name] = self._compute_ratios(resource)
        return ratios if isinstance(ratios, float) else self.table.pick(ratios, rows)

    def _compute_ratios(self, resource: Resource) -> np.ndarray | float:
        name = _COLUMNS[resource.name][3]
        own = self.table.col(name)
        # 0.0 for every node (none reports its own ratio) gives the same
        # ratios as the column, without going over it; the table knows when
        # no report ever set one, which spares the count over every row.
        node_ratios = (own if self.table.ratio_reported(name) and np.count_nonzero(own)
                       else 0.0)
        option, applies = self._options_of(resource)
        if applies and aggregate_metadata.uses_key(self.table, resource.ratio_option):
            if isinstance(node_ratios, float):
                # The rule once per set of aggregates, then spread.
                return aggregate_metadata.per_row(
                    self.table, None,
                    lambda aggs: float(effective_ratio(
                        resource, 0.0, aggregate_ratio(resource, aggs))),
                    name=("effective_ratio", resource.ratio_option, option))
            from_aggs = aggregate_metadata.per_row(
                self.table, None, lambda aggs: aggregate_ratio(resource, aggs),
                name=("aggregate_ratio", resource.ratio_option))
            return effective_ratio(resource, node_ratios, from_aggs)
        if isinstance(node_ratios, float):
            # The usual cloud: the option for every node, no array needed.
            return option
        return effective_ratio(resource, node_ratios, np.nan)

    def ratios(self, resource: Resource) -> np.ndarray | float:
        """Every row's effective ratio; one number when all share it."""
        return self._ratios_of(resource, slice(None))

    def ratio(self, resource: Resource, rows) -> np.ndarray:
        """The effective allocation ratio of each row."""
        ratios = self._ratios_of(resource, rows)
        if isinstance(ratios, float):
            return np.full(len(np.atleast_1d(rows)), ratios)
        return ratios

    def limit(self, resource: Resource, rows) -> np.ndarray:
        """What each node can hand out: ``total x ratio - reserved``."""
        return self._over(rows, None, lambda sel: self._limit(resource, sel))

    def _limit(self, resource: Resource, rows) -> np.ndarray:
        if isinstance(rows, slice):
            # A block of every row's: kept by the table across decisions.
            return self._limits(resource)[rows]
        return capacity.limit(self.total(resource, rows), self._ratios_of(resource, rows),
                              self.reserved(resource, rows))

    def _limits(self, resource: Resource) -> np.ndarray:
        """Every row's limit, worked out again only when a node's capacity,
        its aggregates or the ratio option changed."""
        def every_row() -> np.ndarray:
            return _by_blocks(self.table.size, lambda sel: capacity.limit(
                self.total(resource, sel), self._ratios_of(resource, sel),
                self.reserved(resource, sel)))

        return self.table.capacity_derived(
            ("limit", resource.name) + self._options_of(resource), every_row)

    def _options_of(self, resource: Resource) -> tuple[float, bool]:
        """``option_ratio`` and ``aggregates_apply`` of ``resource``, read once
        a decision: its filters, weighers and claim ask several times."""
        options = self._options.get(resource.name)
        if options is None:
            options = self._options[resource.name] = (
                option_ratio(resource), aggregates_apply(resource))
        return options

    def _smallest_total(self, resource: Resource) -> float:
        """The smallest total of the live nodes (inf: none), kept as limits are."""
        def smallest() -> float:
            rows = self.table.active_rows()
            return float(self.total(resource, rows).min()) if len(rows) else np.inf

        return self.table.capacity_derived(("smallest", resource.name), smallest)

    def free(self, resource: Resource, rows) -> np.ndarray:
        """What is left under the limit after the claims."""
        return self._over(rows, None, lambda sel: self._limit(resource, sel)
                          - self.claimed(resource, sel))

    def used(self, resource: Resource, rows) -> np.ndarray:
        """Reserved plus claimed (nova's ``vcpus_used``)."""
        return self.reserved(resource, rows) + self.claimed(resource, rows)

    def unclaimed(self, resource: Resource, rows) -> np.ndarray:
        """Physical capacity left, ignoring the ratio (nova's ``free_ram_mb``)."""
        return self._over(rows, None, lambda sel: self.total(resource, sel)
                          - self.used(resource, sel))

    def fits(self, resource: Resource, rows, amount: int) -> np.ndarray:
        """Which rows can take ``amount`` more under their limit.

        As in nova, an instance may never be larger than the node
        physically is, whatever the ratio.
        """
        def fit(sel):
            within = capacity.fits(self.claimed(resource, sel), amount,
                                   self._limit(resource, sel))
            if amount <= self._smallest_total(resource):
                return within  # no live node is smaller than the instance
            return (amount <= self.total(resource, sel)) & within

        return self._over(rows, ("fits", resource.name, amount), fit)

    def _over(self, rows, name, compute):
        """``compute(rows)``; for most of the table, ``compute`` over every
        row then the rows picked (contiguous arithmetic and one gather are
        cheaper than gathering each column). Whole-table results with a
        ``name`` are kept for the decision (RamFilter and AggregateRamFilter,
        CoreFilter and CPUWeigher ask the same)."""
        if isinstance(rows, np.ndarray) and rows.ndim == 1 \
                and 4 * len(rows) >= self.table.size > 64:
            return self.table.pick(self._everywhere(name, compute), rows)
        if isinstance(rows, slice) and name is not None:
            return self._everywhere(name, compute)[rows]
        return compute(rows)

    def _everywhere(self, name, compute) -> np.ndarray:
        if name is None:
            return _by_blocks(self.table.size, compute)
        value = self._whole.get(name)
        if value is None:
            value = self._whole[name] = _by_blocks(self.table.size, compute)
        return value

    def _ratio_at(self, resource: Resource, row: int) -> float:
        ratios = self._ratios_of(resource, slice(None))
        return ratios if isinstance(ratios, float) else float(ratios[row])

    def ratios_at(self, row: int) -> dict[str, float]:
        """The ratios a claim on ``row`` must be guarded with."""
        return {res.name: self._ratio_at(res, row) for res in RESOURCES}

    def compute_limits(self, resource: Resource, row: int) -> dict[str, float]:
        """nova's ``limits`` entry for one resource of a node (total x ratio)."""
        total = float(self.table.col(_COLUMNS[resource.name][0])[row])
        if resource is DISK:
            total = float(int(total) // 1024)
        return {resource.limit_key: total * self._ratio_at(resource, row)}


# The figures of the decision asking host by host right now (a custom
# plugin reading HostState's figures one host at a time), so that each
# host's figures come from the view that decision worked out once. A
# context variable: decisions in other threads never see it.
_ASKING: contextvars.ContextVar[tuple | None] = contextvars.ContextVar(
    "nova_sched_asking_view", default=None)


@contextlib.contextmanager
def asking(table: "HostTable", view: Callable[[], "ResourceView"]) -> Iterator[None]:
    """While the block runs, ``view_of(table)`` is ``view()`` (made on first use)."""
    token = _ASKING.set((table, view))
    try:
        yield
    finally:
        _ASKING.reset(token)


def view_of(table: "HostTable") -> "ResourceView":
    """The figures of ``table``'s nodes: the asking decision's, else a view of their own."""
    current = _ASKING.get()
    if current is not None and current[0] is table:
        return current[1]()
    return ResourceView(table)
