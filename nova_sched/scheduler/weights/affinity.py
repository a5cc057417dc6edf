"""Soft server-group policies: weigh hosts by the group's members on them.

A request in a ``soft-affinity`` group prefers the hosts already running
the most members of its group, a ``soft-anti-affinity`` one the hosts
running the fewest; unlike the affinity filters, no host is ever ruled
out. Members counted are those the scheduler placed or holds claims for,
including earlier instances of the same request (``spec.group_hosts``).
For any other request the weighers give every host 0.
"""

from __future__ import annotations

import numpy as np

from nova_sched.scheduler import weights


class _SoftAffinityWeigherBase(weights.BaseHostWeigher):
    policy = ""
    # +1 prefers hosts with more members, -1 hosts with fewer.
    sign = 1

    def _weigh_object(self, host_state, spec) -> float:
        if spec.group_policy != self.policy:
            return 0
        return self.sign * spec.group_hosts.get(host_state.host, 0)

    def weigh_all(self, table, rows, spec):
        if spec.group_policy != self.policy or not spec.group_hosts:
            return np.zeros(len(rows), dtype=np.float64)
        where: list[int] = []
        counts: list[int] = []
        for host, count in spec.group_hosts.items():
            host_rows = table.host_rows.get(host, ())
            where.extend(host_rows)
            counts.extend([count] * len(host_rows))
        members = np.zeros(table.size, dtype=np.float64)
        members[where] = counts
        return self.sign * members[rows]


class ServerGroupSoftAffinityWeigher(_SoftAffinityWeigherBase):
    policy = "soft-affinity"
    multiplier_option = "soft_affinity_weight_multiplier"


class ServerGroupSoftAntiAffinityWeigher(_SoftAffinityWeigherBase):
    policy = "soft-anti-affinity"
    sign = -1
    multiplier_option = "soft_anti_affinity_weight_multiplier"
