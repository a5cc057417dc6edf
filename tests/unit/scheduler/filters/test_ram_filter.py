"""RamFilter: RAM under the effective ratio, reservations and claims."""

from __future__ import annotations

import pytest

from nova_sched.conf import CONF
from nova_sched.scheduler.filters.ram_filter import AggregateRamFilter, RamFilter
from tests.unit.scheduler import fakes


def _passes(requested_mb, ratio=1.0, **node):
    CONF.set_override("ram_allocation_ratio", ratio, "filter_scheduler")
    table = fakes.make_table([dict(host="host1", vcpus=4, local_gb=10, **node)])
    return bool(fakes.passes(RamFilter(), table, fakes.make_spec(memory_mb=requested_mb)))


def _limits(flt, table, host):
    return flt.limits(fakes.cycle(table, fakes.make_spec()), table.row_of(host, host))


def _enable(*names):
    CONF.set_override("enabled_filters", list(names), "filter_scheduler")


def test_fits_exactly():
    assert _passes(1024, memory_mb=1024)
    assert not _passes(1025, memory_mb=1024)


def test_claims_count_as_used():
    assert _passes(512, memory_mb=1024, claimed_memory_mb=512)
    assert not _passes(513, memory_mb=1024, claimed_memory_mb=512)


def test_reservation_counts_as_used():
    assert _passes(768, memory_mb=1024, reserved_memory_mb=256)
    assert not _passes(769, memory_mb=1024, reserved_memory_mb=256)


def test_oversubscription():
    # nova's test_ram_filter_oversubscribe: 2048 MB, 3072 used, ratio 2.0.
    assert _passes(1024, ratio=2.0, memory_mb=2048, claimed_memory_mb=3072)
    assert not _passes(1025, ratio=2.0, memory_mb=2048, claimed_memory_mb=3072)


def test_default_ratio_is_one_and_a_half():
    assert CONF.filter_scheduler.ram_allocation_ratio == 1.5
    table = fakes.make_table([dict(host="host1", memory_mb=1024,
                                   claimed_memory_mb=1024)])
    assert fakes.passes(RamFilter(), table, fakes.make_spec(memory_mb=512))
    assert not fakes.passes(RamFilter(), table, fakes.make_spec(memory_mb=513))


def test_instance_may_not_overcommit_against_itself():
    # nova: even with room under the ratio, no instance bigger than the node.
    assert not _passes(1025, ratio=10.0, memory_mb=1024)
    assert _passes(1024, ratio=10.0, memory_mb=1024, claimed_memory_mb=4096)


def test_zero_ram_instance_fits_a_full_node():
    assert _passes(0, memory_mb=1024, claimed_memory_mb=1024)


@pytest.mark.parametrize("ratio", [0.5, 1.0, 1.5, 3.0])
def test_limits(ratio):
    CONF.set_override("ram_allocation_ratio", ratio, "filter_scheduler")
    table = fakes.make_table([dict(host="host1", memory_mb=2048,
                                   reserved_memory_mb=512, claimed_memory_mb=100)])
    assert _limits(RamFilter(), table, "host1") == {"memory_mb": 2048 * ratio}


def test_claims_are_read_live_from_the_table():
    CONF.set_override("ram_allocation_ratio", 1.0, "filter_scheduler")
    table = fakes.make_table([dict(host="host1", memory_mb=1024)])
    spec = fakes.make_spec(memory_mb=1024)
    assert fakes.passes(RamFilter(), table, spec)
    table.columns["claimed_memory_mb"][table.row_of("host1", "host1")] = 1
    assert not fakes.passes(RamFilter(), table, spec)


# -- the node's own ratio ----------------------------------------------------

def test_node_ratio_beats_the_option():
    # 1024 MB node with 1024 claimed: nothing left at the option's 1.0,
    # 1024 MB left at the node's 2.0.
    assert not _passes(1024, ratio=1.0, memory_mb=1024, claimed_memory_mb=1024)
    assert _passes(1024, ratio=1.0, memory_mb=1024, claimed_memory_mb=1024,
                   node_ram_ratio=2.0)
    assert not _passes(1025, ratio=1.0, memory_mb=1024, claimed_memory_mb=1024,
                       node_ram_ratio=2.0)
    # Below the option too: the node's word is final.
    assert not _passes(1, ratio=4.0, memory_mb=1024, claimed_memory_mb=1024,
                       node_ram_ratio=1.0)


def test_node_ratio_beats_the_aggregate():
    _enable("AggregateRamFilter")
    aggs = [dict(hosts={"host1", "host2"}, metadata={"ram_allocation_ratio": "4.0"})]
    nodes = [dict(host="host1", memory_mb=2048, claimed_memory_mb=3072,
                  node_ram_ratio=2.0),
             dict(host="host2", memory_mb=2048, claimed_memory_mb=3072)]
    table = fakes.make_table(nodes, aggregates=aggs)
    # host1: 2.0 -> 1024 MB left; host2: the aggregate's 4.0 -> 5120 left.
    assert fakes.passes(AggregateRamFilter(), table, fakes.make_spec(memory_mb=1024)) == [
        ("host1", "host1"), ("host2", "host2")]
    assert fakes.passes(AggregateRamFilter(), table, fakes.make_spec(memory_mb=1025)) == [
        ("host2", "host2")]
    assert _limits(AggregateRamFilter(), table, "host1") == {"memory_mb": 4096.0}
    assert _limits(AggregateRamFilter(), table, "host2") == {"memory_mb": 8192.0}


def test_zero_node_ratio_means_none_reported():
    assert not _passes(1, ratio=1.0, memory_mb=1024, claimed_memory_mb=1024,
                       node_ram_ratio=0.0)


def test_limits_carry_the_node_ratio():
    CONF.set_override("ram_allocation_ratio", 1.0, "filter_scheduler")
    table = fakes.make_table([dict(host="host1", memory_mb=2048, node_ram_ratio=1.25)])
    assert _limits(RamFilter(), table, "host1") == {"memory_mb": 2560.0}


# -- AggregateRamFilter ------------------------------------------------------

def _aggregate_outcomes(requested_mb, aggregates, ratio=1.0, flt_cls=AggregateRamFilter,
                        enabled=("AggregateRamFilter",)):
    """host -> passes, for hosts host1..host3 (1024 MB, 1024 claimed)."""
    CONF.set_override("ram_allocation_ratio", ratio, "filter_scheduler")
    _enable(*enabled)
    table = fakes.make_table(
        [dict(host=f"host{i}", memory_mb=1024, claimed_memory_mb=1024) for i in (1, 2, 3)],
        aggregates=aggregates)
    kept = fakes.passes(flt_cls(), table, fakes.make_spec(memory_mb=requested_mb))
    return {f"host{i}": (f"host{i}", f"host{i}") in kept for i in (1, 2, 3)}


def test_aggregate_ratio_overrides_the_option_for_its_hosts():
    aggs = [dict(hosts={"host1"}, metadata={"ram_allocation_ratio": "2.0"})]
    assert _aggregate_outcomes(1024, aggs) == {"host1": True, "host2": False, "host3": False}


def test_aggregate_ratio_is_the_minimum_of_the_aggregates():
    aggs = [dict(hosts={"host1", "host2"}, metadata={"ram_allocation_ratio": "3.0"}),
            dict(hosts={"host1"}, metadata={"ram_allocation_ratio": "1.5"})]
    # host1: 1.5 * 1024 - 1024 = 512 left; host2: 3.0 -> 2048 left.
    assert _aggregate_outcomes(512, aggs) == {"host1": True, "host2": True, "host3": False}
    assert _aggregate_outcomes(513, aggs) == {"host1": False, "host2": True, "host3": False}


def test_aggregate_ratio_that_is_not_a_number_falls_back_to_the_option():
    # nova's validate_num_values: any bad value makes the whole set invalid.
    aggs = [dict(hosts={"host1"}, metadata={"ram_allocation_ratio": "abc"}),
            dict(hosts={"host1", "host2"}, metadata={"ram_allocation_ratio": "4.0"})]
    assert _aggregate_outcomes(1024, aggs, ratio=1.0) == {
        "host1": False, "host2": True, "host3": False}
    assert _aggregate_outcomes(512, aggs, ratio=1.5) == {
        "host1": True, "host2": True, "host3": True}


def test_aggregate_ratio_may_be_below_one():
    aggs = [dict(hosts={"host1"}, metadata={"ram_allocation_ratio": "0.5"})]
    # host1 can take nothing more: 512 MB limit, 1024 MB already used.
    assert _aggregate_outcomes(1, aggs, ratio=2.0) == {
        "host1": False, "host2": True, "host3": True}


def test_other_metadata_keys_are_ignored():
    aggs = [dict(hosts={"host1"}, metadata={"cpu_allocation_ratio": "10",
                                            "availability_zone": "az1"})]
    assert _aggregate_outcomes(1024, aggs, ratio=2.0) == {
        "host1": True, "host2": True, "host3": True}


def test_aggregate_ratio_applies_only_while_the_aggregate_filter_is_enabled():
    aggs = [dict(hosts={"host1"}, metadata={"ram_allocation_ratio": "2.0"})]
    nobody = {"host1": False, "host2": False, "host3": False}
    # Only RamFilter enabled: aggregates do not set ratios, for either class.
    assert _aggregate_outcomes(1024, aggs, flt_cls=RamFilter,
                               enabled=("RamFilter",)) == nobody
    assert _aggregate_outcomes(1024, aggs, enabled=("RamFilter",)) == nobody
    # AggregateRamFilter enabled: the ratio is the node's, whoever reads it.
    assert _aggregate_outcomes(1024, aggs, flt_cls=RamFilter,
                               enabled=("RamFilter", "AggregateRamFilter")) == {
        "host1": True, "host2": False, "host3": False}
    # Another resource's Aggregate*Filter does not count.
    assert _aggregate_outcomes(1024, aggs, enabled=("AggregateCoreFilter",)) == nobody


def test_aggregate_limits_use_the_aggregate_ratio():
    CONF.set_override("ram_allocation_ratio", 1.0, "filter_scheduler")
    _enable("AggregateRamFilter")
    table = fakes.make_table(
        [dict(host="host1", memory_mb=2048), dict(host="host2", memory_mb=2048)],
        aggregates=[dict(hosts={"host1"}, metadata={"ram_allocation_ratio": "2.5"})])
    flt = AggregateRamFilter()
    assert _limits(flt, table, "host1") == {"memory_mb": 5120.0}
    assert _limits(flt, table, "host2") == {"memory_mb": 2048.0}
    _enable("RamFilter")
    assert _limits(flt, table, "host1") == {"memory_mb": 2048.0}


def test_aggregate_variant_still_refuses_instances_bigger_than_the_node():
    aggs = [dict(hosts={"host1"}, metadata={"ram_allocation_ratio": "100"})]
    assert not _aggregate_outcomes(1025, aggs)["host1"]
