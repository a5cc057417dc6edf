"""RAMWeigher: by free RAM.

A positive ``ram_weight_multiplier`` spreads instances over the hosts with
the most free RAM; a negative one stacks them onto the fullest hosts.
"""

from __future__ import annotations

from nova_sched.scheduler import weights


class RAMWeigher(weights.BaseHostWeigher):
    minval = 0

    multiplier_option = "ram_weight_multiplier"

    def _weigh_object(self, host_state, spec) -> float:
        return host_state.free_ram_mb

    def weigh_all(self, table, rows, spec):
        return (
            table.col("memory_mb")[rows]
            - table.col("reserved_memory_mb")[rows]
            - table.col("claimed_memory_mb")[rows]
        )
