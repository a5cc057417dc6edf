"""Reads through claims: where instances are, and each node's summed claims."""

from __future__ import annotations

from nova_sched.db import allocations as db_allocations
from nova_sched.db import compute_nodes as db_nodes
from nova_sched.db import instance_groups
from nova_sched.db import instances as db_instances
from nova_sched.scheduler import compute_report
from tests.unit.scheduler.conftest import compute_report as report

_RATIOS = {"ram": 1.5, "vcpu": 16.0, "disk": 1.0}


def _node(host: str, **figures) -> int:
    return db_nodes.upsert_report(compute_report.validate(report(host, **figures)))


def _claim(uuid: str, node_id: int, memory_mb=512, vcpus=1, disk_mb=1024):
    db_allocations.claim(uuid, node_id, memory_mb, vcpus, disk_mb, _RATIOS)


def test_hosts_of_reads_claims_first_then_placed_rows(db):
    h1, _h2 = _node("h1"), _node("h2")
    db_instances.ensure_instances(["claimed", "placed", "failed", "gone", "waiting"],
                                  {})
    # The row says h2 (a stale placement), the claim says h1: the claim wins.
    db_instances.set_placement("claimed", "h2", "h2", 0)
    _claim("claimed", h1)
    db_instances.set_placement("placed", "h2", "h2", 0)
    db_instances.set_placement("failed", "h2", "h2", 0)
    db_instances.mark_error("failed", "boom")
    db_instances.set_placement("gone", "h2", "h2", 0)
    db_instances.mark_deleted("gone")
    _claim("claimed-only", h1)  # no instance row yet: being placed right now

    found = db_allocations.hosts_of(
        ["claimed", "placed", "failed", "gone", "waiting", "claimed-only", "unknown",
         None, 7])
    assert found == {"claimed": "h1", "placed": "h2", "claimed-only": "h1"}
    assert db_allocations.hosts_of([]) == {}


def test_member_hosts_counts_members_where_hosts_of_finds_them(db):
    h1 = _node("h1")
    instance_groups.record("g-uuid", "web", "anti-affinity", {},
                           ["a", "b", "c", "d"])
    db_instances.ensure_instances(["b", "c"], {})
    _claim("a", h1)
    db_instances.set_placement("b", "h2", "h2", 0)
    db_instances.set_placement("c", "h2", "h2", 1)
    db_instances.mark_error("c", "boom")

    assert instance_groups.member_hosts("g-uuid") == {"h1": 1, "h2": 1}
    assert instance_groups.member_hosts("web") == {"h1": 1, "h2": 1}
    assert instance_groups.member_hosts("g-uuid", exclude={"a"}) == {"h2": 1}
    assert instance_groups.member_hosts("nobody") == {}


def test_usage_by_node_sums_claims_of_live_nodes(db):
    h1 = _node("h1", memory_mb=4096, vcpus=8, local_gb=100,
               reserved_host_memory_mb=512, reserved_host_cpus=1,
               reserved_host_disk_mb=2048, ram_allocation_ratio=2.0)
    _node("h0", memory_mb=2048, cpu_allocation_ratio=4.0)
    gone = _node("h9")
    _claim("i1", h1, memory_mb=1000, vcpus=2, disk_mb=10240)
    _claim("i2", h1, memory_mb=500, vcpus=1, disk_mb=0)
    _claim("i3", gone)
    db_nodes.mark_deleted("h9", "h9")

    usage = db_allocations.usage_by_node()

    assert [(u["host"], u["node"]) for u in usage] == [("h0", "h0"), ("h1", "h1")]
    idle, busy = usage
    assert busy["instances"] == 2
    assert busy["total"] == {"ram": 4096, "vcpu": 8, "disk": 100 * 1024}
    assert busy["reserved"] == {"ram": 512, "vcpu": 1, "disk": 2048}
    assert busy["claimed"] == {"ram": 1500, "vcpu": 3, "disk": 10240}
    assert busy["node_ratio"] == {"ram": 2.0, "vcpu": None, "disk": None}
    assert idle["instances"] == 0
    assert idle["claimed"] == {"ram": 0, "vcpu": 0, "disk": 0}
    assert idle["node_ratio"] == {"ram": None, "vcpu": 4.0, "disk": None}
