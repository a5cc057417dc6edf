"""CoreFilter and AggregateCoreFilter: enough vCPUs under the allocation ratio."""

from __future__ import annotations

from nova_sched.capacity import VCPU
from nova_sched.scheduler import filters


class CoreFilter(filters.BaseHostFilter):
    """Only nodes with enough vCPUs left under their limit.

    The resource model (``nova_sched.scheduler.cloud.resources``) gives each
    node's limit, ``vcpus x ratio - reserved``, with the ratio the node
    reports, else its aggregates' (while AggregateCoreFilter is enabled),
    else ``cpu_allocation_ratio``. As in nova, no instance may have more
    vCPUs than the node has physical ones, whatever the ratio.

    Unlike nova, a node that reports no vCPUs does not pass: the claim
    could never be taken on it, so passing it would only turn the decision
    into a failed claim.
    """

    judged_by_placement = True

    def filter_all(self, cycle, rows):
        return cycle.resources.fits(VCPU, rows, cycle.spec.vcpus)

    def limits(self, cycle, row) -> dict:
        # nova sets no vCPU limit for a node without a vCPU count.
        if not cycle.table.col("vcpus")[row]:
            return {}
        return cycle.resources.compute_limits(VCPU, row)


class AggregateCoreFilter(CoreFilter):
    """CoreFilter, and aggregates' ``cpu_allocation_ratio`` counts.

    While it is enabled, the resource model (``scheduler.cloud.resources``) takes
    a node's ratio from its aggregates and judges vCPUs by it everywhere
    (filters, weighers, limits, claims).
    """
