"""ServerGroupAffinityFilter and ServerGroupAntiAffinityFilter (nova's semantics),
reading the request's server group from the decision (``cycle.group``)."""

from __future__ import annotations

from nova_sched.scheduler.filters.affinity_filter import (
    ServerGroupAffinityFilter, ServerGroupAntiAffinityFilter)
from tests.unit.scheduler import fakes


def _table():
    return fakes.make_table([dict(host=h, memory_mb=8192, vcpus=8, local_gb=100)
                             for h in ("h1", "h2", "h3")])


def _group(policy, hosts, rules=None):
    return fakes.group(policy, hosts=hosts, rules=rules)


def _hosts(flt, table, group):
    return [h for h, _ in fakes.passes(flt, table, fakes.make_spec(), group=group)]


def test_anti_affinity_default_limit_is_one_member_per_host():
    table = _table()
    group = _group("anti-affinity", {"h1": 1})
    assert _hosts(ServerGroupAntiAffinityFilter(), table, group) == ["h2", "h3"]


def test_anti_affinity_max_server_per_host_allows_that_many():
    table = _table()
    flt = ServerGroupAntiAffinityFilter()
    group = _group("anti-affinity", {"h1": 2, "h2": 1}, {"max_server_per_host": 2})
    assert _hosts(flt, table, group) == ["h2", "h3"]
    group = _group("anti-affinity", {"h1": 2, "h2": 2}, {"max_server_per_host": 2})
    assert _hosts(flt, table, group) == ["h3"]


def test_anti_affinity_bad_rule_falls_back_to_one():
    table = _table()
    group = _group("anti-affinity", {"h1": 1}, {"max_server_per_host": "many"})
    assert _hosts(ServerGroupAntiAffinityFilter(), table, group) == ["h2", "h3"]


def test_affinity_first_member_goes_anywhere_then_follows():
    table = _table()
    flt = ServerGroupAffinityFilter()
    assert _hosts(flt, table, _group("affinity", {})) == ["h1", "h2", "h3"]
    assert _hosts(flt, table, _group("affinity", {"h2": 1})) == ["h2"]


def test_filters_ignore_other_policies_and_requests_without_group():
    table = _table()
    for policy in (None, "soft-affinity", "soft-anti-affinity"):
        group = _group(policy, {"h1": 5})
        assert _hosts(ServerGroupAntiAffinityFilter(), table, group) == ["h1", "h2", "h3"]
        assert _hosts(ServerGroupAffinityFilter(), table, group) == ["h1", "h2", "h3"]
    for flt in (ServerGroupAntiAffinityFilter(), ServerGroupAffinityFilter()):
        assert _hosts(flt, table, None) == ["h1", "h2", "h3"]


def test_members_count_on_every_node_of_their_host():
    table = fakes.make_table([dict(host="h1", nodename="h1-a"),
                              dict(host="h1", nodename="h1-b"), dict(host="h2")])
    spec = fakes.make_spec()
    group = _group("affinity", {"h1": 1})
    assert fakes.passes(ServerGroupAffinityFilter(), table, spec, group=group) == [
        ("h1", "h1-a"), ("h1", "h1-b")]
    group = _group("anti-affinity", {"h1": 1})
    assert fakes.passes(ServerGroupAntiAffinityFilter(), table, spec, group=group) == [
        ("h2", "h2")]
