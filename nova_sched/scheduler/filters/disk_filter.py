"""DiskFilter and AggregateDiskFilter: enough local disk under the allocation ratio."""

from __future__ import annotations

from nova_sched.capacity import DISK
from nova_sched.scheduler import filters


class DiskFilter(filters.BaseHostFilter):
    """Only nodes with enough disk for root, ephemeral and swap.

    Sizes are in MB: the request's ``(root_gb + ephemeral_gb) * 1024 +
    swap`` against the node's limit from the resource model
    (``nova_sched.scheduler.cloud.resources``), ``local_gb * 1024 x ratio -
    reserved``, with the ratio the node reports, else its aggregates'
    (while AggregateDiskFilter is enabled), else ``disk_allocation_ratio``.
    As in nova, an instance never overcommits against itself: it may not
    need more disk than the node has physically.
    """

    judged_by_placement = True

    def filter_all(self, cycle, rows):
        return cycle.resources.fits(DISK, rows, cycle.spec.disk_mb)

    def limits(self, cycle, row) -> dict:
        return cycle.resources.compute_limits(DISK, row)


class AggregateDiskFilter(DiskFilter):
    """DiskFilter, and aggregates' ``disk_allocation_ratio`` counts.

    While it is enabled, the resource model (``scheduler.cloud.resources``) takes
    a node's ratio from its aggregates and judges disk by it everywhere
    (filters, weighers, limits, claims).
    """
