"""RamFilter: RAM under ram_allocation_ratio, reservations and claims."""

from __future__ import annotations

import pytest

from nova_sched.conf import CONF
from nova_sched.scheduler.filters.ram_filter import RamFilter
from tests.unit.scheduler import fakes


def _passes(requested_mb, ratio=1.0, **node):
    CONF.set_override("ram_allocation_ratio", ratio, "filter_scheduler")
    table = fakes.make_table([dict(host="host1", vcpus=4, local_gb=10, **node)])
    spec = fakes.make_spec(memory_mb=requested_mb)
    flt = RamFilter()
    one = flt.host_passes(fakes.state(table, "host1"), spec)
    assert one == bool(flt.filter_all(table, table.active_rows(), spec)[0])
    return one


def test_runs_for_every_instance():
    assert RamFilter.run_filter_once_per_request is False


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
    st = fakes.state(table, "host1")
    assert RamFilter().host_passes(st, fakes.make_spec(memory_mb=512))
    assert not RamFilter().host_passes(st, fakes.make_spec(memory_mb=513))


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
    assert RamFilter().limits(fakes.state(table, "host1")) == {"memory_mb": 2048 * ratio}


def test_claims_are_read_live_from_the_table():
    table = fakes.make_table([dict(host="host1", memory_mb=1024)])
    st = fakes.state(table, "host1")
    spec = fakes.make_spec(memory_mb=1024)
    CONF.set_override("ram_allocation_ratio", 1.0, "filter_scheduler")
    assert RamFilter().host_passes(st, spec)
    table.columns["claimed_memory_mb"][table.row_of("host1", "host1")] = 1
    assert not RamFilter().host_passes(st, spec)


# -- AggregateRamFilter ------------------------------------------------------

def _aggregate_outcomes(requested_mb, aggregates, ratio=1.0, flt_cls=None):
    """host -> passes, for hosts host1..host3 (1024 MB, 1024 claimed);
    asserts filter_all and host_passes agree."""
    from nova_sched.scheduler.filters.ram_filter import AggregateRamFilter

    CONF.set_override("ram_allocation_ratio", ratio, "filter_scheduler")
    table = fakes.make_table(
        [dict(host=f"host{i}", memory_mb=1024, claimed_memory_mb=1024) for i in (1, 2, 3)],
        aggregates=aggregates)
    spec = fakes.make_spec(memory_mb=requested_mb)
    flt = (flt_cls or AggregateRamFilter)()
    rows = table.active_rows()
    mask = flt.filter_all(table, rows, spec)
    one = {table.states[r].host: flt.host_passes(table.states[r], spec) for r in rows}
    assert dict(zip((table.states[r].host for r in rows), mask.tolist())) == one
    return one


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


def test_plain_ram_filter_ignores_aggregate_ratios():
    aggs = [dict(hosts={"host1"}, metadata={"ram_allocation_ratio": "2.0"})]
    assert _aggregate_outcomes(1024, aggs, flt_cls=RamFilter) == {
        "host1": False, "host2": False, "host3": False}


def test_aggregate_limits_use_the_aggregate_ratio():
    from nova_sched.scheduler.filters.ram_filter import AggregateRamFilter

    CONF.set_override("ram_allocation_ratio", 1.0, "filter_scheduler")
    table = fakes.make_table(
        [dict(host="host1", memory_mb=2048), dict(host="host2", memory_mb=2048)],
        aggregates=[dict(hosts={"host1"}, metadata={"ram_allocation_ratio": "2.5"})])
    flt = AggregateRamFilter()
    assert flt.limits(fakes.state(table, "host1")) == {"memory_mb": 5120.0}
    assert flt.limits(fakes.state(table, "host2")) == {"memory_mb": 2048.0}


def test_aggregate_variant_still_refuses_instances_bigger_than_the_node():
    aggs = [dict(hosts={"host1"}, metadata={"ram_allocation_ratio": "100"})]
    assert not _aggregate_outcomes(1025, aggs)["host1"]
