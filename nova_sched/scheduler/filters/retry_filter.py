"""RetryFilter: skip nodes this instance was already tried on."""

from __future__ import annotations

import numpy as np

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
        mask = np.ones(len(rows), dtype=bool)
        if not tried:
            return mask
        index = cycle.table.index
        tried_rows = [index[k] for k in tried if k in index]
        if tried_rows:
            mask &= ~np.isin(rows, tried_rows)
        return mask
