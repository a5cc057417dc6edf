"""Compute node reports: what validation lets through is what is stored.

The node's own allocation ratios (CONTRACT: ``cpu_allocation_ratio``,
``ram_allocation_ratio``, ``disk_allocation_ratio``; absent, null or 0.0
mean none) are checked, stored and read back.
"""

from __future__ import annotations

import pytest

from nova_sched import exception
from nova_sched.db import compute_nodes as db_nodes
from nova_sched.scheduler.cloud import compute_report
from tests.unit.scheduler.conftest import compute_report as report

RATIOS = ("cpu_allocation_ratio", "ram_allocation_ratio", "disk_allocation_ratio")


def _stored(host: str = "c1", **figures) -> dict:
    node_id = db_nodes.upsert_report(compute_report.validate(report(host, **figures)))
    node, _service = db_nodes.load_node(node_id)
    return node


def test_validation_keeps_ratios_and_reads_none_for_absent_null_or_zero():
    values = compute_report.validate(report(
        "c1", cpu_allocation_ratio=4, ram_allocation_ratio=1.25,
        disk_allocation_ratio=0.0))
    assert values["cpu_allocation_ratio"] == 4.0
    assert isinstance(values["cpu_allocation_ratio"], float)
    assert values["ram_allocation_ratio"] == 1.25
    assert values["disk_allocation_ratio"] is None

    plain = compute_report.validate(report("c1", ram_allocation_ratio=None))
    assert all(plain[key] is None for key in RATIOS)


@pytest.mark.parametrize("key", RATIOS)
@pytest.mark.parametrize("bad", [-1.0, -0.5, -3, float("nan"), float("inf"),
                                 float("-inf"), 10**400, "1.5", True, [1.5],
                                 {"v": 1}])
def test_validation_rejects_nonsense_ratios(key, bad):
    with pytest.raises(exception.InvalidComputeReport, match=key):
        compute_report.validate(report("c1", **{key: bad}))


def test_ratios_round_trip_through_the_database(db):
    node = _stored(cpu_allocation_ratio=8.0, ram_allocation_ratio=1.1,
                   disk_allocation_ratio=0.0)
    assert node["cpu_allocation_ratio"] == 8.0
    # Read back exactly as reported (a double, not a single-precision float).
    assert node["ram_allocation_ratio"] == 1.1
    assert node["disk_allocation_ratio"] is None


def test_a_report_without_ratios_clears_the_ones_sent_before(db):
    assert _stored(ram_allocation_ratio=2.0)["ram_allocation_ratio"] == 2.0
    node = _stored()
    assert all(node[key] is None for key in RATIOS)


def test_a_rejected_report_leaves_the_stored_node_alone(db):
    _stored(cpu_allocation_ratio=2.0)
    with pytest.raises(exception.InvalidComputeReport):
        _stored(cpu_allocation_ratio=-2.0)
    nodes, _services = db_nodes.load_changed(0)
    assert [n["cpu_allocation_ratio"] for n in nodes] == [2.0]
