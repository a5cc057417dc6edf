"""CoreFilter: vCPUs under the effective ratio."""

from __future__ import annotations

from nova_sched.conf import CONF
from nova_sched.scheduler.filters.core_filter import AggregateCoreFilter, CoreFilter
from tests.unit.scheduler import fakes


def _table(**node):
    return fakes.make_table([dict(host="host1", memory_mb=1024, local_gb=10, **node)])


def _passes(requested_vcpus, ratio=2.0, **node):
    CONF.set_override("cpu_allocation_ratio", ratio, "filter_scheduler")
    spec = fakes.make_spec(vcpus=requested_vcpus)
    return bool(fakes.passes(CoreFilter(), _table(**node), spec))


def _limits(flt, table, host="host1"):
    return flt.limits(fakes.cycle(table, fakes.make_spec()), table.row_of(host, host))


def _enable(*names):
    CONF.set_override("enabled_filters", list(names), "filter_scheduler")


def test_node_without_vcpus_fails():
    # nova passed such a node ("VCPUs not set; assuming CPU collection
    # broken"), but no claim can be taken on it: the filter says so now.
    assert not _passes(1, vcpus=0)
    assert not _passes(64, vcpus=0, claimed_vcpus=100)
    assert not _passes(1, ratio=16.0, vcpus=0, node_cpu_ratio=8.0)
    # Nor does it send a vCPU limit (nova's, for such a node).
    assert _limits(CoreFilter(), _table(vcpus=0)) == {}


def test_fits_under_ratio():
    # nova's test_core_filter_passes: 4 vCPUs, ratio 2, 7 used.
    assert _passes(1, vcpus=4, claimed_vcpus=7)
    assert not _passes(2, vcpus=4, claimed_vcpus=7)
    assert not _passes(1, vcpus=4, claimed_vcpus=8)


def test_reserved_cpus_count_as_used():
    assert _passes(1, vcpus=4, claimed_vcpus=5, reserved_cpus=2)
    assert not _passes(1, vcpus=4, claimed_vcpus=6, reserved_cpus=2)


def test_instance_bigger_than_physical_fails():
    # nova's test_core_filter_single_instance_overcommit_fails.
    assert not _passes(2, ratio=2.0, vcpus=1)
    assert not _passes(5, ratio=16.0, vcpus=4)
    assert _passes(4, ratio=16.0, vcpus=4, claimed_vcpus=60)


def test_default_ratio_is_sixteen():
    assert CONF.filter_scheduler.cpu_allocation_ratio == 16.0
    table = _table(vcpus=2, claimed_vcpus=31)
    assert fakes.passes(CoreFilter(), table, fakes.make_spec(vcpus=1))
    assert not fakes.passes(CoreFilter(), table, fakes.make_spec(vcpus=2))


def test_limits():
    CONF.set_override("cpu_allocation_ratio", 3.0, "filter_scheduler")
    assert _limits(CoreFilter(), _table(vcpus=4, claimed_vcpus=2)) == {"vcpu": 12.0}


# -- the node's own ratio ----------------------------------------------------

def test_node_ratio_beats_the_option():
    assert not _passes(1, ratio=1.0, vcpus=4, claimed_vcpus=4)
    assert _passes(4, ratio=1.0, vcpus=4, claimed_vcpus=4, node_cpu_ratio=2.0)
    assert not _passes(1, ratio=1.0, vcpus=4, claimed_vcpus=8, node_cpu_ratio=2.0)
    assert not _passes(1, ratio=16.0, vcpus=4, claimed_vcpus=4, node_cpu_ratio=1.0)


def test_node_ratio_beats_the_aggregate():
    CONF.set_override("cpu_allocation_ratio", 1.0, "filter_scheduler")
    _enable("AggregateCoreFilter")
    table = fakes.make_table(
        [dict(host="host1", vcpus=4, claimed_vcpus=4, node_cpu_ratio=1.5),
         dict(host="host2", vcpus=4, claimed_vcpus=4)],
        aggregates=[dict(hosts={"host1", "host2"},
                         metadata={"cpu_allocation_ratio": "4"})])
    # host1: 6 - 4 = 2 free; host2: the aggregate's 16 - 4 = 12 free.
    assert fakes.passes(AggregateCoreFilter(), table, fakes.make_spec(vcpus=2)) == [
        ("host1", "host1"), ("host2", "host2")]
    assert fakes.passes(AggregateCoreFilter(), table, fakes.make_spec(vcpus=3)) == [
        ("host2", "host2")]
    assert _limits(AggregateCoreFilter(), table, "host1") == {"vcpu": 6.0}
    assert _limits(AggregateCoreFilter(), table, "host2") == {"vcpu": 16.0}


def test_limits_carry_the_node_ratio():
    CONF.set_override("cpu_allocation_ratio", 16.0, "filter_scheduler")
    assert _limits(CoreFilter(), _table(vcpus=8, node_cpu_ratio=2.0)) == {"vcpu": 16.0}


# -- AggregateCoreFilter -----------------------------------------------------

def _aggregate_outcomes(requested_vcpus, aggregates, ratio=1.0, nodes=None,
                        flt_cls=AggregateCoreFilter, enabled=("AggregateCoreFilter",)):
    """host -> passes (4-vCPU hosts with 4 claimed unless ``nodes``)."""
    CONF.set_override("cpu_allocation_ratio", ratio, "filter_scheduler")
    _enable(*enabled)
    nodes = nodes or [dict(host=f"host{i}", vcpus=4, claimed_vcpus=4) for i in (1, 2, 3)]
    table = fakes.make_table(nodes, aggregates=aggregates)
    kept = fakes.passes(flt_cls(), table, fakes.make_spec(vcpus=requested_vcpus))
    return {n["host"]: (n["host"], n["host"]) in kept for n in nodes}


def test_aggregate_cpu_ratio_minimum_of_the_aggregates():
    aggs = [dict(hosts={"host1", "host2"}, metadata={"cpu_allocation_ratio": "2"}),
            dict(hosts={"host2"}, metadata={"cpu_allocation_ratio": "1.25"})]
    # host1: 8 - 4 = 4 free; host2: 5 - 4 = 1 free; host3: option 1.0, none free.
    assert _aggregate_outcomes(1, aggs) == {"host1": True, "host2": True, "host3": False}
    assert _aggregate_outcomes(2, aggs) == {"host1": True, "host2": False, "host3": False}


def test_aggregate_cpu_ratio_not_a_number_falls_back_to_the_option():
    aggs = [dict(hosts={"host1"}, metadata={"cpu_allocation_ratio": "lots"})]
    assert _aggregate_outcomes(1, aggs, ratio=2.0) == {
        "host1": True, "host2": True, "host3": True}
    assert _aggregate_outcomes(1, aggs, ratio=1.0) == {
        "host1": False, "host2": False, "host3": False}


def test_aggregate_cpu_ratio_applies_only_while_the_aggregate_filter_is_enabled():
    aggs = [dict(hosts={"host1"}, metadata={"cpu_allocation_ratio": "2"})]
    assert _aggregate_outcomes(1, aggs, enabled=("CoreFilter",)) == {
        "host1": False, "host2": False, "host3": False}
    assert _aggregate_outcomes(1, aggs, flt_cls=CoreFilter,
                               enabled=("CoreFilter", "AggregateCoreFilter")) == {
        "host1": True, "host2": False, "host3": False}


def test_aggregate_core_filter_fails_nodes_without_vcpus():
    aggs = [dict(hosts={"host1"}, metadata={"cpu_allocation_ratio": "10"})]
    nodes = [dict(host="host1", vcpus=0)]
    assert _aggregate_outcomes(1, aggs, nodes=nodes) == {"host1": False}


def test_aggregate_core_limits():
    _enable("AggregateCoreFilter")
    table = fakes.make_table([dict(host="host1", vcpus=4)], aggregates=[
        dict(hosts={"host1"}, metadata={"cpu_allocation_ratio": "3"})])
    assert _limits(AggregateCoreFilter(), table) == {"vcpu": 12.0}
