"""AllHostsFilter: a filter that keeps every host."""

from __future__ import annotations

from nova_sched.scheduler import filters


class AllHostsFilter(filters.BaseHostFilter):
    """Pass every host (nova's no-op filter)."""

    def filter_all(self, cycle, rows):
        return filters.everyone(rows)
