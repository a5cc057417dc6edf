"""Server-group affinity and anti-affinity filters."""

from __future__ import annotations

import numpy as np

from nova_sched.scheduler import filters


class _GroupFilter(filters.BaseHostFilter):
    policy = ""

    def _applies(self, spec) -> bool:
        return spec.group_policy == self.policy

    def _hosts_blocked_or_allowed(self, table, rows, spec, hosts) -> np.ndarray:
        members = [r for h in hosts for r in table.host_rows.get(h, [])]
        return np.isin(rows, members)


class ServerGroupAffinityFilter(_GroupFilter):
    """Members of an 'affinity' group go to the host of the members placed so far."""

    policy = "affinity"

    def host_passes(self, host_state, spec) -> bool:
        if not self._applies(spec) or not spec.group_hosts:
            return True
        return host_state.host in spec.group_hosts

    def filter_all(self, table, rows, spec):
        if not self._applies(spec) or not spec.group_hosts:
            return np.ones(len(rows), dtype=bool)
        return self._hosts_blocked_or_allowed(table, rows, spec, spec.group_hosts)


class ServerGroupAntiAffinityFilter(_GroupFilter):
    """Members of an 'anti-affinity' group go to hosts with fewer than
    ``max_server_per_host`` (rule, default 1) members already."""

    policy = "anti-affinity"

    @staticmethod
    def _max_per_host(spec) -> int:
        try:
            return max(1, int(spec.group_rules.get("max_server_per_host", 1)))
        except (TypeError, ValueError):
            return 1

    def host_passes(self, host_state, spec) -> bool:
        if not self._applies(spec):
            return True
        return spec.group_hosts.get(host_state.host, 0) < self._max_per_host(spec)

    def filter_all(self, table, rows, spec):
        if not self._applies(spec):
            return np.ones(len(rows), dtype=bool)
        limit = self._max_per_host(spec)
        full = [h for h, count in spec.group_hosts.items() if count >= limit]
        return ~self._hosts_blocked_or_allowed(table, rows, spec, full)
