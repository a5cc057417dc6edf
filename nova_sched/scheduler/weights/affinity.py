"""Soft server-group policies: weigh hosts by the group's members on them.

A request in a ``soft-affinity`` group prefers the hosts already running
the most members of its group, a ``soft-anti-affinity`` one the hosts
running the fewest; unlike the affinity filters, no host is ever ruled
out. Members counted are those the scheduler placed or holds claims for,
including earlier instances of the same request: the decision's group
context (``cycle.group.hosts``). For any other request the weighers give
every host 0.
"""

from __future__ import annotations

import numpy as np

from nova_sched.scheduler import weights


class _SoftAffinityWeigherBase(weights.BaseHostWeigher):
    policy = ""
    # +1 prefers hosts with more members, -1 hosts with fewer.
    sign = 1

    def weigh_all(self, cycle, rows):
        group = cycle.group
        if group is None or group.policy != self.policy or not group.hosts:
            return 0  # every host alike
        table = cycle.table
        # Every node of a host counts the host's members; members on hosts
        # the table does not know are not candidates and are ignored.
        where: list[int] = []
        counts: list[int] = []
        for host, count in group.hosts.items():
            host_rows = table.host_rows.get(host, ())
            where.extend(host_rows)
            counts.extend([count] * len(host_rows))
        members = np.zeros(table.size, dtype=np.float64)
        members[where] = counts
        return self.sign * table.pick(members, rows)


class ServerGroupSoftAffinityWeigher(_SoftAffinityWeigherBase):
    """nova's: members of the request's soft-affinity group on the host."""

    policy = "soft-affinity"
    multiplier_option = "soft_affinity_weight_multiplier"


class ServerGroupSoftAntiAffinityWeigher(_SoftAffinityWeigherBase):
    """nova's: minus the members of the request's soft-anti-affinity group
    on the host."""

    policy = "soft-anti-affinity"
    sign = -1
    multiplier_option = "soft_anti_affinity_weight_multiplier"
