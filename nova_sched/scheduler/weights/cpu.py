"""CPUWeigher: by free vCPUs under the allocation ratio.

A positive ``cpu_weight_multiplier`` spreads instances over the hosts with
the most free vCPUs; a negative one stacks them.
"""

from __future__ import annotations

from nova_sched.capacity import VCPU
from nova_sched.scheduler import weights


class CPUWeigher(weights.BaseHostWeigher):
    """nova's CPUWeigher: ``vcpus x ratio - reserved - claimed``.

    The ratio is the node's effective one (``scheduler.cloud.resources``), the
    same the filters and the claim use.
    """

    minval = 0

    multiplier_option = "cpu_weight_multiplier"

    def weigh_all(self, cycle, rows):
        return cycle.resources.free(VCPU, rows)
