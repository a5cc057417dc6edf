"""CoreFilter and AggregateCoreFilter: enough vCPUs under the allocation ratio."""

from __future__ import annotations

import logging

from nova_sched.conf import CONF
from nova_sched.scheduler import aggregate_metadata, filters

LOG = logging.getLogger(__name__)


class CoreFilter(filters.BaseHostFilter):
    """Only hosts with enough vCPUs left under the oversubscription ratio.

    As in nova: a node that reports no vCPUs passes (nothing to judge by),
    and no instance may have more vCPUs than the node has physical ones,
    whatever the ratio.
    """

    def _ratio(self, host_state=None) -> float:
        """The host's ratio: ``cpu_allocation_ratio``.

        Variants override this hook; filter_all asks it once per distinct
        set of aggregates, so it may depend on the host only through them.
        """
        return CONF.filter_scheduler.cpu_allocation_ratio

    def host_passes(self, host_state, spec) -> bool:
        total = host_state.vcpus_total
        if not total:
            return True
        if spec.vcpus > total:
            return False
        free = total * self._ratio(host_state) - host_state.vcpus_used
        if free < spec.vcpus:
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug("%s does not have %d usable vCPUs, only %s", host_state,
                          spec.vcpus, free)
            return False
        return True

    def filter_all(self, table, rows, spec):
        total = table.col("vcpus")[rows]
        used = table.col("claimed_vcpus")[rows] + table.col("reserved_cpus")[rows]
        ratio = aggregate_metadata.per_row(table, rows, self._ratio)
        fits = (spec.vcpus <= total) & (total * ratio - used >= spec.vcpus)
        return fits | (total == 0)

    def limits(self, host_state) -> dict:
        if not host_state.vcpus_total:
            return {}
        return {"vcpu": host_state.vcpus_total * self._ratio(host_state)}


class AggregateCoreFilter(CoreFilter):
    """CoreFilter with the ratio from the host's aggregates' ``cpu_allocation_ratio``.

    The smallest of the aggregates' values wins; a host in no such
    aggregate, or with a value that is not a number, uses the option.
    """

    def _ratio(self, host_state=None) -> float:
        return aggregate_metadata.host_value(
            host_state, "cpu_allocation_ratio", super()._ratio(), float)
