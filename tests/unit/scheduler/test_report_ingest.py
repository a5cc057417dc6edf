"""Compute reports: applied at once, coalesced, written in batches, never lost."""

from __future__ import annotations

import logging
import threading

import sqlalchemy as sa

from nova_sched.db import api as db_api
from nova_sched.db import compute_nodes as db_nodes
from nova_sched.db import models
from nova_sched.scheduler.cloud import compute_report
from nova_sched.scheduler.host_manager import HostManager
from nova_sched.scheduler.cloud import report_ingest
from nova_sched.scheduler.cloud.report_ingest import ReportIngest
from tests.unit.scheduler.conftest import compute_report as report


def _values(host, **figures):
    return compute_report.validate(report(host, **figures))


def _stored():
    with db_api.session_scope() as s:
        return {n.host: n for n in s.execute(sa.select(models.ComputeNode)).scalars()}


def _row(hm, host):
    table = hm.table
    return table.row_of(host, host)


class GatedStore:
    """db_nodes.store_reports behind a gate, failing the first ``fail`` calls."""

    def __init__(self, fail: int = 0):
        self.gate = threading.Event()
        self.gate.set()
        self.fail = fail
        self.batches: list[list[str]] = []

    def __call__(self, batch, topic, known_ids, read_through_us=0):
        self.gate.wait(10)
        if self.fail:
            self.fail -= 1
            raise RuntimeError("database went away")
        self.batches.append([f"{v['host']}:{v['memory_mb']}" for v in batch])
        return db_nodes.store_reports(batch, topic, known_ids, read_through_us)


def test_without_a_writer_a_report_is_written_through(db):
    hm = HostManager()
    ingest = ReportIngest(hm)
    ingest.submit(_values("c1", memory_mb=4096))
    assert _stored()["c1"].memory_mb == 4096
    # A node new to the table joins it once its row has an id.
    row = _row(hm, "c1")
    assert hm.table.states[row].node_id == _stored()["c1"].id
    assert hm.table.col("memory_mb")[row] == 4096


def test_a_known_node_is_applied_at_once_without_reading_the_database(db, monkeypatch):
    hm = HostManager()
    ingest = ReportIngest(hm)
    ingest.submit(_values("c1", memory_mb=4096))
    store = GatedStore()
    ingest = ReportIngest(hm, store)
    ingest.start()
    try:
        store.gate.clear()
        monkeypatch.setattr(db_nodes, "load_node", None)  # no read-back
        monkeypatch.setattr(db_nodes, "load_changed", None)
        ingest.submit(_values("c1", memory_mb=8192, reserved_host_memory_mb=512))
        row = _row(hm, "c1")
        assert hm.table.col("memory_mb")[row] == 8192
        assert hm.table.col("reserved_memory_mb")[row] == 512
        assert _stored()["c1"].memory_mb == 4096  # not written yet
        store.gate.set()
        assert ingest.flush()
    finally:
        ingest.stop()
    assert _stored()["c1"].memory_mb == 8192


def _queued_behind_a_held_batch(submit_more) -> tuple[ReportIngest, GatedStore]:
    """A writer holding its first batch (one report) while ``submit_more(
    ingest)`` queues more; then everything written."""
    store = GatedStore()
    ingest = ReportIngest(HostManager(), store)
    ingest.start()
    try:
        store.gate.clear()
        ingest.submit(_values("c0", memory_mb=1000))  # taken by the writer, held
        submit_more(ingest)
        store.gate.set()
        assert ingest.flush()
    finally:
        ingest.stop()
    return ingest, store


def test_coalescing_keeps_the_latest_report_of_each_node(db):
    def submit_more(ingest):
        for mb in range(2000, 2100):
            ingest.submit(_values("c1", memory_mb=mb))
            ingest.submit(_values("c2", memory_mb=mb + 1000))
    ingest, store = _queued_behind_a_held_batch(submit_more)
    stored = _stored()
    assert (stored["c1"].memory_mb, stored["c2"].memory_mb) == (2099, 3099)
    written = [entry for batch in store.batches for entry in batch]
    # Each node written at most twice (once in the held batch), the last
    # write carrying its latest report.
    assert [e for e in written if e.startswith("c1:")][-1] == "c1:2099"
    assert ingest.coalesced >= 190
    assert ingest.received == 201


def test_a_large_backlog_is_written_in_bounded_transactions(db, monkeypatch):
    # Claims wait for the write lock a transaction holds: none may carry
    # more than REPORTS_PER_TRANSACTION reports, however many are queued.
    monkeypatch.setattr(report_ingest, "BATCH_MAX", 20)
    monkeypatch.setattr(report_ingest, "REPORTS_PER_TRANSACTION", 7)
    hosts = [f"n{i:03d}" for i in range(2 * report_ingest.BATCH_MAX + 50)]

    def submit_more(ingest):
        for host in hosts:
            ingest.submit(_values(host, memory_mb=2048))
    _, store = _queued_behind_a_held_batch(submit_more)
    sizes = [len(batch) for batch in store.batches]
    assert max(sizes) == 7
    assert sum(sizes) == len(hosts) + 1
    assert set(_stored()) == set(hosts) | {"c0"}


def test_a_transaction_failing_within_a_batch_leaves_only_the_rest_to_retry(
        db, monkeypatch):
    monkeypatch.setattr(report_ingest, "REPORTS_PER_TRANSACTION", 4)
    monkeypatch.setattr(report_ingest, "_RETRY_INTERVAL", 0.05)
    calls = []

    def store(batch, topic, known_ids, read_through_us=0):
        calls.append([v["host"] for v in batch])
        if len(calls) == 2:
            raise RuntimeError("database went away")
        return db_nodes.store_reports(batch, topic, known_ids, read_through_us)

    ingest = ReportIngest(HostManager(), store)
    hosts = [f"n{i}" for i in range(10)]
    with ingest._cond:  # queued together: one batch of ten
        for host in hosts:
            ingest._pending[(host, host)] = _values(host, memory_mb=512)
    ingest.start()
    try:
        assert ingest.flush()
    finally:
        ingest.stop()
    # Stored four, failed on the next four, then those and the last two
    # written again: none lost, none written twice.
    assert calls[0] == hosts[:4] and calls[1] == hosts[4:8]
    assert sorted(h for call in calls[2:] for h in call) == hosts[4:]
    assert set(_stored()) == set(hosts)
    assert ingest.failed_batches == 1


def test_a_failed_batch_is_logged_and_written_again(db, caplog, monkeypatch):
    monkeypatch.setattr("nova_sched.scheduler.cloud.report_ingest._RETRY_INTERVAL", 0.05)
    hm = HostManager()
    store = GatedStore(fail=2)
    ingest = ReportIngest(hm, store)
    ingest.start()
    try:
        with caplog.at_level(logging.ERROR, "nova_sched.scheduler.cloud.report_ingest"):
            ingest.submit(_values("c1", memory_mb=1024))
            assert ingest.flush()
    finally:
        ingest.stop()
    assert _stored()["c1"].memory_mb == 1024
    assert ingest.failed_batches == 2
    assert sum("Could not store 1 compute reports" in r.message
               for r in caplog.records) == 2


def test_a_newer_report_wins_over_a_failed_batch_put_back(db, monkeypatch):
    monkeypatch.setattr("nova_sched.scheduler.cloud.report_ingest._RETRY_INTERVAL", 0.2)
    hm = HostManager()
    store = GatedStore(fail=1)
    ingest = ReportIngest(hm, store)
    ingest.start()
    try:
        ingest.submit(_values("c1", memory_mb=1024))
        # While the failed batch waits for its retry, a newer report comes.
        threading.Event().wait(0.05)
        ingest.submit(_values("c1", memory_mb=2048))
        assert ingest.flush()
    finally:
        ingest.stop()
    assert _stored()["c1"].memory_mb == 2048


def test_stop_writes_what_is_queued(db):
    hm = HostManager()
    store = GatedStore()
    ingest = ReportIngest(hm, store)
    ingest.start()
    store.gate.clear()
    for i in range(50):
        ingest.submit(_values(f"c{i}", memory_mb=1000 + i))
    store.gate.set()
    ingest.stop()
    assert len(_stored()) == 50
    assert _stored()["c49"].memory_mb == 1049


def test_a_report_describing_the_node_as_before_keeps_its_host_state(db):
    hm = HostManager()
    ingest = ReportIngest(hm)
    ingest.submit(_values("c1", memory_mb=4096))
    before = hm.table.states[_row(hm, "c1")]
    ingest.submit(_values("c1", memory_mb=8192))
    assert hm.table.states[_row(hm, "c1")] is before  # only figures moved
    assert hm.table.col("memory_mb")[_row(hm, "c1")] == 8192
    ingest.submit(_values("c1", memory_mb=8192, stats={"disk_type": "ssd"}))
    after = hm.table.states[_row(hm, "c1")]
    assert after is not before and after.stats == {"disk_type": "ssd"}
    # The database's view, read by a refresh, agrees with what was applied.
    hm.refresh(force=True)
    assert hm.table.states[_row(hm, "c1")].stats == {"disk_type": "ssd"}
    assert hm.table.col("memory_mb")[_row(hm, "c1")] == 8192
