"""Claims: two schedulers sharing a database can never overcommit a node."""

from __future__ import annotations

import threading
import uuid

import pytest
import sqlalchemy as sa

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.db import compute_nodes as db_nodes
from nova_sched.db import models
from nova_sched.scheduler import claims
from nova_sched.scheduler.cloud import compute_report
from nova_sched.scheduler.wire import request
from nova_sched.scheduler.filter_scheduler import FilterScheduler
from nova_sched.scheduler.host_manager import HostManager
from tests import db_backends
from tests.unit.scheduler.conftest import boot_request, place
from tests.unit.scheduler.conftest import compute_report as report

STORE = claims.DatabaseClaims()


def _nodes():
    with db_api.session_scope() as s:
        return {n.host: n for n in s.execute(sa.select(models.ComputeNode)).scalars()}


def _alloc_sums():
    with db_api.session_scope() as s:
        rows = s.execute(
            sa.select(models.Allocation.compute_node_id,
                      sa.func.sum(models.Allocation.memory_mb),
                      sa.func.count()).group_by(models.Allocation.compute_node_id)
        ).all()
    return {node_id: (int(mem), int(count)) for node_id, mem, count in rows}


def _add_nodes(count=3, memory_mb=4096):
    for i in range(count):
        db_nodes.upsert_report(compute_report.validate(
            report(f"c{i}", memory_mb=memory_mb, vcpus=64, local_gb=1000)))


def test_claim_guard_refuses_past_ratio_minus_reserved(db):
    CONF.set_override("ram_allocation_ratio", 1.5, group="filter_scheduler")
    db_nodes.upsert_report(compute_report.validate(
        report("c1", memory_mb=1000, reserved_host_memory_mb=100)))
    node_id = _nodes()["c1"].id
    STORE.claim(claims.Claim("i1", node_id, memory_mb=1400, vcpus=1, disk_mb=0))
    with pytest.raises(exception.ClaimFailed):
        STORE.claim(claims.Claim("i2", node_id, memory_mb=1, vcpus=1, disk_mb=0))
    node = _nodes()["c1"]
    assert (node.claimed_memory_mb, node.claimed_instances) == (1400, 1)
    assert STORE.release(["i1"]) == [node_id]
    assert STORE.release(["i1"]) == []  # releasing twice frees once
    assert _nodes()["c1"].claimed_memory_mb == 0


def test_claiming_again_moves_the_instance(db):
    _add_nodes(2)
    ids = {h: n.id for h, n in _nodes().items()}
    STORE.claim(claims.Claim("i1", ids["c0"], 1024, 1, 0))
    STORE.claim(claims.Claim("i1", ids["c1"], 1024, 1, 0))
    nodes = _nodes()
    assert nodes["c0"].claimed_memory_mb == 0 and nodes["c1"].claimed_memory_mb == 1024


def test_report_never_overwrites_claims(db):
    _add_nodes(1)
    node_id = _nodes()["c0"].id
    STORE.claim(claims.Claim("i1", node_id, 1024, 2, 2048))
    db_nodes.upsert_report(compute_report.validate(
        report("c0", memory_mb=4096, vcpus=64, local_gb=1000, memory_mb_used=9999)))
    node = _nodes()["c0"]
    assert (node.claimed_memory_mb, node.claimed_vcpus, node.claimed_disk_mb) == (
        1024, 2, 2048)
    assert node.memory_mb_used == 9999


def _race(per_thread: int, schedulers: int = 2) -> tuple[int, int]:
    """Schedulers with their own caches place 512 MB instances concurrently."""
    CONF.set_override("ram_allocation_ratio", 1.0, group="filter_scheduler")
    CONF.set_override("enabled_filters", ["RamFilter", "ComputeFilter"],
                      group="filter_scheduler")
    drivers = []
    for _ in range(schedulers):
        hm = HostManager()
        hm.full_resync()
        drivers.append(FilterScheduler(hm))
    placed, refused = [], []
    start = threading.Barrier(schedulers)

    def work(driver):
        start.wait()
        for i in range(per_thread):
            spec = request.parse(boot_request(memory_mb=512), {})
            try:
                place(driver, spec, spec.instance_uuids[0])
                placed.append(1)
            except exception.NoValidHost:
                refused.append(1)

    threads = [threading.Thread(target=work, args=(d,)) for d in drivers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return len(placed), len(refused)


def _check_no_overcommit(expected_placed: int, placed: int):
    assert placed == expected_placed
    sums = _alloc_sums()
    for node in _nodes().values():
        assert node.claimed_memory_mb <= node.memory_mb  # ratio 1.0
        assert sums.get(node.id, (0, 0)) == (node.claimed_memory_mb,
                                              node.claimed_instances)


def test_two_schedulers_race_on_sqlite_file(db):
    _add_nodes(3)  # 3 nodes x 8 slots of 512 MB
    placed, refused = _race(per_thread=20)
    _check_no_overcommit(24, placed)
    assert refused == 16


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_two_schedulers_race_on_server_databases(kind):
    with db_backends.server_scheduler_database(kind):
        _add_nodes(3)
        placed, refused = _race(per_thread=20)
        _check_no_overcommit(24, placed)
        assert refused == 16


def test_stale_cache_loses_claim_and_moves_to_next_host(db):
    """A daemon whose cache missed another daemon's claims still never overcommits."""
    CONF.set_override("ram_allocation_ratio", 1.0, group="filter_scheduler")
    _add_nodes(2, memory_mb=1024)
    hm = HostManager()
    hm.full_resync()
    driver = FilterScheduler(hm)
    # Another scheduler fills c0 behind this one's back.
    STORE.claim(claims.Claim(str(uuid.uuid4()), _nodes()["c0"].id, 1024, 1, 0))
    # Weigh c0 first by making the cache think c1 is busier.
    hm.table.columns["claimed_memory_mb"][hm.table.row_of("c1", "c1")] = 512
    hm._last_refresh_mono = float("inf")  # no refresh before the decision
    spec = request.parse(boot_request(memory_mb=512), {})
    choice = place(driver, spec, spec.instance_uuids[0])
    assert choice.host == "c1"
    assert _nodes()["c0"].claimed_memory_mb == 1024


def test_own_placements_are_not_read_back_but_others_claims_are(db, monkeypatch):
    """The claims a daemon's decisions counted in its table are not re-read
    by its refreshes (they cost a row each, several times, under load); its
    table still agrees with the database, and another daemon's claim on the
    same node is read."""
    from nova_sched.scheduler import host_manager

    _add_nodes(2)
    # The table reads back 2 s of changes at each refresh (clocks of
    # daemons differ): here the nodes were stored a moment ago.
    monkeypatch.setattr(host_manager, "_OVERLAP_US", 0)
    hm = HostManager()
    hm.full_resync()
    driver = FilterScheduler(hm)
    spec = request.parse(boot_request(memory_mb=512), {})
    for _ in range(3):
        place(driver, spec, str(uuid.uuid4()))
    read = []
    load_changed = db_nodes.load_changed

    def spy(*args, **kwargs):
        nodes, services = load_changed(*args, **kwargs)
        read.extend(n["host"] for n in nodes)
        return nodes, services

    monkeypatch.setattr(db_nodes, "load_changed", spy)
    hm.refresh(force=True)
    assert read == []
    in_db = {host: node.claimed_memory_mb for host, node in _nodes().items()}
    cols = hm.table.columns["claimed_memory_mb"]
    assert {h: int(cols[hm.table.row_of(h, h)]) for h in in_db} == in_db
    assert sum(in_db.values()) == 3 * 512

    with monkeypatch.context() as other:
        other.setattr(db_api, "writer_id", lambda: "other-daemon:1:x")
        STORE.claim(claims.Claim(str(uuid.uuid4()), _nodes()["c1"].id, 256, 1, 0,
                                 counted_through_us=db_api.now_us()))
    hm.refresh(force=True)
    assert read == ["c1"]
    assert int(cols[hm.table.row_of("c1", "c1")]) == _nodes()["c1"].claimed_memory_mb
