"""HostManager: the cache follows the database by reading only changed rows."""

from __future__ import annotations

import datetime as dt
import gc
import time
import weakref

import pytest
import sqlalchemy as sa

from nova_sched.db import api as db_api
from nova_sched.db import compute_nodes as db_nodes
from nova_sched.db import models
from nova_sched.scheduler import claims
from nova_sched.scheduler.cloud import compute_report
from nova_sched.scheduler.host_manager import HostManager
from tests.unit.scheduler.conftest import compute_report as report


def _store(host, **kw):
    return db_nodes.upsert_report(compute_report.validate(report(host, **kw)))


def _free_ram(hm, host):
    return hm.table.state(hm.table.row_of(host, host)).free_ram_mb


def test_full_resync_loads_nodes_services_and_reservations(db):
    _store("c1", memory_mb=4096, reserved_host_memory_mb=512)
    hm = HostManager()
    hm.full_resync()
    state = hm.table.state(hm.table.row_of("c1", "c1"))
    assert state.total_usable_ram_mb == 4096 and state.free_ram_mb == 3584
    assert state.supported_instances == [["x86_64", "kvm", "hvm"]]
    assert state.service_updated > 0 and not state.service_disabled


def test_refresh_reads_only_rows_changed_since_last_look(db, monkeypatch):
    for n in range(5):
        _store(f"c{n}")
    # The reports are an hour old, well outside the refresh overlap.
    hour_ago = db_api.now_us() - 3600 * 10**6
    with db_api.session_scope() as s:
        s.execute(sa.update(models.ComputeNode).values(changed_at=hour_ago))
        s.execute(sa.update(models.Service).values(changed_at=hour_ago))
    hm = HostManager()
    hm.full_resync()
    node_id = hm.table.state(hm.table.row_of("c3", "c3")).node_id
    # Another daemon claims on c3 a moment later.
    claims.DatabaseClaims().claim(claims.Claim("i1", node_id, 1000, 1, 0))

    seen = []
    real = db_nodes.load_changed

    def spy(since_us, skip_writer=None):
        nodes, services = real(since_us, skip_writer)
        seen.append([n["host"] for n in nodes])
        return nodes, services

    monkeypatch.setattr(db_nodes, "load_changed", spy)
    hm.refresh(force=True)
    assert _free_ram(hm, "c3") == 8192 - 1000
    assert seen == [["c3"]]


def _skips_own_reports(monkeypatch):
    from nova_sched.scheduler.cloud.compute_report import validate
    from tests.unit.scheduler.conftest import compute_report as raw_report

    def compute_report(host, **extra):
        return validate(raw_report(host, **extra))

    # Another daemon stored these reports.
    monkeypatch.setattr(db_api, "writer_id", lambda: "other-daemon:1:x")
    db_nodes.store_reports([compute_report(f"c{n}") for n in range(3)])
    monkeypatch.undo()
    since = db_api.now_us() - 60 * 10**6
    mine = db_api.writer_id()
    nodes, services = db_nodes.load_changed(since, skip_writer=mine)
    assert sorted(n["host"] for n in nodes) == ["c0", "c1", "c2"]
    assert sorted(s["host"] for s in services) == ["c0", "c1", "c2"]

    # This process stores c1's next report before it has read the other
    # daemon's: the row must stay visible to it.
    db_nodes.store_reports([compute_report("c1", memory_mb=4096)])
    nodes, services = db_nodes.load_changed(since, skip_writer=mine)
    assert sorted(n["host"] for n in nodes) == ["c0", "c1", "c2"]
    # Once it has read every change, its own reports are not read back.
    db_nodes.store_reports([compute_report("c1", memory_mb=4096)],
                           read_through_us=db_api.now_us())
    nodes, services = db_nodes.load_changed(since, skip_writer=mine)
    assert sorted(n["host"] for n in nodes) == ["c0", "c2"]
    assert sorted(s["host"] for s in services) == ["c0", "c2"]
    # Nor after its next one (the previous change was its own).
    db_nodes.store_reports([compute_report("c1", memory_mb=2048)])
    assert sorted(n["host"] for n in db_nodes.load_changed(
        since, skip_writer=mine)[0]) == ["c0", "c2"]
    # A claim on c1, whoever makes it, is read by every daemon.
    node_id = [n for n in db_nodes.load_changed(0)[0] if n["host"] == "c1"][0]["id"]
    claims.DatabaseClaims().claim(claims.Claim("i1", node_id, 1000, 1, 0))
    nodes, _ = db_nodes.load_changed(since, skip_writer=mine)
    assert sorted(n["host"] for n in nodes) == ["c0", "c1", "c2"]
    # Except a claim its claimer counted in a host table that has read the
    # row's last change: the claimer itself does not read it back...
    claims.DatabaseClaims().claim(claims.Claim(
        "i2", node_id, 300, 1, 0, counted_through_us=db_api.now_us()))
    nodes, _ = db_nodes.load_changed(since, skip_writer=mine)
    assert sorted(n["host"] for n in nodes) == ["c0", "c2"]
    # ...while another daemon does, with both claims in it.
    row = [n for n in db_nodes.load_changed(since, skip_writer="other-daemon:1:x")[0]
           if n["host"] == "c1"][0]
    assert row["claimed_memory_mb"] == 1300 and row["changed_by"] == mine
    # A counted claim on a row whose last change came after the table's
    # read-through stamp (another daemon's claim it has not read) leaves
    # the row to be read: that change is not in the claimer's table.
    read_through = db_api.now_us()
    monkeypatch.setattr(db_api, "writer_id", lambda: "other-daemon:1:x")
    claims.DatabaseClaims().claim(claims.Claim(
        "i3", node_id, 300, 1, 0, counted_through_us=db_api.now_us()))
    monkeypatch.undo()
    claims.DatabaseClaims().claim(claims.Claim(
        "i4", node_id, 300, 1, 0, counted_through_us=read_through))
    nodes, _ = db_nodes.load_changed(since, skip_writer=mine)
    assert sorted(n["host"] for n in nodes) == ["c0", "c1", "c2"]
    # A full load takes everything.
    assert len(db_nodes.load_changed(0, skip_writer=None)[0]) == 3
    # A node's first report stored by this process (its row and its host's
    # service inserted) is not read back by it, however stale its
    # read-through stamp: it adds the node from the report itself...
    db_nodes.store_reports([compute_report("c9")], read_through_us=0)
    nodes, services = db_nodes.load_changed(since, skip_writer=mine)
    assert "c9" not in {n["host"] for n in nodes} | {s["host"] for s in services}
    # ...while every other daemon reads both rows.
    nodes, services = db_nodes.load_changed(since, skip_writer="other-daemon:1:x")
    assert "c9" in {n["host"] for n in nodes} and "c9" in {s["host"] for s in services}


def test_refresh_skips_what_this_process_stored_and_counted_already(db, monkeypatch):
    _skips_own_reports(monkeypatch)


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_own_reports_are_skipped_on_database_servers(kind, monkeypatch):
    # MySQL and MariaDB evaluate an UPDATE's SET list left to right: the
    # statement must decide changed_by before it moves changed_at.
    from tests import db_backends

    with db_backends.server_scheduler_database(kind):
        _skips_own_reports(monkeypatch)


def test_refresh_sees_disable_delete_and_new_nodes(db):
    _store("c1")
    _store("c2")
    hm = HostManager()
    hm.full_resync()
    with db_api.session_scope() as s:
        s.execute(sa.update(models.Service).where(models.Service.host == "c1").values(
            disabled=True, disabled_reason="maintenance", changed_at=db_api.now_us()))
    db_nodes.mark_deleted("c2", "c2")
    _store("c3")
    hm.refresh(force=True)
    c1 = hm.table.state(hm.table.row_of("c1", "c1"))
    assert c1.service_disabled and c1.disabled_reason == "maintenance"
    live = {hm.table.states[r].host for r in hm.candidates()}
    assert live == {"c1", "c3"}


def test_refresh_is_rate_limited_unless_forced(db):
    _store("c1")
    hm = HostManager()
    hm.full_resync()
    node_id = hm.table.state(hm.table.row_of("c1", "c1")).node_id
    claims.DatabaseClaims().claim(claims.Claim("i1", node_id, 1000, 1, 0))
    hm.refresh()  # right after the full load: skipped
    assert _free_ram(hm, "c1") == 8192
    hm.refresh(force=True)
    assert _free_ram(hm, "c1") == 7192


def test_a_stored_report_applies_at_once_and_keeps_claims(db):
    node_id = _store("c1")
    hm = HostManager()
    hm.full_resync()
    claims.DatabaseClaims().claim(claims.Claim("i1", node_id, 1000, 1, 0))
    _store("c1", memory_mb=16384)
    hm._last_refresh_mono = float("inf")  # no incremental refresh would run
    hm.refresh_node(node_id)
    state = hm.table.state(hm.table.row_of("c1", "c1"))
    assert state.total_usable_ram_mb == 16384 and state.free_ram_mb == 15384


def test_aggregate_changes_reach_the_cache(db):
    from nova_sched.db import aggregates

    _store("c1")
    hm = HostManager()
    hm.full_resync()
    assert hm.table.state(0).availability_zones == frozenset()
    aggregates.create("rack1", zone="az1")
    aggregates.add_host("rack1", "c1")
    hm.refresh(force=True)
    assert hm.table.state(0).availability_zones == frozenset({"az1"})


def test_node_ratios_reach_the_table_and_none_is_zero(db):
    node_id = _store("c1", cpu_allocation_ratio=4.0, ram_allocation_ratio=1.25)
    _store("c2")
    hm = HostManager()
    hm.full_resync()
    c1, c2 = hm.table.row_of("c1", "c1"), hm.table.row_of("c2", "c2")
    cols = hm.table.columns
    assert (cols["node_cpu_ratio"][c1], cols["node_ram_ratio"][c1],
            cols["node_disk_ratio"][c1]) == (4.0, 1.25, 0.0)
    assert (cols["node_cpu_ratio"][c2], cols["node_ram_ratio"][c2],
            cols["node_disk_ratio"][c2]) == (0.0, 0.0, 0.0)
    # The resource model reads them: the node's own ratio wins.
    assert hm.table.state(c1).cpu_allocation_ratio == 4.0

    # A later report without ratios gives the decision back to the options.
    _store("c1", disk_allocation_ratio=2.0)
    hm.refresh_node(node_id)
    assert (cols["node_cpu_ratio"][c1], cols["node_ram_ratio"][c1],
            cols["node_disk_ratio"][c1]) == (0.0, 0.0, 2.0)


def test_a_heartbeat_heard_is_not_taken_back_by_an_older_row(db):
    """During a database outage reports are applied but not stored; when the
    database returns, its older rows must not make the hosts look down."""
    _store("c1")
    hour_ago = db_api.utcnow() - dt.timedelta(hours=1)
    with db_api.session_scope() as s:
        s.execute(sa.update(models.Service).values(
            updated_at=hour_ago, changed_at=db_api.now_us()))
    hm = HostManager()
    hm.full_resync()
    row = hm.table.row_of("c1", "c1")
    assert hm.table.columns["service_updated"][row] < time.time() - 3000

    # A report arrives and is applied; the database still holds the old row.
    node_id = hm.table.state(row).node_id
    hm.apply_report(compute_report.validate(report("c1")), node_id)
    heard = hm.table.columns["service_updated"][row]
    assert heard > time.time() - 60
    with db_api.session_scope() as s:  # the old row changes again (an operator)
        s.execute(sa.update(models.Service).values(changed_at=db_api.now_us()))
    hm.refresh(force=True)
    assert hm.table.columns["service_updated"][row] == heard
    hm.full_resync()
    row = hm.table.row_of("c1", "c1")
    assert hm.table.columns["service_updated"][row] == heard


def test_a_table_replaced_by_a_full_resync_is_freed_without_the_cyclic_collector(db):
    # The daemon keeps its long-lived objects frozen (nova_sched.long_lived):
    # a replaced table left in a reference cycle would stay until the next
    # full pass, every resync's worth of host states with it.
    for n in range(4):
        _store(f"c{n}")
    hm = HostManager()
    hm.full_resync()
    hm.table.kinds.codes("arch", lambda state: state.cpu_info)
    db_nodes.mark_deleted("c3", "c3")
    hm.refresh(force=True)
    old = weakref.ref(hm.table)
    kept = hm.table.state(0)
    gc.disable()
    try:
        hm.full_resync()  # a quarter of the rows are deleted nodes: rebuilt
        assert old() is not None, "a state still held keeps its table"
        assert kept.free_ram_mb == 8192, "and reads its row"
        del kept
        assert old() is None
    finally:
        gc.enable()


class _Watched:
    """A lock that counts its holds."""

    def __init__(self):
        self.holds = 0

    def __enter__(self):
        self.holds += 1

    def __exit__(self, *exc):
        return False


def test_a_node_joining_during_a_full_resyncs_read_stays_live(db):
    """A node whose first report is stored and applied while a full resync
    reads the source is missing from that read: it is not taken for a
    node gone, as it was when the table's index was compared with the read
    after it."""
    for n in range(5):
        _store(f"c{n}")
    hm = HostManager()
    hm.full_resync()
    load_all = hm.source.load_all

    def read_then_a_node_joins():
        rows = load_all()
        node = compute_report.validate(report("late"))
        node_id = _store("late")
        hm.apply_report(node, node_id)
        return rows

    hm.source.load_all = read_then_a_node_joins
    hm.full_resync()
    live = {hm.table.states[r].host for r in hm.candidates()}
    assert live == {"c0", "c1", "c2", "c3", "c4", "late"}


def test_a_full_resync_applies_every_row_in_place_while_decisions_go_on(db):
    for n in range(5):
        _store(f"c{n}")
    hm = HostManager()
    between = _Watched()
    hm.full_resync(between_decisions=between)
    assert between.holds == 1, "an empty table is built anew, between decisions"
    table = hm.table
    node_id = table.state(table.row_of("c1", "c1")).node_id
    # Changes an incremental refresh would not see: stamped long ago.
    claims.DatabaseClaims().claim(claims.Claim("i1", node_id, 1000, 1, 0))
    db_nodes.mark_deleted("c4", "c4")
    hour_ago = db_api.now_us() - 3600 * 10**6
    with db_api.session_scope() as s:
        s.execute(sa.update(models.ComputeNode).values(changed_at=hour_ago))
    hm.full_resync(between_decisions=between)
    assert hm.table is table and between.holds == 1, "rows kept, no decision waited"
    assert _free_ram(hm, "c1") == 7192
    live = {hm.table.states[r].host for r in hm.candidates()}
    assert live == {"c0", "c1", "c2", "c3"}
    db_nodes.mark_deleted("c3", "c3")
    hm.full_resync(between_decisions=between)
    assert hm.table is not table and between.holds == 2, (
        "a quarter of the rows deleted nodes: built anew, between decisions")
    assert len(hm.table.index) == 3
