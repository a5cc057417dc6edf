"""NumInstancesWeigher: by the number of instances on a host.

``num_instances_weight_multiplier`` is 0.0 by default (the weigher has no
effect); a negative value spreads instances over the emptiest hosts, a
positive one packs them onto the fullest.
"""

from __future__ import annotations

from nova_sched.scheduler import weights


class NumInstancesWeigher(weights.BaseHostWeigher):
    multiplier_option = "num_instances_weight_multiplier"

    def _weigh_object(self, host_state, spec) -> float:
        return host_state.num_instances

    def weigh_all(self, table, rows, spec):
        return table.col("num_instances")[rows]
