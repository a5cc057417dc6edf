"""DiskFilter: root + ephemeral + swap (MB) under the effective ratio."""

from __future__ import annotations

from nova_sched.conf import CONF
from nova_sched.scheduler.filters.disk_filter import AggregateDiskFilter, DiskFilter
from tests.unit.scheduler import fakes


def _passes(root_gb, ephemeral_gb=0, swap=0, ratio=1.0, **node):
    CONF.set_override("disk_allocation_ratio", ratio, "filter_scheduler")
    table = fakes.make_table([dict(host="host1", memory_mb=1024, vcpus=4, **node)])
    spec = fakes.make_spec(root_gb=root_gb, ephemeral_gb=ephemeral_gb, swap=swap)
    return bool(fakes.passes(DiskFilter(), table, spec))


def _limits(flt, table, host="host1"):
    return flt.limits(fakes.cycle(table, fakes.make_spec()), table.row_of(host, host))


def _enable(*names):
    CONF.set_override("enabled_filters", list(names), "filter_scheduler")


def test_request_size_in_mb():
    spec = fakes.make_spec(root_gb=2, ephemeral_gb=3, swap=512)
    assert spec.disk_mb == 5 * 1024 + 512


def test_swap_is_counted_in_mb():
    # 12 GB node: 11 GB root + 1024 MB swap fits exactly, one MB more does not.
    assert _passes(11, swap=1024, local_gb=12)
    assert not _passes(11, swap=1025, local_gb=12)
    assert _passes(10, ephemeral_gb=1, swap=1024, local_gb=12)
    assert not _passes(10, ephemeral_gb=2, swap=1, local_gb=12)


def test_claims_and_reservation_count_as_used():
    assert _passes(1, swap=512, local_gb=12, claimed_disk_mb=10 * 1024,
                   reserved_disk_mb=512)
    assert not _passes(1, swap=513, local_gb=12, claimed_disk_mb=10 * 1024,
                       reserved_disk_mb=512)


def test_oversubscription():
    # nova's test_disk_filter_oversubscribe: 12 GB, 1 GB used, ratio 10.
    assert _passes(3, ephemeral_gb=3, swap=1024, ratio=10.0, local_gb=12,
                   claimed_disk_mb=1024)
    assert _passes(11, ratio=10.0, local_gb=12, claimed_disk_mb=100 * 1024)
    assert not _passes(12, ratio=10.0, local_gb=12, claimed_disk_mb=109 * 1024)


def test_instance_may_not_overcommit_against_itself():
    # nova's test_disk_filter_oversubscribe_single_instance_fails.
    assert not _passes(10, ephemeral_gb=2, swap=1, ratio=10.0, local_gb=12)
    assert _passes(10, ephemeral_gb=2, ratio=10.0, local_gb=12)


def test_ratio_below_one():
    assert _passes(5, ratio=0.5, local_gb=10)
    assert not _passes(5, swap=1, ratio=0.5, local_gb=10)


def test_limits():
    CONF.set_override("disk_allocation_ratio", 2.5, "filter_scheduler")
    table = fakes.make_table([dict(host="host1", local_gb=12, claimed_disk_mb=3000)])
    assert _limits(DiskFilter(), table) == {"disk_gb": 30.0}


# -- the node's own ratio ----------------------------------------------------

def test_node_ratio_beats_the_option():
    # 10 GB node with 10 GB claimed: nothing left at 1.0, 5 GB at 1.5.
    assert not _passes(1, ratio=1.0, local_gb=10, claimed_disk_mb=10 * 1024)
    assert _passes(5, ratio=1.0, local_gb=10, claimed_disk_mb=10 * 1024,
                   node_disk_ratio=1.5)
    assert not _passes(5, swap=1, ratio=1.0, local_gb=10, claimed_disk_mb=10 * 1024,
                       node_disk_ratio=1.5)
    assert not _passes(1, ratio=3.0, local_gb=10, claimed_disk_mb=10 * 1024,
                       node_disk_ratio=1.0)


def test_node_ratio_beats_the_aggregate():
    CONF.set_override("disk_allocation_ratio", 1.0, "filter_scheduler")
    _enable("AggregateDiskFilter")
    table = fakes.make_table(
        [dict(host="host1", local_gb=10, claimed_disk_mb=10 * 1024, node_disk_ratio=1.5),
         dict(host="host2", local_gb=10, claimed_disk_mb=10 * 1024)],
        aggregates=[dict(hosts={"host1", "host2"},
                         metadata={"disk_allocation_ratio": "3"})])
    assert fakes.passes(AggregateDiskFilter(), table, fakes.make_spec(root_gb=5)) == [
        ("host1", "host1"), ("host2", "host2")]
    assert fakes.passes(AggregateDiskFilter(), table, fakes.make_spec(root_gb=6)) == [
        ("host2", "host2")]
    assert _limits(AggregateDiskFilter(), table, "host1") == {"disk_gb": 15.0}
    assert _limits(AggregateDiskFilter(), table, "host2") == {"disk_gb": 30.0}


def test_limits_carry_the_node_ratio():
    CONF.set_override("disk_allocation_ratio", 1.0, "filter_scheduler")
    table = fakes.make_table([dict(host="host1", local_gb=12, node_disk_ratio=2.0)])
    assert _limits(DiskFilter(), table) == {"disk_gb": 24.0}


# -- AggregateDiskFilter -----------------------------------------------------

def _aggregate_outcomes(root_gb, aggregates, ratio=1.0, flt_cls=AggregateDiskFilter,
                        enabled=("AggregateDiskFilter",)):
    """host -> passes for 10 GB hosts with 10 GB claimed."""
    CONF.set_override("disk_allocation_ratio", ratio, "filter_scheduler")
    _enable(*enabled)
    table = fakes.make_table(
        [dict(host=f"host{i}", local_gb=10, claimed_disk_mb=10 * 1024) for i in (1, 2, 3)],
        aggregates=aggregates)
    kept = fakes.passes(flt_cls(), table, fakes.make_spec(root_gb=root_gb))
    return {f"host{i}": (f"host{i}", f"host{i}") in kept for i in (1, 2, 3)}


def test_aggregate_disk_ratio_minimum_of_the_aggregates():
    aggs = [dict(hosts={"host1", "host2"}, metadata={"disk_allocation_ratio": "2.0"}),
            dict(hosts={"host1"}, metadata={"disk_allocation_ratio": "1.5"})]
    assert _aggregate_outcomes(5, aggs) == {"host1": True, "host2": True, "host3": False}
    assert _aggregate_outcomes(6, aggs) == {"host1": False, "host2": True, "host3": False}


def test_aggregate_disk_ratio_not_a_number_falls_back_to_the_option():
    aggs = [dict(hosts={"host1"}, metadata={"disk_allocation_ratio": ""})]
    assert _aggregate_outcomes(1, aggs, ratio=1.0) == {
        "host1": False, "host2": False, "host3": False}


def test_aggregate_disk_ratio_applies_only_while_the_aggregate_filter_is_enabled():
    aggs = [dict(hosts={"host1"}, metadata={"disk_allocation_ratio": "2.0"})]
    assert _aggregate_outcomes(1, aggs, enabled=("DiskFilter",)) == {
        "host1": False, "host2": False, "host3": False}
    assert _aggregate_outcomes(1, aggs, flt_cls=DiskFilter,
                               enabled=("DiskFilter", "AggregateDiskFilter")) == {
        "host1": True, "host2": False, "host3": False}


def test_aggregate_disk_limits():
    _enable("AggregateDiskFilter")
    table = fakes.make_table([dict(host="host1", local_gb=10)], aggregates=[
        dict(hosts={"host1"}, metadata={"disk_allocation_ratio": "2"})])
    assert _limits(AggregateDiskFilter(), table) == {"disk_gb": 20.0}
