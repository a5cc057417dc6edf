"""SimpleCIDRAffinityFilter: hosts whose host_ip is near ``build_near_host_ip``."""

from __future__ import annotations

import pytest

from nova_sched import exception
from nova_sched.scheduler.filters.affinity_filter import SimpleCIDRAffinityFilter
from tests.unit.scheduler import fakes


def _table():
    return fakes.make_table([
        dict(host="a", host_ip="10.8.1.5"),
        dict(host="b", host_ip="10.8.1.250"),
        dict(host="c", host_ip="10.8.2.7"),
        dict(host="d", host_ip="10.9.0.1"),
        dict(host="v6", host_ip="2001:db8::10"),
        dict(host="no-ip"),
        dict(host="bad-ip", host_ip="not-an-address"),
    ])


def _hosts(hints, table=None):
    table = table or _table()
    spec = fakes.make_spec(scheduler_hints=hints)
    flt = SimpleCIDRAffinityFilter()
    kept = [h for h, _ in fakes.passes(flt, table, spec)]
    for row in table.active_rows():
        state = table.states[row]
        assert SimpleCIDRAffinityFilter().host_passes(state, spec) == (state.host in kept)
    return kept


def test_a_node_reporting_a_new_address_is_judged_by_it():
    table = _table()
    hints = {"build_near_host_ip": "10.8.1.1"}
    assert _hosts(hints, table) == ["a", "b"]
    fakes.add_node(table, host="c", host_ip="10.8.1.9")
    fakes.add_node(table, host="a", host_ip="10.9.9.9")
    assert _hosts(hints, table) == ["b", "c"]


@pytest.mark.parametrize("hints", [None, {}, {"cidr": "/8"}, {"build_near_host_ip": ""},
                                   {"build_near_host_ip": None}])
def test_without_address_hint_every_host_passes(hints):
    assert len(_hosts(hints)) == 7


def test_default_cidr_is_slash_24():
    assert _hosts({"build_near_host_ip": "10.8.1.1"}) == ["a", "b"]


def test_given_cidr():
    assert _hosts({"build_near_host_ip": "10.8.1.1", "cidr": "/16"}) == ["a", "b", "c"]
    assert _hosts({"build_near_host_ip": "10.8.1.1", "cidr": "/8"}) == ["a", "b", "c", "d"]
    assert _hosts({"build_near_host_ip": "10.8.1.5", "cidr": "/32"}) == ["a"]
    assert _hosts({"build_near_host_ip": "10.8.1.200", "cidr": "/25"}) == ["b"]


def test_cidr_without_slash_is_read_as_a_prefix_length():
    assert _hosts({"build_near_host_ip": "10.8.1.1", "cidr": "16"}) == ["a", "b", "c"]


def test_hints_wrapped_in_lists_as_nova_api_stores_them():
    assert _hosts({"build_near_host_ip": ["10.8.1.1"], "cidr": ["/16"]}) == [
        "a", "b", "c"]


def test_ipv6():
    assert _hosts({"build_near_host_ip": "2001:db8::1", "cidr": "/64"}) == ["v6"]


def test_hosts_without_a_usable_address_are_not_near():
    assert "no-ip" not in _hosts({"build_near_host_ip": "0.0.0.0", "cidr": "/0"})
    assert "bad-ip" not in _hosts({"build_near_host_ip": "0.0.0.0", "cidr": "/0"})


@pytest.mark.parametrize("hints", [
    {"build_near_host_ip": "10.8.1.300"},
    {"build_near_host_ip": "10.8.1.1", "cidr": "/33"},
    {"build_near_host_ip": "10.8.1.1", "cidr": "/abc"},
    {"build_near_host_ip": "somewhere"},
    {"build_near_host_ip": 42},
    {"build_near_host_ip": "10.8.1.1", "cidr": 24},
])
def test_malformed_hints_fail_the_request(hints):
    spec = fakes.make_spec(scheduler_hints=hints)
    with pytest.raises(exception.InvalidRequestSpec, match="build_near_host_ip"):
        fakes.passes(SimpleCIDRAffinityFilter(), _table(), spec)
