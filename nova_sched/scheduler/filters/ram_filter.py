"""RamFilter and AggregateRamFilter: enough RAM under the allocation ratio."""

from __future__ import annotations

import logging

from nova_sched.conf import CONF
from nova_sched.scheduler import aggregate_metadata, filters

LOG = logging.getLogger(__name__)


class RamFilter(filters.BaseHostFilter):
    """Only hosts with enough RAM left under the oversubscription ratio.

    Havana's arithmetic: the limit is ``memory_mb * ratio``; used RAM is
    everything claimed plus the reservation; the instance must fit in the
    difference. As in nova, an instance never overcommits against itself:
    it may not have more RAM than the node has physically.
    """

    def _ratio(self, host_state=None) -> float:
        """The host's ratio: ``ram_allocation_ratio``.

        Variants override this hook; filter_all asks it once per distinct
        set of aggregates, so it may depend on the host only through them.
        """
        return CONF.filter_scheduler.ram_allocation_ratio

    def host_passes(self, host_state, spec) -> bool:
        if spec.memory_mb > host_state.total_usable_ram_mb:
            return False
        limit = host_state.total_usable_ram_mb * self._ratio(host_state)
        used = host_state.total_usable_ram_mb - host_state.free_ram_mb
        if limit - used < spec.memory_mb:
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug("%s does not have %d MB usable RAM, only %s", host_state,
                          spec.memory_mb, limit - used)
            return False
        return True

    def filter_all(self, table, rows, spec):
        total = table.col("memory_mb")[rows]
        used = table.col("reserved_memory_mb")[rows] + table.col("claimed_memory_mb")[rows]
        ratio = aggregate_metadata.per_row(table, rows, self._ratio)
        return (spec.memory_mb <= total) & (total * ratio - used >= spec.memory_mb)

    def limits(self, host_state) -> dict:
        return {"memory_mb": host_state.total_usable_ram_mb * self._ratio(host_state)}


class AggregateRamFilter(RamFilter):
    """RamFilter with the ratio from the host's aggregates' ``ram_allocation_ratio``.

    The smallest of the aggregates' values wins; a host in no such
    aggregate, or with a value that is not a number, uses the option.
    """

    def _ratio(self, host_state=None) -> float:
        return aggregate_metadata.host_value(
            host_state, "ram_allocation_ratio", super()._ratio(), float)
