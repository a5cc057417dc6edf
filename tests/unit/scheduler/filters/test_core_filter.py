"""CoreFilter: vCPUs under cpu_allocation_ratio."""

from __future__ import annotations

from nova_sched.conf import CONF
from nova_sched.scheduler.filters.core_filter import CoreFilter
from tests.unit.scheduler import fakes


def _host(**node):
    table = fakes.make_table([dict(host="host1", memory_mb=1024, local_gb=10, **node)])
    return table, fakes.state(table, "host1")


def _passes(requested_vcpus, ratio=2.0, **node):
    CONF.set_override("cpu_allocation_ratio", ratio, "filter_scheduler")
    table, st = _host(**node)
    spec = fakes.make_spec(vcpus=requested_vcpus)
    flt = CoreFilter()
    one = flt.host_passes(st, spec)
    assert one == bool(flt.filter_all(table, table.active_rows(), spec)[0])
    return one


def test_node_without_vcpus_passes():
    # nova: "VCPUs not set; assuming CPU collection broken".
    assert _passes(1, vcpus=0)
    assert _passes(64, vcpus=0, claimed_vcpus=100)
    _, st = _host(vcpus=0)
    assert CoreFilter().limits(st) == {}


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
    _, st = _host(vcpus=2, claimed_vcpus=31)
    assert CoreFilter().host_passes(st, fakes.make_spec(vcpus=1))
    assert not CoreFilter().host_passes(st, fakes.make_spec(vcpus=2))


def test_limits():
    CONF.set_override("cpu_allocation_ratio", 3.0, "filter_scheduler")
    _, st = _host(vcpus=4, claimed_vcpus=2)
    assert CoreFilter().limits(st) == {"vcpu": 12.0}


# -- AggregateCoreFilter -----------------------------------------------------

def _aggregate_outcomes(requested_vcpus, aggregates, ratio=1.0, nodes=None):
    """host -> passes (4-vCPU hosts with 4 claimed unless ``nodes``); asserts
    filter_all and host_passes agree."""
    from nova_sched.scheduler.filters.core_filter import AggregateCoreFilter

    CONF.set_override("cpu_allocation_ratio", ratio, "filter_scheduler")
    nodes = nodes or [dict(host=f"host{i}", vcpus=4, claimed_vcpus=4) for i in (1, 2, 3)]
    table = fakes.make_table(nodes, aggregates=aggregates)
    spec = fakes.make_spec(vcpus=requested_vcpus)
    flt = AggregateCoreFilter()
    rows = table.active_rows()
    mask = flt.filter_all(table, rows, spec)
    one = {table.states[r].host: flt.host_passes(table.states[r], spec) for r in rows}
    assert dict(zip((table.states[r].host for r in rows), mask.tolist())) == one
    return one


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


def test_aggregate_core_filter_passes_nodes_without_vcpus():
    aggs = [dict(hosts={"host1"}, metadata={"cpu_allocation_ratio": "0.1"})]
    nodes = [dict(host="host1", vcpus=0, claimed_vcpus=9)]
    assert _aggregate_outcomes(8, aggs, nodes=nodes) == {"host1": True}


def test_aggregate_core_limits():
    from nova_sched.scheduler.filters.core_filter import AggregateCoreFilter

    table = fakes.make_table([dict(host="host1", vcpus=4)], aggregates=[
        dict(hosts={"host1"}, metadata={"cpu_allocation_ratio": "3"})])
    assert AggregateCoreFilter().limits(fakes.state(table, "host1")) == {"vcpu": 12.0}
