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
