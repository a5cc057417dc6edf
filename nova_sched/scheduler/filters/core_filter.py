"""CoreFilter: enough vCPUs under ``cpu_allocation_ratio``."""

from __future__ import annotations

from nova_sched.conf import CONF
from nova_sched.scheduler import filters


class CoreFilter(filters.BaseHostFilter):
    """Only hosts with enough vCPUs left under the oversubscription ratio.

    As in nova: a node that reports no vCPUs passes (nothing to judge by),
    and no instance may have more vCPUs than the node has physical ones,
    whatever the ratio.
    """

    def _ratio(self, host_state=None) -> float:
        return CONF.filter_scheduler.cpu_allocation_ratio

    def host_passes(self, host_state, spec) -> bool:
        total = host_state.vcpus_total
        if not total:
            return True
        if spec.vcpus > total:
            return False
        return total * self._ratio(host_state) - host_state.vcpus_used >= spec.vcpus

    def filter_all(self, table, rows, spec):
        total = table.col("vcpus")[rows]
        used = table.col("claimed_vcpus")[rows] + table.col("reserved_cpus")[rows]
        fits = (spec.vcpus <= total) & (total * self._ratio() - used >= spec.vcpus)
        return fits | (total == 0)

    def limits(self, host_state) -> dict:
        if not host_state.vcpus_total:
            return {}
        return {"vcpu": host_state.vcpus_total * self._ratio(host_state)}
