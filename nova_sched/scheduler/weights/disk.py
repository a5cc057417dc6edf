"""DiskWeigher: by free local disk.

A positive ``disk_weight_multiplier`` spreads instances over the hosts with
the most free disk; a negative one stacks them.
"""

from __future__ import annotations

from nova_sched.scheduler import weights


class DiskWeigher(weights.BaseHostWeigher):
    minval = 0

    multiplier_option = "disk_weight_multiplier"

    def _weigh_object(self, host_state, spec) -> float:
        return host_state.free_disk_mb

    def weigh_all(self, table, rows, spec):
        return (
            table.col("disk_mb")[rows]
            - table.col("reserved_disk_mb")[rows]
            - table.col("claimed_disk_mb")[rows]
        )
