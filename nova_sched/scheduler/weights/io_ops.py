"""IoOpsWeigher: by the number of I/O-heavy operations under way on a host.

Builds, resizes, snapshots and the like load a host's disks and network.
The default negative ``io_ops_weight_multiplier`` prefers the idlest hosts;
a positive one prefers the busiest.
"""

from __future__ import annotations

from nova_sched.scheduler import weights


class IoOpsWeigher(weights.BaseHostWeigher):
    """nova's IoOpsWeigher: the node's ``num_io_ops``."""

    minval = 0

    multiplier_option = "io_ops_weight_multiplier"
    whole_numbers = True

    def weigh_all(self, cycle, rows):
        return cycle.table.values_of("num_io_ops", rows)
