"""CPUWeigher: by free vCPUs under the allocation ratio.

A positive ``cpu_weight_multiplier`` spreads instances over the hosts with
the most free vCPUs; a negative one stacks them.
"""

from __future__ import annotations

from nova_sched.conf import CONF
from nova_sched.scheduler import weights


class CPUWeigher(weights.BaseHostWeigher):
    minval = 0

    multiplier_option = "cpu_weight_multiplier"

    def _weigh_object(self, host_state, spec) -> float:
        ratio = CONF.filter_scheduler.cpu_allocation_ratio
        return host_state.vcpus_total * ratio - host_state.vcpus_used

    def weigh_all(self, table, rows, spec):
        ratio = CONF.filter_scheduler.cpu_allocation_ratio
        used = table.col("claimed_vcpus")[rows] + table.col("reserved_cpus")[rows]
        return table.col("vcpus")[rows] * ratio - used
