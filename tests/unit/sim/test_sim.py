"""nova-sched-sim end to end, small: 20 hosts, 60 instances, one process."""

from __future__ import annotations

import json
import time

import sqlalchemy as sa

from nova_sched.cmd import sim as sim_cmd
from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.db import models


def _capacity_overruns() -> list[str]:
    """Nodes whose claims exceed total x ratio - reserved, by resource."""
    fs = CONF.filter_scheduler
    cn, alloc = models.ComputeNode, models.Allocation
    with db_api.session_scope() as session:
        nodes = session.execute(sa.select(cn)).scalars().all()
        sums = {
            node_id: (mem, cpus, disk, count)
            for node_id, mem, cpus, disk, count in session.execute(
                sa.select(alloc.compute_node_id, sa.func.sum(alloc.memory_mb),
                          sa.func.sum(alloc.vcpus), sa.func.sum(alloc.disk_mb),
                          sa.func.count())
                .group_by(alloc.compute_node_id))
        }
    assert nodes, "the simulation left no compute nodes in the database"
    overruns = []
    for node in nodes:
        mem, cpus, disk, count = sums.get(node.id, (0, 0, 0, 0))
        limits = {
            "memory_mb": (mem, node.memory_mb * fs.ram_allocation_ratio
                          - node.reserved_host_memory_mb),
            "vcpus": (cpus, node.vcpus * fs.cpu_allocation_ratio
                      - node.reserved_host_cpus),
            "disk_mb": (disk, node.local_gb * 1024 * fs.disk_allocation_ratio
                        - node.reserved_host_disk_mb),
        }
        for what, (claimed, limit) in limits.items():
            if claimed > limit:
                overruns.append(f"{node.host} {what}: {claimed} > {limit}")
        # The node's running totals agree with its allocation rows.
        assert (node.claimed_memory_mb, node.claimed_vcpus, node.claimed_disk_mb,
                node.claimed_instances) == (mem, cpus, disk, count), node.host
    return overruns


def test_small_simulation_json(capsys):
    started = time.monotonic()
    try:
        code = sim_cmd.main(["--hosts", "20", "--instances", "60", "--seed", "1",
                             "--json"])
        out = capsys.readouterr().out
        assert code == 0, out
        summary = json.loads(out)

        assert summary["hosts"] == 20
        assert summary["instances"] == 60
        assert summary["placed"] + summary["failed"] == 60
        assert summary["placed"] > 0
        assert summary["decisions_per_second"] > 0
        for key in ("decision_ms", "claim_ms", "request_ms"):
            for point in ("p50", "p99"):
                value = summary[key][point]
                assert isinstance(value, (int, float)) and value > 0, (key, point)
        assert summary["failed"] == sum(g["count"] for g in summary["failures"])

        with db_api.session_scope() as session:
            placed = session.execute(
                sa.select(sa.func.count()).select_from(models.Allocation)
            ).scalar_one()
        assert placed == summary["placed"]
        assert _capacity_overruns() == []
        assert summary["capacity_violations"] == 0

        # The global CONF is left as it was found.
        assert CONF.transport_url is None or "memory" not in CONF.transport_url
        assert CONF.database.connection != "sqlite://"
    finally:
        db_api.get_engine().dispose()
    assert time.monotonic() - started < 30
