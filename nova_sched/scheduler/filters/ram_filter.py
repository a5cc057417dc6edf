"""RamFilter: enough RAM under ``ram_allocation_ratio``."""

from __future__ import annotations

from nova_sched.conf import CONF
from nova_sched.scheduler import filters


class RamFilter(filters.BaseHostFilter):
    """Only hosts with enough RAM left under the oversubscription ratio.

    Havana's arithmetic: the limit is ``memory_mb * ratio``; used RAM is
    everything claimed plus the reservation; the instance must fit in the
    difference. As in nova, an instance never overcommits against itself:
    it may not have more RAM than the node has physically.
    """

    def _ratio(self, host_state=None) -> float:
        return CONF.filter_scheduler.ram_allocation_ratio

    def host_passes(self, host_state, spec) -> bool:
        if spec.memory_mb > host_state.total_usable_ram_mb:
            return False
        limit = host_state.total_usable_ram_mb * self._ratio(host_state)
        used = host_state.total_usable_ram_mb - host_state.free_ram_mb
        return limit - used >= spec.memory_mb

    def filter_all(self, table, rows, spec):
        total = table.col("memory_mb")[rows]
        used = table.col("reserved_memory_mb")[rows] + table.col("claimed_memory_mb")[rows]
        return (spec.memory_mb <= total) & (total * self._ratio() - used >= spec.memory_mb)

    def limits(self, host_state) -> dict:
        return {"memory_mb": host_state.total_usable_ram_mb * self._ratio(host_state)}
