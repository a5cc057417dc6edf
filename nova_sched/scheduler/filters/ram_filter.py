"""RamFilter and AggregateRamFilter: enough RAM under the allocation ratio."""

from __future__ import annotations

from nova_sched.capacity import RAM
from nova_sched.scheduler import filters


class RamFilter(filters.BaseHostFilter):
    """Only nodes with enough RAM left under their limit.

    The resource model (``nova_sched.scheduler.cloud.resources``) gives each
    node's limit, ``memory_mb x ratio - reserved``, with the ratio the node
    reports, else its aggregates' (while AggregateRamFilter is enabled),
    else ``ram_allocation_ratio``; the instance fits when the claims plus
    its RAM stay within it. As in nova, an instance never overcommits
    against itself: it may not have more RAM than the node has physically.
    """

    judged_by_placement = True

    def filter_all(self, cycle, rows):
        return cycle.resources.fits(RAM, rows, cycle.spec.memory_mb)

    def limits(self, cycle, row) -> dict:
        return cycle.resources.compute_limits(RAM, row)


class AggregateRamFilter(RamFilter):
    """RamFilter, and aggregates' ``ram_allocation_ratio`` counts.

    While it is enabled, the resource model (``scheduler.cloud.resources``) takes
    a node's ratio from its aggregates and judges RAM by it everywhere
    (filters, weighers, limits, claims).
    """
