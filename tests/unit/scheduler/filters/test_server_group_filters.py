"""ServerGroupAffinityFilter and ServerGroupAntiAffinityFilter (nova's semantics)."""

from __future__ import annotations

import dataclasses

from nova_sched.scheduler.filters.affinity_filter import (
    ServerGroupAffinityFilter, ServerGroupAntiAffinityFilter)
from tests.unit.scheduler import fakes


def _table():
    return fakes.make_table([dict(host=h, memory_mb=8192, vcpus=8, local_gb=100)
                             for h in ("h1", "h2", "h3")])


def _spec(policy, hosts, rules=None):
    return dataclasses.replace(fakes.make_spec(), group_policy=policy,
                               group_hosts=hosts, group_rules=rules or {})


def _hosts(flt, table, spec):
    return [h for h, _ in fakes.passes(flt, table, spec)]


def test_anti_affinity_default_limit_is_one_member_per_host():
    table = _table()
    spec = _spec("anti-affinity", {"h1": 1})
    assert _hosts(ServerGroupAntiAffinityFilter(), table, spec) == ["h2", "h3"]


def test_anti_affinity_max_server_per_host_allows_that_many():
    table = _table()
    flt = ServerGroupAntiAffinityFilter()
    spec = _spec("anti-affinity", {"h1": 2, "h2": 1}, {"max_server_per_host": 2})
    assert _hosts(flt, table, spec) == ["h2", "h3"]
    spec = _spec("anti-affinity", {"h1": 2, "h2": 2}, {"max_server_per_host": 2})
    assert _hosts(flt, table, spec) == ["h3"]


def test_anti_affinity_bad_rule_falls_back_to_one():
    table = _table()
    spec = _spec("anti-affinity", {"h1": 1}, {"max_server_per_host": "many"})
    assert _hosts(ServerGroupAntiAffinityFilter(), table, spec) == ["h2", "h3"]


def test_affinity_first_member_goes_anywhere_then_follows():
    table = _table()
    flt = ServerGroupAffinityFilter()
    assert _hosts(flt, table, _spec("affinity", {})) == ["h1", "h2", "h3"]
    assert _hosts(flt, table, _spec("affinity", {"h2": 1})) == ["h2"]


def test_filters_ignore_other_policies_and_requests_without_group():
    table = _table()
    for policy in (None, "soft-affinity", "soft-anti-affinity"):
        spec = _spec(policy, {"h1": 5})
        assert _hosts(ServerGroupAntiAffinityFilter(), table, spec) == ["h1", "h2", "h3"]
        assert _hosts(ServerGroupAffinityFilter(), table, spec) == ["h1", "h2", "h3"]
