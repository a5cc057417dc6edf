"""Affinity filters: server groups, instances named in hints, host networks.

ServerGroupAffinityFilter / ServerGroupAntiAffinityFilter follow the
request's server group (``cycle.group``: its policy, rules and where its
members are). SameHostFilter / DifferentHostFilter follow the
``same_host`` / ``different_host`` hints (an instance uuid or a list of
them): where those instances are comes from the scheduler's own records
(the host source's: claims and placed instances, or nova's cells), read once per
instance decision when the filter prepares, outside the host table's lock.
SimpleCIDRAffinityFilter follows ``build_near_host_ip`` and ``cidr``
(default ``/24``).
"""

from __future__ import annotations

import ipaddress
import logging

import numpy as np

from nova_sched import exception
from nova_sched.db import allocations as db_allocations
from nova_sched.scheduler import filters

LOG = logging.getLogger(__name__)


def _on_hosts(table, rows: np.ndarray, hosts) -> np.ndarray:
    """Which of ``rows`` are nodes of one of ``hosts``."""
    return filters.among(table, rows, [r for h in hosts
                                       for r in table.host_rows.get(h, ())])


class _GroupFilter(filters.BaseHostFilter):
    policy = ""

    def _group(self, cycle):
        """The request's group when it has this filter's policy, else None."""
        group = cycle.group
        if group is None or group.policy != self.policy:
            return None
        return group


class ServerGroupAffinityFilter(_GroupFilter):
    """Members of an 'affinity' group go to the host of the members placed so far."""

    policy = "affinity"

    def filter_all(self, cycle, rows):
        group = self._group(cycle)
        if group is None or not group.hosts:
            return filters.everyone(rows)
        return _on_hosts(cycle.table, rows, group.hosts)


class ServerGroupAntiAffinityFilter(_GroupFilter):
    """Members of an 'anti-affinity' group go to hosts with fewer than
    ``max_server_per_host`` (rule, default 1) members already."""

    policy = "anti-affinity"

    def filter_all(self, cycle, rows):
        group = self._group(cycle)
        if group is None:
            return filters.everyone(rows)
        limit = group.max_per_host()
        full = [h for h, count in group.hosts.items() if count >= limit]
        return ~_on_hosts(cycle.table, rows, full)


def _hint(spec, name):
    """A hint's value; nova's API wraps hints in lists, so one item is unwrapped."""
    value = spec.scheduler_hints.get(name)
    if isinstance(value, list) and len(value) == 1 and not isinstance(value[0], list):
        return value[0]
    return value


class _InstanceHostsFilter(filters.BaseHostFilter):
    """Hosts chosen by where the instances a hint names are."""

    hint = ""

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

    def prepare(self, cycle) -> frozenset[str] | None:
        """Hosts running any of the named instances; None without the hint.

        Asked of the host source (the scheduler's claims and placed
        instances, or nova's cells) once per decision, before the host table
        is locked: claims move between decisions, so nothing is kept longer.
        """
        uuids = self._uuids(cycle.spec)
        if not uuids:
            return None
        hosts_of = cycle.hosts_of or db_allocations.hosts_of
        return frozenset(hosts_of(uuids).values())

    def _passes(self, on_target: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def filter_all(self, cycle, rows):
        hosts = cycle.prepared(self)
        if hosts is None:
            return filters.everyone(rows)
        passes = self._passes(_on_hosts(cycle.table, rows, hosts))
        if LOG.isEnabledFor(logging.DEBUG) and not passes.all():
            LOG.debug("%d hosts fail the %s hint (instances on %s)",
                      int((~passes).sum()), self.hint, sorted(hosts))
        return passes


class SameHostFilter(_InstanceHostsFilter):
    """Only hosts that run one of the instances named by ``same_host``."""

    hint = "same_host"

    def _passes(self, on_target):
        return on_target


class DifferentHostFilter(_InstanceHostsFilter):
    """Only hosts that run none of the instances named by ``different_host``."""

    hint = "different_host"

    def _passes(self, on_target):
        return ~on_target


_ADDRESS = "affinity_filter.host_ip_address"
_LOW_64 = (1 << 64) - 1


def _address(host_state) -> tuple[int, int, int]:
    """A host's ``host_ip`` as numbers: (IP version, high 64 bits, low 64
    bits); version 0 when it has none or it does not parse."""
    host_ip = host_state.host_ip
    if not host_ip or not isinstance(host_ip, str):
        return 0, 0, 0
    try:
        address = ipaddress.ip_address(host_ip.strip())
    except ValueError:
        return 0, 0, 0
    number = int(address)
    return address.version, number >> 64, number & _LOW_64


class SimpleCIDRAffinityFilter(filters.BaseHostFilter):
    """Only hosts whose ``host_ip`` is in ``build_near_host_ip`` + ``cidr``.

    nova's hint pair: ``cidr`` defaults to ``/24``. A host that reports no
    address, or one that does not parse, is not near anything.
    """

    def prepare(self, cycle):
        """The network the hints name; None without ``build_near_host_ip``."""
        spec = cycle.spec
        near = _hint(spec, "build_near_host_ip")
        if not near:
            return None
        cidr = _hint(spec, "cidr") or "/24"
        if not isinstance(near, str) or not isinstance(cidr, str):
            raise exception.InvalidRequestSpec(
                "scheduler hints build_near_host_ip and cidr must be strings",
                instance_uuids=list(spec.instance_uuids))
        cidr = cidr.strip()
        # nova concatenates the two; "24" for "/24" is read as meant.
        text = near.strip() + (cidr if cidr.startswith("/") else "/" + cidr)
        try:
            return ipaddress.ip_network(text, strict=False)
        except ValueError as err:
            raise exception.InvalidRequestSpec(
                f"scheduler hints build_near_host_ip={near!r} cidr={cidr!r} "
                f"do not make a network: {err}",
                instance_uuids=list(spec.instance_uuids)) from None

    def filter_all(self, cycle, rows):
        network = cycle.prepared(self)
        if network is None:
            return filters.everyone(rows)
        # Each node's parsed address, kept with the table: the network test
        # is two masked comparisons over the rows.
        version, high, low = cycle.table.kinds.numbers(
            _ADDRESS, _address, np.uint64, 3).take(rows, axis=1)
        prefix = int(network.network_address)
        mask = int(network.netmask)
        return ((version == network.version)
                & (high & np.uint64(mask >> 64) == np.uint64(prefix >> 64))
                & (low & np.uint64(mask & _LOW_64) == np.uint64(prefix & _LOW_64)))
