"""DiskFilter and AggregateDiskFilter: enough local disk under the allocation ratio."""

from __future__ import annotations

import logging

from nova_sched.conf import CONF
from nova_sched.scheduler import aggregate_metadata, filters

LOG = logging.getLogger(__name__)


class DiskFilter(filters.BaseHostFilter):
    """Only hosts with enough disk for root, ephemeral and swap.

    Sizes are compared in MB: ``(root_gb + ephemeral_gb) * 1024 + swap``
    against ``local_gb * 1024 * ratio`` minus what is reserved and claimed.
    As in nova, an instance never overcommits against itself: it may not
    need more disk than the node has physically.
    """

    def _ratio(self, host_state=None) -> float:
        """The host's ratio: ``disk_allocation_ratio``.

        Variants override this hook; filter_all asks it once per distinct
        set of aggregates, so it may depend on the host only through them.
        """
        return CONF.filter_scheduler.disk_allocation_ratio

    def host_passes(self, host_state, spec) -> bool:
        total_mb = host_state.total_usable_disk_gb * 1024
        if spec.disk_mb > total_mb:
            return False
        used_mb = total_mb - host_state.free_disk_mb
        usable = total_mb * self._ratio(host_state) - used_mb
        if usable < spec.disk_mb:
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug("%s does not have %d MB usable disk, only %s", host_state,
                          spec.disk_mb, usable)
            return False
        return True

    def filter_all(self, table, rows, spec):
        total = table.col("disk_mb")[rows]
        used = table.col("reserved_disk_mb")[rows] + table.col("claimed_disk_mb")[rows]
        physical = (total // 1024) * 1024
        ratio = aggregate_metadata.per_row(table, rows, self._ratio)
        return (spec.disk_mb <= physical) & (total * ratio - used >= spec.disk_mb)

    def limits(self, host_state) -> dict:
        return {"disk_gb": host_state.total_usable_disk_gb * self._ratio(host_state)}


class AggregateDiskFilter(DiskFilter):
    """DiskFilter with the ratio from the host's aggregates' ``disk_allocation_ratio``.

    The smallest of the aggregates' values wins; a host in no such
    aggregate, or with a value that is not a number, uses the option.
    """

    def _ratio(self, host_state=None) -> float:
        return aggregate_metadata.host_value(
            host_state, "disk_allocation_ratio", super()._ratio(), float)
