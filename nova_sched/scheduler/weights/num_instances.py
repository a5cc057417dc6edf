"""NumInstancesWeigher: by the number of instances on a host.

``num_instances_weight_multiplier`` is 0.0 by default (the weigher has no
effect); a negative value spreads instances over the emptiest hosts, a
positive one packs them onto the fullest.
"""

from __future__ import annotations

from nova_sched.scheduler import weights


class NumInstancesWeigher(weights.BaseHostWeigher):
    """nova's NumInstancesWeigher: the node's ``num_instances``."""

    multiplier_option = "num_instances_weight_multiplier"
    whole_numbers = True

    def weigh_all(self, cycle, rows):
        return cycle.table.values_of("num_instances", rows)
