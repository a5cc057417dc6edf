"""ComputeFilter: the node's compute service is up and enabled."""

from __future__ import annotations

import time

from nova_sched.conf import CONF
from nova_sched.scheduler import filters


class ComputeFilter(filters.BaseHostFilter):
    """Remove nodes whose service is disabled or missed its heartbeats.

    A node is up while its last report is at most
    ``[DEFAULT] service_down_time`` seconds old (nova's database
    servicegroup driver).
    """

    def filter_all(self, cycle, rows):
        table = cycle.table
        age = time.time() - table.col("service_updated")[rows]
        return ~table.col("disabled")[rows] & (abs(age) <= CONF.service_down_time)
