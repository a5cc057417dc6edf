"""ComputeFilter: the node's compute service is up and enabled."""

from __future__ import annotations

import time

import numpy as np

from nova_sched.conf import CONF
from nova_sched.scheduler import filters


_BLOCK = 16384


class ComputeFilter(filters.BaseHostFilter):
    """Remove nodes whose service is disabled or missed its heartbeats.

    A node is up while its last report is at most
    ``[DEFAULT] service_down_time`` seconds old (nova's database
    servicegroup driver).
    """

    def filter_all(self, cycle, rows):
        table = cycle.table
        now, down_time = time.time(), CONF.service_down_time
        updated, disabled = table.col("service_updated"), table.col("disabled")
        if 4 * len(rows) < table.size:
            return ~disabled.take(rows) & (abs(now - updated.take(rows)) <= down_time)
        # Most of the table: every row, a block at a time (the temporaries
        # stay small), then the rows picked.
        up = np.empty(table.size, dtype=bool)
        for start in range(0, table.size, _BLOCK):
            block = slice(start, start + _BLOCK)
            up[block] = ~disabled[block] & (abs(now - updated[block]) <= down_time)
        return up.take(rows)
