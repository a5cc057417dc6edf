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
resource's ratios for the whole table on first use and keeps them until the
decision ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from nova_sched import capacity
from nova_sched.capacity import DISK, RAM, RESOURCES, VCPU, Resource
from nova_sched.conf import CONF
from nova_sched.scheduler import aggregate_metadata

if TYPE_CHECKING:
    from nova_sched.scheduler.host_state import HostTable
    from nova_sched.scheduler.request import RequestSpec

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


def option_ratio(resource: Resource) -> float:
    """The cloud-wide ratio of ``[filter_scheduler]``."""
    return float(getattr(CONF.filter_scheduler, resource.ratio_option))


def aggregates_apply(resource: Resource) -> bool:
    """Whether aggregates may set this resource's ratio (its Aggregate*Filter runs)."""
    return resource.aggregate_filter in CONF.filter_scheduler.enabled_filters


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


class ResourceView:
    """Ratios, limits and free amounts of a host table's nodes, for one decision."""

    def __init__(self, table: "HostTable"):
        self.table = table
        self._ratios: dict[str, np.ndarray] = {}

    def _column(self, resource: Resource, which: int, rows) -> np.ndarray:
        return self.table.col(_COLUMNS[resource.name][which])[rows]

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
        return ratios if isinstance(ratios, float) else ratios[rows]

    def _compute_ratios(self, resource: Resource) -> np.ndarray | float:
        everyone = np.arange(self.table.size)
        own = self._column(resource, 3, everyone)
        from_aggs = np.nan
        if aggregates_apply(resource) and aggregate_metadata.uses_key(
                self.table, resource.ratio_option):
            from_aggs = aggregate_metadata.per_row(
                self.table, everyone, lambda aggs: aggregate_ratio(resource, aggs))
        elif not own.any():
            # The usual cloud: the option for every node, no array needed.
            return float(effective_ratio(resource, 0.0, np.nan))
        return effective_ratio(resource, own, from_aggs)

    def ratio(self, resource: Resource, rows) -> np.ndarray:
        """The effective allocation ratio of each row."""
        ratios = self._ratios_of(resource, rows)
        if isinstance(ratios, float):
            return np.full(len(np.atleast_1d(rows)), ratios)
        return ratios

    def limit(self, resource: Resource, rows) -> np.ndarray:
        """What each node can hand out: ``total x ratio - reserved``."""
        return capacity.limit(self.total(resource, rows),
                              self._ratios_of(resource, rows),
                              self.reserved(resource, rows))

    def free(self, resource: Resource, rows) -> np.ndarray:
        """What is left under the limit after the claims."""
        return self.limit(resource, rows) - self.claimed(resource, rows)

    def unclaimed(self, resource: Resource, rows) -> np.ndarray:
        """Physical capacity left, ignoring the ratio (nova's ``free_ram_mb``)."""
        return (self.total(resource, rows) - self.reserved(resource, rows)
                - self.claimed(resource, rows))

    def fits(self, resource: Resource, rows, amount: int) -> np.ndarray:
        """Which rows can take ``amount`` more under their limit.

        As in nova, an instance may never be larger than the node
        physically is, whatever the ratio.
        """
        total = self.total(resource, rows)
        return (amount <= total) & capacity.fits(
            self.claimed(resource, rows), amount, self.limit(resource, rows))

    def ratios_at(self, row: int) -> dict[str, float]:
        """The ratios a claim on ``row`` must be guarded with."""
        rows = np.array([row])
        return {res.name: float(self.ratio(res, rows)[0]) for res in RESOURCES}

    def compute_limits(self, resource: Resource, row: int) -> dict[str, float]:
        """nova's ``limits`` entry for one resource of a node (total x ratio)."""
        rows = np.array([row])
        total = float(self.total(resource, rows)[0])
        if resource is DISK:
            total = float(int(total) // 1024)
        return {resource.limit_key: total * float(self.ratio(resource, rows)[0])}
