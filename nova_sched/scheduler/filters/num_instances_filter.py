"""NumInstancesFilter and AggregateNumInstancesFilter: hosts not too full of instances."""

from __future__ import annotations

import logging

from nova_sched.conf import CONF
from nova_sched.scheduler import aggregate_metadata, filters

LOG = logging.getLogger(__name__)


class NumInstancesFilter(filters.BaseHostFilter):
    """Filter out hosts with ``max_instances_per_host`` or more instances."""

    def _max_instances(self, host_state=None) -> int:
        """The host's limit: ``max_instances_per_host``.

        Variants override this hook; filter_all asks it once per distinct
        set of aggregates, so it may depend on the host only through them.
        """
        return CONF.filter_scheduler.max_instances_per_host

    def host_passes(self, host_state, spec) -> bool:
        limit = self._max_instances(host_state)
        if host_state.num_instances < limit:
            return True
        LOG.debug("%s fails num_instances check: %d instances, "
                  "max_instances_per_host is %s",
                  host_state, host_state.num_instances, limit)
        return False

    def filter_all(self, table, rows, spec):
        limit = aggregate_metadata.per_row(table, rows, self._max_instances)
        return table.col("num_instances")[rows] < limit


class AggregateNumInstancesFilter(NumInstancesFilter):
    """NumInstancesFilter with the limit from the host's aggregates' ``max_instances_per_host``.

    The smallest of the aggregates' values wins; a host in no such
    aggregate, or with a value that is not a whole number, uses the option.
    """

    def _max_instances(self, host_state=None) -> int:
        return aggregate_metadata.host_value(
            host_state, "max_instances_per_host", super()._max_instances(), int)
