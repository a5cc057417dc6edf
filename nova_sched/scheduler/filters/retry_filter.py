"""RetryFilter: skip nodes this instance was already tried on."""

from __future__ import annotations

from nova_sched.scheduler import filters


class RetryFilter(filters.BaseHostFilter):
    """Remove the [host, node] pairs listed in ``retry['hosts']``."""

    def prepare(self, cycle) -> frozenset[tuple[str, str]]:
        """The (host, node) pairs already tried."""
        retry = cycle.spec.retry
        if not retry:
            return frozenset()
        return frozenset((h, n) for h, n in retry.get("hosts", []))

    def filter_all(self, cycle, rows):
        tried = cycle.prepared(self)
        index = cycle.table.index
        tried_rows = [index[k] for k in tried if k in index]
        if not tried_rows:
            return filters.everyone(rows)
        return ~filters.among(cycle.table, rows, tried_rows)
