"""Soft server-group weighers: members' hosts preferred or avoided."""

from __future__ import annotations

import numpy as np
import pytest

from nova_sched.conf import CONF
from nova_sched.scheduler import weights
from nova_sched.scheduler.weights.affinity import (
    ServerGroupSoftAffinityWeigher,
    ServerGroupSoftAntiAffinityWeigher,
)
from tests.unit.scheduler import fakes
from tests.unit.scheduler.conftest import boot_request, compute_report

# nova's affinity weigher hosts: members of the group on each host.
MEMBERS = {"host1": 1, "host2": 4, "host4": 2}


def _table(aggregates=()):
    return fakes.make_table([dict(host=f"host{i}") for i in range(1, 5)], aggregates)


def _group(policy, hosts=None):
    """The decision's group context: ``policy`` with MEMBERS by default."""
    return fakes.group(policy, dict(MEMBERS if hosts is None else hosts))


def _weigh(weighers, table, group):
    rows = table.active_rows()
    cycle = fakes.cycle(table, fakes.make_spec(), group)
    result = weights.HostWeightHandler.weigh(weighers, cycle, rows)
    return [table.states[r].host for r in result.rows], result


def _raw(weigher, table, group):
    return fakes.weigh(weigher, table, fakes.make_spec(), group)


# -- soft-affinity --------------------------------------------------------------


def test_soft_affinity_prefers_the_host_with_most_members():
    hosts, result = _weigh([ServerGroupSoftAffinityWeigher()], _table(),
                           _group("soft-affinity"))
    assert hosts == ["host2", "host4", "host1", "host3"]
    np.testing.assert_allclose(result.totals, [1.0, 0.5, 0.25, 0.0])


def test_soft_affinity_multiplier_scales():
    CONF.set_override("soft_affinity_weight_multiplier", 2.0, "filter_scheduler")
    hosts, result = _weigh([ServerGroupSoftAffinityWeigher()], _table(),
                           _group("soft-affinity"))
    assert hosts[0] == "host2" and result.totals[0] == 2.0


def test_soft_affinity_zero_multiplier_weighs_all_alike():
    CONF.set_override("soft_affinity_weight_multiplier", 0.0, "filter_scheduler")
    hosts, result = _weigh([ServerGroupSoftAffinityWeigher()], _table(),
                           _group("soft-affinity"))
    assert hosts == ["host1", "host2", "host3", "host4"]
    assert not result.totals.any()


def test_multipliers_must_not_be_negative():
    # nova deprecated negative values; here the options refuse them.
    for name in ("soft_affinity_weight_multiplier",
                 "soft_anti_affinity_weight_multiplier"):
        with pytest.raises(ValueError):
            CONF.set_override(name, -1.0, "filter_scheduler")


# -- soft-anti-affinity -----------------------------------------------------------


def test_soft_anti_affinity_prefers_the_host_with_fewest_members():
    hosts, result = _weigh([ServerGroupSoftAntiAffinityWeigher()], _table(),
                           _group("soft-anti-affinity"))
    assert hosts == ["host3", "host1", "host4", "host2"]
    np.testing.assert_allclose(result.totals, [1.0, 0.75, 0.5, 0.0])


def test_soft_anti_affinity_raw_weight_is_minus_the_members():
    raw = _raw(ServerGroupSoftAntiAffinityWeigher(), _table(),
               _group("soft-anti-affinity"))
    assert raw.tolist() == [-1, -4, 0, -2]


def test_soft_affinity_raw_weight_is_the_members():
    raw = _raw(ServerGroupSoftAffinityWeigher(), _table(), _group("soft-affinity"))
    assert raw.tolist() == [1, 4, 0, 2]


def test_soft_anti_affinity_multiplier_scales_and_zero_disables():
    CONF.set_override("soft_anti_affinity_weight_multiplier", 2.0, "filter_scheduler")
    hosts, result = _weigh([ServerGroupSoftAntiAffinityWeigher()], _table(),
                           _group("soft-anti-affinity"))
    assert hosts[0] == "host3" and result.totals[0] == 2.0
    CONF.set_override("soft_anti_affinity_weight_multiplier", 0.0, "filter_scheduler")
    _, result = _weigh([ServerGroupSoftAntiAffinityWeigher()], _table(),
                       _group("soft-anti-affinity"))
    assert not result.totals.any()


def test_first_member_of_a_group_weighs_every_host_alike():
    for policy, cls in (("soft-affinity", ServerGroupSoftAffinityWeigher),
                        ("soft-anti-affinity", ServerGroupSoftAntiAffinityWeigher)):
        hosts, result = _weigh([cls()], _table(), _group(policy, {}))
        assert hosts == ["host1", "host2", "host3", "host4"]
        assert not result.totals.any()


# -- other requests ------------------------------------------------------------------


@pytest.mark.parametrize("policy", [None, "affinity", "anti-affinity",
                                    "soft-anti-affinity"])
def test_soft_affinity_weighs_zero_for_other_policies(policy):
    raw = _raw(ServerGroupSoftAffinityWeigher(), _table(), _group(policy))
    assert raw.tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("policy", [None, "affinity", "anti-affinity", "soft-affinity"])
def test_soft_anti_affinity_weighs_zero_for_other_policies(policy):
    raw = _raw(ServerGroupSoftAntiAffinityWeigher(), _table(), _group(policy))
    assert raw.tolist() == [0, 0, 0, 0]


def test_a_request_without_a_group_weighs_zero():
    # No group: cycle.group is None, whatever the request says.
    spec = fakes.make_spec(instance_group={"uuid": "g1", "policy": "soft-affinity"})
    table = _table()
    for weigher in (ServerGroupSoftAffinityWeigher(),
                    ServerGroupSoftAntiAffinityWeigher()):
        assert fakes.weigh(weigher, table, spec).tolist() == [0, 0, 0, 0]


def test_both_weighers_together_only_the_matching_one_counts():
    both = [ServerGroupSoftAffinityWeigher(), ServerGroupSoftAntiAffinityWeigher()]
    hosts, result = _weigh(both, _table(), _group("soft-affinity"))
    assert hosts[0] == "host2"
    assert not result.contributions["ServerGroupSoftAntiAffinityWeigher"].any()


def test_every_node_of_a_host_counts_the_host_members():
    table = _table()
    fakes.add_node(table, "host2", "host2-b")
    fakes.add_node(table, "host5", "host5-a")
    rows = table.active_rows()
    raw = _raw(ServerGroupSoftAffinityWeigher(), table, _group("soft-affinity"))
    by_node = {table.states[r].nodename: v for r, v in zip(rows, raw)}
    assert by_node["host2"] == by_node["host2-b"] == 4
    assert by_node["host5-a"] == 0


def test_members_on_unknown_hosts_are_ignored():
    group = _group("soft-affinity", {"gone": 3, "host3": 1})
    hosts, result = _weigh([ServerGroupSoftAffinityWeigher()], _table(), group)
    assert hosts[0] == "host3" and result.totals[0] == 1.0


@pytest.mark.parametrize("cls, key", [
    (ServerGroupSoftAffinityWeigher, "soft_affinity_weight_multiplier"),
    (ServerGroupSoftAntiAffinityWeigher, "soft_anti_affinity_weight_multiplier"),
])
@pytest.mark.parametrize("values, expected", [
    (["3"], 3.0),
    (["3", "0.5"], 0.5),
    (["none"], 1.0),
])
def test_aggregate_metadata_overrides_the_multiplier(cls, key, values, expected):
    table = _table([dict(hosts=["host3"], metadata={key: v}) for v in values])
    weigher = cls()
    assert weigher.weight_multiplier(fakes.state(table, "host3")) == expected
    assert weigher.weight_multiplier(fakes.state(table, "host1")) == 1.0
    cycle = fakes.cycle(table, fakes.make_spec())
    np.testing.assert_allclose(
        np.broadcast_to(weigher.multipliers(cycle, table.active_rows()), (4,)),
        [1.0, 1.0, expected, 1.0])


# -- through the scheduler: the group's members come from its own records -------


def _group_request(policy, count):
    spec = boot_request(count=count)
    spec["instance_group"] = {"uuid": f"group-{policy}", "name": policy,
                              "policy": policy}
    return spec


def test_soft_affinity_stacks_a_request_on_one_host(manager, ctxt):
    # Strong enough to outweigh RAM and I/O spreading the instances.
    CONF.set_override("soft_affinity_weight_multiplier", 100.0, "filter_scheduler")
    for host in ("c1", "c2", "c3"):
        manager.compute_node_update(ctxt, compute_report(host))
    manager.run_instance(ctxt, _group_request("soft-affinity", 3), "pw", [], None,
                         True, {})
    hosts = [c["host"] for c in manager.cycle.compute_api.casts]
    assert len(hosts) == 3 and len(set(hosts)) == 1
    # A later request of the same group joins them.
    manager.run_instance(ctxt, _group_request("soft-affinity", 1), "pw", [], None,
                         True, {})
    assert manager.cycle.compute_api.casts[-1]["host"] == hosts[0]


def test_soft_anti_affinity_spreads_but_never_fails(manager, ctxt):
    CONF.set_override("soft_anti_affinity_weight_multiplier", 100.0,
                      "filter_scheduler")
    # Everything else stacks: without the group's members the request
    # would land on one host.
    CONF.set_override("ram_weight_multiplier", -10.0, "filter_scheduler")
    for name in ("cpu", "disk", "io_ops"):
        CONF.set_override(f"{name}_weight_multiplier", 0.0, "filter_scheduler")
    for host in ("c1", "c2", "c3"):
        manager.compute_node_update(ctxt, compute_report(host))
    manager.run_instance(ctxt, _group_request("soft-anti-affinity", 4), "pw", [],
                         None, True, {})
    hosts = [c["host"] for c in manager.cycle.compute_api.casts]
    assert len(hosts) == 4
    assert set(hosts[:3]) == {"c1", "c2", "c3"}
