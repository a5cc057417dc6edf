"""Claims and reads through them: where instances are, each node's summed claims."""

from __future__ import annotations

import pytest

from nova_sched import exception
from tests.unit.scheduler.conftest import instance_row

from nova_sched.db import allocations as db_allocations
from nova_sched.db import compute_nodes as db_nodes
from nova_sched.db import instance_groups
from nova_sched.db import instances as db_instances
from nova_sched.scheduler.cloud import compute_report
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
    db_instances.mark_active("claimed", "h2", "h2")
    _claim("claimed", h1)
    db_instances.mark_active("placed", "h2", "h2")
    db_instances.mark_active("failed", "h2", "h2")
    db_instances.mark_error("failed", "boom")
    db_instances.mark_active("gone", "h2", "h2")
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
    db_instances.mark_active("b", "h2", "h2")
    db_instances.mark_active("c", "h2", "h2")
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


def test_a_claim_records_the_placement_in_the_same_transaction(db):
    node = _node("h1", memory_mb=1024)
    db_instances.ensure_instances(["fits", "too-big"], {})
    db_allocations.claim("fits", node, 512, 1, 0, _RATIOS, placement=("h1", "h1", 3, None))
    row = instance_row("fits")
    assert (row.host, row.node, row.launch_index) == ("h1", "h1", 3)
    assert row.scheduled_at is not None

    with pytest.raises(exception.ClaimFailed):
        db_allocations.claim("too-big", node, 4096, 1, 0, _RATIOS,
                             placement=("h1", "h1", 0, None))
    row = instance_row("too-big")
    assert (row.host, row.node) == (None, None)
    assert db_allocations.held_on_host("h1") == {"fits": node}


def test_a_second_handler_of_the_same_instance_backs_off(db):
    """A request published twice (a publisher confirm lost in a broker
    failover) handled by two daemons at once: both decided while the
    instance had no host; the one recording its placement second fails
    with AlreadyPlaced, and its claim is rolled back with it."""
    first = _node("h1", memory_mb=1024)
    second = _node("h2", memory_mb=1024)
    db_instances.ensure_instances(["twice"], {})
    db_allocations.claim("twice", first, 512, 1, 0, _RATIOS,
                         placement=("h1", "h1", 0, None))
    with pytest.raises(exception.AlreadyPlaced):
        db_allocations.claim("twice", second, 512, 1, 0, _RATIOS,
                             placement=("h2", "h2", 0, None))
    row = instance_row("twice")
    assert (row.host, row.node) == ("h1", "h1")
    assert db_allocations.held_on_host("h1") == {"twice": first}
    assert db_allocations.held_on_host("h2") == {}
    # Claimed again where its record says it is (a recast after a crash).
    db_allocations.claim("twice", first, 512, 1, 0, _RATIOS,
                         placement=("h1", "h1", 0, "h1"))
    assert db_allocations.held_on_host("h1") == {"twice": first}


def test_the_guard_uses_the_ratios_the_decision_gives(db):
    node = _node("h1", memory_mb=1000, vcpus=2, local_gb=10)
    # 2.5 x 1000 MB: far beyond the option's 1.5, as an aggregate may allow.
    db_allocations.claim("a", node, 2500, 1, 0, dict(_RATIOS, ram=2.5))
    dense = dict(_RATIOS, ram=2.5)
    with pytest.raises(exception.ClaimFailed):
        db_allocations.claim("b", node, 1, 1, 0, dense)
    # Under the option's ratio the node is already past its limit.
    with pytest.raises(exception.ClaimFailed):
        db_allocations.claim("c", node, 0, 1, 0, _RATIOS)
    with pytest.raises(exception.ClaimFailed):
        db_allocations.claim("d", node, 0, 2, 0, dict(dense, vcpu=1.0))
    with pytest.raises(exception.ClaimFailed):
        db_allocations.claim("e", node, 0, 0, 5121, dict(dense, disk=0.5))
    db_allocations.claim("f", node, 0, 1, 5120, dict(dense, vcpu=1.0, disk=0.5))


def test_a_claim_run_again_after_its_commit_was_lost_changes_nothing(db):
    """A Galera node dies under a COMMIT that did commit: the retry of the
    same claim call finds the row it wrote, neither counts it twice nor
    takes the instance for one placed by another handler."""
    node = _node("h1", memory_mb=1024)
    db_instances.ensure_instances(["lost-commit"], {})
    args = ("lost-commit", node, 512, 1, 0, _RATIOS, ("h1", "h1", 0, None))
    db_allocations._claim("token-1", *args)
    db_allocations._claim("token-1", *args)  # the retry
    assert db_allocations.held_on_host("h1") == {"lost-commit": node}
    (usage,) = [u for u in db_allocations.usage_by_node() if u["host"] == "h1"]
    assert usage["claimed"]["ram"] == 512 and usage["instances"] == 1
    with pytest.raises(exception.AlreadyPlaced):  # a different call backs off
        db_allocations._claim("token-2", *args)
