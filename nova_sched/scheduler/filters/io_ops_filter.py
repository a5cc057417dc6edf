"""IoOpsFilter and AggregateIoOpsFilter: hosts not busy with too much I/O."""

from __future__ import annotations

import logging

from nova_sched.conf import CONF
from nova_sched.scheduler import aggregate_metadata, filters

LOG = logging.getLogger(__name__)


class IoOpsFilter(filters.BaseHostFilter):
    """Filter out hosts with ``max_io_ops_per_host`` or more concurrent I/O operations.

    An I/O operation is an instance in a build, resize, snapshot, migrate,
    rescue or unshelve task state (the host's ``num_io_ops``).
    """

    def _max_io_ops(self, host_state=None) -> int:
        """The host's limit: ``max_io_ops_per_host``.

        Variants override this hook; filter_all asks it once per distinct
        set of aggregates, so it may depend on the host only through them.
        """
        return CONF.filter_scheduler.max_io_ops_per_host

    def host_passes(self, host_state, spec) -> bool:
        limit = self._max_io_ops(host_state)
        if host_state.num_io_ops < limit:
            return True
        LOG.debug("%s fails I/O ops check: %d operations, max_io_ops_per_host is %s",
                  host_state, host_state.num_io_ops, limit)
        return False

    def filter_all(self, table, rows, spec):
        limit = aggregate_metadata.per_row(table, rows, self._max_io_ops)
        return table.col("num_io_ops")[rows] < limit


class AggregateIoOpsFilter(IoOpsFilter):
    """IoOpsFilter with the limit from the host's aggregates' ``max_io_ops_per_host``.

    The smallest of the aggregates' values wins; a host in no such
    aggregate, or with a value that is not a whole number, uses the option.
    """

    def _max_io_ops(self, host_state=None) -> int:
        return aggregate_metadata.host_value(
            host_state, "max_io_ops_per_host", super()._max_io_ops(), int)
