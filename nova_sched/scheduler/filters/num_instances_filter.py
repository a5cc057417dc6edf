"""NumInstancesFilter and AggregateNumInstancesFilter: hosts not too full of instances."""

from __future__ import annotations

from nova_sched.conf import CONF
from nova_sched.scheduler import filters


class NumInstancesFilter(filters.BaseHostFilter):
    """Filter out hosts with ``max_instances_per_host`` or more instances."""

    def _limit(self, cycle, rows):
        """The limit of each row (a scalar when it is the same everywhere)."""
        return CONF.filter_scheduler.max_instances_per_host

    def filter_all(self, cycle, rows):
        return cycle.table.values_of("num_instances", rows) < self._limit(cycle, rows)


class AggregateNumInstancesFilter(NumInstancesFilter):
    """NumInstancesFilter with the limit from the host's aggregates' ``max_instances_per_host``.

    The smallest of the aggregates' values wins; a host in no such
    aggregate, or with a value that is not a whole number, uses the option.
    """

    def _limit(self, cycle, rows):
        return cycle.aggregate_number(rows, "max_instances_per_host",
                                      super()._limit(cycle, rows), cast=int)
