"""HypervisorVersionWeigher: by the hypervisor version a node reports.

A positive ``hypervisor_version_weight_multiplier`` (the default) prefers
the newest hypervisors; a negative one the oldest. A node reporting no
version weighs as version 0.
"""

from __future__ import annotations

from nova_sched.scheduler import weights


class HypervisorVersionWeigher(weights.BaseHostWeigher):
    """nova's HypervisorVersionWeigher: the reported ``hypervisor_version``."""

    multiplier_option = "hypervisor_version_weight_multiplier"
    whole_numbers = True

    def weigh_all(self, cycle, rows):
        # The table holds 0 for a node that reports no version.
        return weights.column_weights(cycle, "hypervisor_version", rows)
