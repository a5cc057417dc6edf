"""DiskFilter: enough local disk under ``disk_allocation_ratio``."""

from __future__ import annotations

from nova_sched.conf import CONF
from nova_sched.scheduler import filters


class DiskFilter(filters.BaseHostFilter):
    """Only hosts with enough disk for root, ephemeral and swap.

    Sizes are compared in MB: ``(root_gb + ephemeral_gb) * 1024 + swap``
    against ``local_gb * 1024 * ratio`` minus what is reserved and claimed.
    As in nova, an instance never overcommits against itself: it may not
    need more disk than the node has physically.
    """

    def _ratio(self, host_state=None) -> float:
        return CONF.filter_scheduler.disk_allocation_ratio

    def host_passes(self, host_state, spec) -> bool:
        total_mb = host_state.total_usable_disk_gb * 1024
        if spec.disk_mb > total_mb:
            return False
        used_mb = total_mb - host_state.free_disk_mb
        return total_mb * self._ratio(host_state) - used_mb >= spec.disk_mb

    def filter_all(self, table, rows, spec):
        total = table.col("disk_mb")[rows]
        used = table.col("reserved_disk_mb")[rows] + table.col("claimed_disk_mb")[rows]
        physical = (total // 1024) * 1024
        return (spec.disk_mb <= physical) & (total * self._ratio() - used >= spec.disk_mb)

    def limits(self, host_state) -> dict:
        return {"disk_gb": host_state.total_usable_disk_gb * self._ratio(host_state)}
