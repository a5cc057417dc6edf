"""The demo's report reads its figures through db/ and the resource model."""

from __future__ import annotations

import ast
import pathlib


import nova_sched.sim
from nova_sched.conf import CONF
from nova_sched.db import aggregates
from nova_sched.db import allocations as db_allocations
from nova_sched.db import compute_nodes as db_nodes
from nova_sched.db import instances as db_instances
from nova_sched.scheduler.cloud import compute_report
from nova_sched.sim import report
from tests.unit.scheduler.conftest import compute_report as node_report

SIM = pathlib.Path(nova_sched.sim.__file__).resolve().parent


def _node(host: str, **figures) -> int:
    return db_nodes.upsert_report(compute_report.validate(node_report(host, **figures)))


def _by_host() -> dict[str, dict]:
    return {u["host"]: u for u in report.host_usage()}


def test_allocatable_follows_node_then_aggregate_then_option(db):
    CONF.set_override("ram_allocation_ratio", 1.5, group="filter_scheduler")
    CONF.set_override("cpu_allocation_ratio", 16.0, group="filter_scheduler")
    CONF.set_override("disk_allocation_ratio", 1.0, group="filter_scheduler")
    CONF.set_override("enabled_filters", ["AggregateRamFilter", "ComputeFilter"],
                      group="filter_scheduler")
    own = _node("own", memory_mb=1000, vcpus=10, local_gb=10,
                reserved_host_memory_mb=100, ram_allocation_ratio=3.0)
    _node("agg", memory_mb=1000, vcpus=10, local_gb=10)
    _node("plain", memory_mb=1000, vcpus=10, local_gb=10, reserved_host_cpus=2)
    aggregates.create("dense")
    aggregates.set_metadata("dense", {"ram_allocation_ratio": "2.0",
                                      "cpu_allocation_ratio": "4.0"})
    aggregates.add_host("dense", "agg")
    aggregates.add_host("dense", "own")
    db_allocations.claim("i1", own, 600, 3, 1024,
                         {"ram": 3.0, "vcpu": 16.0, "disk": 1.0})

    usage = _by_host()

    # The node's own ratio beats its aggregate's.
    assert usage["own"]["ram_allocatable_mb"] == 1000 * 3.0 - 100
    assert (usage["own"]["ram_claimed_mb"], usage["own"]["vcpu_claimed"],
            usage["own"]["disk_claimed_mb"], usage["own"]["instances"]) == (
        600, 3, 1024, 1)
    # AggregateRamFilter runs: the aggregate's RAM ratio applies ...
    assert usage["agg"]["ram_allocatable_mb"] == 1000 * 2.0
    # ... but AggregateCoreFilter does not: the vCPU option stays.
    assert usage["agg"]["vcpu_allocatable"] == 10 * 16.0
    assert usage["plain"]["ram_allocatable_mb"] == 1000 * 1.5
    assert usage["plain"]["vcpu_allocatable"] == 10 * 16.0 - 2
    assert usage["plain"]["disk_allocatable_mb"] == 10 * 1024 * 1.0
    assert usage["plain"]["instances"] == 0


def test_without_the_aggregate_filter_the_option_applies(db):
    CONF.set_override("ram_allocation_ratio", 1.5, group="filter_scheduler")
    CONF.set_override("enabled_filters", ["RamFilter"], group="filter_scheduler")
    _node("agg", memory_mb=1000)
    aggregates.create("dense")
    aggregates.set_metadata("dense", {"ram_allocation_ratio": "2.0"})
    aggregates.add_host("dense", "agg")

    assert _by_host()["agg"]["ram_allocatable_mb"] == 1000 * 1.5


def test_failure_reasons_group_the_latest_faults(db):
    db_instances.ensure_instances(["a", "b", "c"], {})
    db_instances.mark_error("a", "old news")
    db_instances.mark_error("a", "No valid host: RamFilter removed 3")
    db_instances.mark_error("b", "No valid host: RamFilter removed 7")

    assert report.failure_reasons(["a", "b", "c"]) == [
        {"reason": "No valid host: RamFilter removed N", "count": 2},
        {"reason": "(no fault recorded)", "count": 1},
    ]


def test_the_demo_reads_the_database_only_through_db_functions():
    for path in SIM.glob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                assert not name.startswith("sqlalchemy"), (path.name, name)
                assert name not in ("nova_sched.db.models",), (path.name, name)


def test_a_stalled_run_says_where_its_instances_stand(db):
    from nova_sched.sim import boot

    db_instances.ensure_instances(["waiting", "placed", "failed"], {})
    db_instances.mark_active("placed", "h1", "h1")
    db_instances.mark_error("failed", "boom")
    reason = boot._stall_reason(["waiting", "placed", "failed", "never-seen"], 60)
    assert reason.startswith("nothing finished for 60 s with 4 instances in flight")
    assert ("1 not recorded, 1 waiting for a host, 1 placed, 1 error" in reason)
    assert "had not taken their request off its queue" in reason
