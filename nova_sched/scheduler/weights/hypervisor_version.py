"""HypervisorVersionWeigher: by the hypervisor version a node reports.

A positive ``hypervisor_version_weight_multiplier`` (the default) prefers
the newest hypervisors; a negative one the oldest. A node reporting no
version weighs as version 0.
"""

from __future__ import annotations

from nova_sched.scheduler import weights


class HypervisorVersionWeigher(weights.BaseHostWeigher):
    multiplier_option = "hypervisor_version_weight_multiplier"

    def _weigh_object(self, host_state, spec) -> float:
        return host_state.hypervisor_version or 0

    def weigh_all(self, table, rows, spec):
        return table.col("hypervisor_version")[rows]
