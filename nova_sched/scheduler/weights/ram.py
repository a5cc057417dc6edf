"""RAMWeigher: by free RAM.

A positive ``ram_weight_multiplier`` spreads instances over the hosts with
the most free RAM; a negative one stacks them onto the fullest hosts.
"""

from __future__ import annotations

from nova_sched.capacity import RAM
from nova_sched.scheduler import weights


class RAMWeigher(weights.BaseHostWeigher):
    """nova's RAMWeigher: free RAM, ``memory_mb - reserved - claimed``."""

    minval = 0

    multiplier_option = "ram_weight_multiplier"
    whole_numbers = True

    def weigh_all(self, cycle, rows):
        # nova's free_ram_mb is physical: the allocation ratio does not enter it.
        return cycle.resources.unclaimed(RAM, rows)
