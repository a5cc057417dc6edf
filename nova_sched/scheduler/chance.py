"""ChanceScheduler: a random node that is up (nova's chance driver).

No weighing: among the nodes whose compute service is up and enabled (and
not already tried for this instance), one is picked at random. Claims still
guard capacity, so a full node is skipped for the next random one.
"""

from __future__ import annotations

from nova_sched.scheduler.filter_scheduler import FilterScheduler
from nova_sched.scheduler.filters.compute_filter import ComputeFilter
from nova_sched.scheduler.filters.retry_filter import RetryFilter


class ChanceScheduler(FilterScheduler):
    """Random placement on any live node."""

    def __init__(self, host_manager):
        super().__init__(host_manager)
        self.filters = [RetryFilter(), ComputeFilter()]
        self.weighers = []

    def _order(self, rows):
        order = rows.copy()
        self._rng.shuffle(order)
        return order
