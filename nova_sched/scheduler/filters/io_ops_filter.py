"""IoOpsFilter and AggregateIoOpsFilter: hosts not busy with too much I/O."""

from __future__ import annotations

from nova_sched.conf import CONF
from nova_sched.scheduler import filters


class IoOpsFilter(filters.BaseHostFilter):
    """Filter out hosts with ``max_io_ops_per_host`` or more concurrent I/O operations.

    An I/O operation is an instance in a build, resize, snapshot, migrate,
    rescue or unshelve task state (the host's ``num_io_ops``).
    """

    def _limit(self, cycle, rows):
        """The limit of each row (a scalar when it is the same everywhere)."""
        return CONF.filter_scheduler.max_io_ops_per_host

    def filter_all(self, cycle, rows):
        return cycle.table.values_of("num_io_ops", rows) < self._limit(cycle, rows)


class AggregateIoOpsFilter(IoOpsFilter):
    """IoOpsFilter with the limit from the host's aggregates' ``max_io_ops_per_host``.

    The smallest of the aggregates' values wins; a host in no such
    aggregate, or with a value that is not a whole number, uses the option.
    """

    def _limit(self, cycle, rows):
        return cycle.aggregate_number(rows, "max_io_ops_per_host",
                                      super()._limit(cycle, rows), cast=int)
