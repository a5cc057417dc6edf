"""Affinity filters: server groups, instances named in hints, host networks.

ServerGroupAffinityFilter / ServerGroupAntiAffinityFilter follow the
request's server group. SameHostFilter / DifferentHostFilter follow the
``same_host`` / ``different_host`` hints (an instance uuid or a list of
them): where those instances are comes from the scheduler's own records
(claims and placed instances, ``db.instances.hosts_of``), read once per
instance decision. SimpleCIDRAffinityFilter follows ``build_near_host_ip``
and ``cidr`` (default ``/24``).
"""

from __future__ import annotations

import functools
import ipaddress
import logging

import numpy as np

from nova_sched import exception
from nova_sched.db import instances as db_instances
from nova_sched.scheduler import filters

LOG = logging.getLogger(__name__)


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


def _hint(spec, name):
    """A hint's value; nova's API wraps hints in lists, so one item is unwrapped."""
    value = spec.scheduler_hints.get(name)
    if isinstance(value, list) and len(value) == 1 and not isinstance(value[0], list):
        return value[0]
    return value


class _InstanceHostsFilter(filters.BaseHostFilter):
    """Hosts chosen by where the instances a hint names are."""

    # Where the named instances are does not change within a request (nova).
    run_filter_once_per_request = True
    hint = ""

    def __init__(self):
        self._memo: tuple = (None, None)

    def _uuids(self, spec) -> list[str]:
        value = spec.scheduler_hints.get(self.hint)
        if not value:
            return []
        if isinstance(value, str):
            return [value]
        if isinstance(value, (list, tuple)) and all(isinstance(u, str) for u in value):
            return [u for u in value if u]
        raise exception.InvalidRequestSpec(
            f"scheduler hint {self.hint} must be an instance uuid or a list of "
            f"instance uuids, got {value!r}", instance_uuids=list(spec.instance_uuids))

    def _target_hosts(self, spec) -> frozenset[str] | None:
        """Hosts running any of the named instances; None without the hint.

        Read from the database once per spec object, i.e. once per instance
        decision, however many hosts are asked.
        """
        memo = self._memo
        if memo[0] is spec:
            return memo[1]
        uuids = self._uuids(spec)
        hosts = frozenset(db_instances.hosts_of(uuids).values()) if uuids else None
        self._memo = (spec, hosts)
        return hosts

    def _passes(self, on_target: bool) -> bool:
        raise NotImplementedError

    def host_passes(self, host_state, spec) -> bool:
        hosts = self._target_hosts(spec)
        if hosts is None:
            return True
        passes = self._passes(host_state.host in hosts)
        if not passes:
            LOG.debug("%s fails %s hint", host_state, self.hint)
        return passes

    def filter_all(self, table, rows, spec):
        hosts = self._target_hosts(spec)
        if hosts is None:
            return np.ones(len(rows), dtype=bool)
        target_rows = [r for h in hosts for r in table.host_rows.get(h, [])]
        return self._passes(np.isin(rows, target_rows))


class SameHostFilter(_InstanceHostsFilter):
    """Only hosts that run one of the instances named by ``same_host``."""

    hint = "same_host"

    def _passes(self, on_target):
        return on_target


class DifferentHostFilter(_InstanceHostsFilter):
    """Only hosts that run none of the instances named by ``different_host``."""

    hint = "different_host"

    def _passes(self, on_target):
        return ~on_target if isinstance(on_target, np.ndarray) else not on_target


@functools.lru_cache(maxsize=1 << 18)
def _address(host_ip: str):
    """A host's parsed address; None when it does not parse."""
    try:
        return ipaddress.ip_address(host_ip.strip())
    except ValueError:
        return None


class SimpleCIDRAffinityFilter(filters.BaseHostFilter):
    """Only hosts whose ``host_ip`` is in ``build_near_host_ip`` + ``cidr``.

    nova's hint pair: ``cidr`` defaults to ``/24``. A host that reports no
    address, or one that does not parse, is not near anything.
    """

    # A host's address does not change within a request (nova).
    run_filter_once_per_request = True

    def __init__(self):
        self._memo: tuple = (None, None)

    def _network(self, spec):
        memo = self._memo
        if memo[0] is spec:
            return memo[1]
        near = _hint(spec, "build_near_host_ip")
        network = None
        if near:
            cidr = _hint(spec, "cidr") or "/24"
            if not isinstance(near, str) or not isinstance(cidr, str):
                raise exception.InvalidRequestSpec(
                    "scheduler hints build_near_host_ip and cidr must be strings",
                    instance_uuids=list(spec.instance_uuids))
            cidr = cidr.strip()
            # nova concatenates the two; "24" for "/24" is read as meant.
            text = near.strip() + (cidr if cidr.startswith("/") else "/" + cidr)
            try:
                network = ipaddress.ip_network(text, strict=False)
            except ValueError as err:
                raise exception.InvalidRequestSpec(
                    f"scheduler hints build_near_host_ip={near!r} cidr={cidr!r} "
                    f"do not make a network: {err}",
                    instance_uuids=list(spec.instance_uuids)) from None
        self._memo = (spec, network)
        return network

    @staticmethod
    def _near(network, host_ip) -> bool:
        if not host_ip or not isinstance(host_ip, str):
            return False
        address = _address(host_ip)
        if address is None or address.version != network.version:
            return False
        return address in network

    def host_passes(self, host_state, spec) -> bool:
        network = self._network(spec)
        if network is None:
            return True
        if self._near(network, host_state.host_ip):
            return True
        LOG.debug("%s (host_ip %s) is not in %s", host_state, host_state.host_ip,
                  network)
        return False

    def filter_all(self, table, rows, spec):
        network = self._network(spec)
        if network is None:
            return np.ones(len(rows), dtype=bool)
        states = table.states
        seen: dict = {}
        out = np.empty(len(rows), dtype=bool)
        for i, r in enumerate(rows):
            ip = states[r].host_ip
            near = seen.get(ip)
            if near is None:
                near = seen[ip] = self._near(network, ip)
            out[i] = near
        return out
