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
    servicegroup driver). Reports reach the daemon through the queue its
    requests wait in: while it runs behind that queue (a burst of
    requests), every report it applies is that much late, and the age is
    counted from that long ago (``HostTable.report_lag``), so that a burst
    does not make the whole fleet look down.
    """

    def filter_all(self, cycle, rows):
        table = cycle.table
        now = time.time()
        updated, disabled = table.col("service_updated"), table.col("disabled")
        if 4 * len(rows) < table.size:
            return ~disabled.take(rows) & heartbeat_fresh(table, updated.take(rows), now)
        # Most of the table: every row, a block at a time (the temporaries
        # stay small), then the rows picked.
        up = np.empty(table.size, dtype=bool)
        for start in range(0, table.size, _BLOCK):
            block = slice(start, start + _BLOCK)
            up[block] = ~disabled[block] & heartbeat_fresh(table, updated[block], now)
        return table.pick(up, rows)


def heartbeat_fresh(table, beats: np.ndarray, now: float) -> np.ndarray:
    """Which of ``beats`` (service heartbeat times of ``table``'s rows) make
    their node up: at most ``[DEFAULT] service_down_time`` old, counted
    from ``table.report_lag`` ago, and not further ahead of our clock than
    that either (a compute whose clock runs fast)."""
    down_time = CONF.service_down_time
    return (beats >= now - table.report_lag - down_time) & (beats <= now + down_time)
