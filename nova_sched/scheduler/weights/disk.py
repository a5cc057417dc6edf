"""DiskWeigher: by free local disk.

A positive ``disk_weight_multiplier`` spreads instances over the hosts with
the most free disk; a negative one stacks them.
"""

from __future__ import annotations

from nova_sched.capacity import DISK
from nova_sched.scheduler import weights


class DiskWeigher(weights.BaseHostWeigher):
    """nova's DiskWeigher: free disk in MB, ``disk_mb - reserved - claimed``."""

    minval = 0

    multiplier_option = "disk_weight_multiplier"
    whole_numbers = True

    def weigh_all(self, cycle, rows):
        # nova's free_disk_mb is physical: the allocation ratio does not enter it.
        return cycle.resources.unclaimed(DISK, rows)
