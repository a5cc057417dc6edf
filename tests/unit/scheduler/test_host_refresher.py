"""HostRefresher: the host table follows the database from a thread of its
own, so that no request waits for the read."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import sqlalchemy as sa

from nova_sched.db import api as db_api
from nova_sched.db import compute_nodes as db_nodes
from nova_sched.db import models
from nova_sched.scheduler import claims, driver as drivers
from nova_sched.scheduler.claims import DatabaseClaims
from nova_sched.scheduler.cloud import compute_report
from nova_sched.scheduler.cloud.host_refresher import HostRefresher
from nova_sched.scheduler.cloud.sources.base import HostRows
from nova_sched.scheduler.decision.cycle import SchedulingCycle
from nova_sched.scheduler.host_manager import HostManager
from tests.unit.scheduler.conftest import compute_report as report

INTERVAL = 0.05


def _store(host):
    return db_nodes.upsert_report(compute_report.validate(report(host)))


def _cycle(hm: HostManager) -> SchedulingCycle:
    return SchedulingCycle(drivers.load_driver("filter_scheduler", hm), hm,
                           DatabaseClaims(), compute_api=None, notifier=None)


def _free_ram(hm, host):
    return hm.table.state(hm.table.row_of(host, host)).free_ram_mb


def _wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "not within the timeout"
        time.sleep(0.01)


@pytest.fixture
def refreshed(db):
    _store("c1")
    hm = HostManager()
    hm.full_resync()
    cycle = _cycle(hm)
    refresher = HostRefresher(cycle, interval=INTERVAL).start()
    yield hm, cycle
    refresher.stop()


@pytest.fixture
def readers(monkeypatch) -> list[str]:
    """The names of the threads that read changed rows, as they read."""
    names: list[str] = []
    real = db_nodes.load_changed

    def spy(since_us, skip_writer=None):
        names.append(threading.current_thread().name)
        return real(since_us, skip_writer)

    monkeypatch.setattr(db_nodes, "load_changed", spy)
    return names


def test_another_daemons_claim_reaches_the_table_without_a_request_reading(refreshed, readers):
    hm, _ = refreshed
    node_id = hm.table.state(hm.table.row_of("c1", "c1")).node_id
    claims.DatabaseClaims().claim(claims.Claim("i1", node_id, 1000, 1, 0))
    time.sleep(0.6)  # past the rate limit a decision's own refresh had
    hm.refresh()  # what a decision calls: the refresher's work now
    assert "MainThread" not in readers
    _wait_for(lambda: _free_ram(hm, "c1") == 7192)
    assert set(readers) == {"host-refresher"}


def test_a_lost_claim_still_refreshes_at_once(refreshed, readers):
    hm, _ = refreshed
    hm.refresh(force=True)
    assert "MainThread" in readers


def test_a_full_resync_goes_on_beside_the_decision_in_hand(refreshed):
    hm, cycle = refreshed
    table = hm.table
    node_id = table.state(table.row_of("c1", "c1")).node_id
    claims.DatabaseClaims().claim(claims.Claim("i1", node_id, 1000, 1, 0))
    # Stamped long ago: only a full resync sees it.
    with db_api.session_scope() as s:
        s.execute(sa.update(models.ComputeNode).values(
            changed_at=db_api.now_us() - 3600 * 10**6))
    with cycle._lock:  # a decision holding the table's rows
        hm._full_wanted = True
        _wait_for(lambda: _free_ram(hm, "c1") == 7192)
        assert hm.table is table


def test_a_table_built_anew_waits_for_the_decision_in_hand(refreshed):
    hm, cycle = refreshed
    _store("c2")
    _wait_for(lambda: hm.table.row_of("c2", "c2") is not None)
    table = hm.table
    with cycle._lock:
        # Half the rows are deleted nodes: the resync builds a new table.
        db_nodes.mark_deleted("c2", "c2")
        hm._full_wanted = True
        time.sleep(10 * INTERVAL)
        assert hm.table is table, "replaced under a decision"
    _wait_for(lambda: hm.table is not table)
    assert list(hm.table.index) == [("c1", "c1")]


def test_changed_rows_apply_while_a_decision_runs(refreshed):
    hm, cycle = refreshed
    with cycle._lock:
        _store("c2")
        _wait_for(lambda: hm.table.row_of("c2", "c2") is not None)


def test_a_source_answering_with_everything_waits_for_a_full_resync(db):
    _store("c1")
    hm = HostManager()
    hm.full_resync()
    real = hm.source.load_changed

    def everything(since_us):
        rows = real(since_us)
        return HostRows(rows.nodes, rows.services, full=True)

    hm.source.load_changed = everything
    _store("c2")
    hm.refresh_changes(may_rebuild=False)
    assert hm.table.row_of("c2", "c2") is None and hm.full_resync_due()
    _cycle(hm).keep_fresh()
    assert hm.table.row_of("c2", "c2") is not None and not hm.full_resync_due()


def test_a_failing_source_is_logged_once_and_tried_again(db, caplog):
    _store("c1")
    hm = HostManager()
    hm.full_resync()
    failures = []
    real = hm.source.load_changed

    def failing(since_us):
        if len(failures) < 5:
            failures.append(since_us)
            raise RuntimeError("database away")
        return real(since_us)

    hm.source.load_changed = failing
    refresher = HostRefresher(_cycle(hm), interval=INTERVAL)
    with caplog.at_level(logging.INFO, logger="nova_sched.scheduler.cloud.host_refresher"):
        refresher.start()
        try:
            _wait_for(lambda: "refreshed again" in caplog.text)
        finally:
            refresher.stop()
    assert caplog.text.count("Refreshing the host states failed") == 1
    assert len(failures) == 5
    assert not hm.refreshed_elsewhere, "stopped: decisions refresh themselves again"


def test_a_request_losing_claims_does_not_wait_for_a_rebuild_under_the_cycles_lock(
        db, monkeypatch):
    """After eight claims lost in a row a request reads what changed; a full
    resync in the HostRefresher holds the reader and, to replace the table,
    waits for the cycle's lock. The request must read outside that lock, or
    each waits for the other for ever."""
    from nova_sched import exception
    from nova_sched.scheduler.wire import request
    from tests.unit.scheduler.conftest import boot_request

    _store("c1")
    hm = HostManager()
    hm.full_resync()
    hm.refreshed_elsewhere = True
    cycle = _cycle(hm)
    real_claim = cycle.claims.claim
    lost = []

    def taken_by_another_daemon(claim, placement=None):
        if len(lost) < 8:
            lost.append(claim.instance_uuid)
            raise exception.ClaimFailed("taken by another scheduler")
        return real_claim(claim, placement)

    monkeypatch.setattr(cycle.claims, "claim", taken_by_another_daemon)
    rebuilding = threading.Event()

    def rebuild():
        # As full_resync(between_decisions=cycle's lock) rebuilding the table.
        with hm._refreshing:
            rebuilding.set()
            time.sleep(0.5)  # the request loses its eight claims meanwhile
            with cycle._lock:
                pass

    outcomes = []
    spec = request.parse(boot_request(memory_mb=512), {})
    refresher = threading.Thread(target=rebuild, daemon=True)
    refresher.start()
    rebuilding.wait(5)
    placing = threading.Thread(
        target=lambda: outcomes.extend(cycle.schedule(None, spec)), daemon=True)
    placing.start()
    placing.join(10)
    assert not placing.is_alive(), "the request and the rebuild wait for each other"
    assert len(lost) == 8
    assert outcomes[0].error is None and outcomes[0].selections[0].host == "c1"
