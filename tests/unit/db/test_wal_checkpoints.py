"""A SQLite file's WAL is checkpointed by a thread of its own, not inside
the commits of the scheduler's writers."""

from __future__ import annotations

import logging
import os
import time

import sqlalchemy as sa

from nova_sched.db import api as db_api
from nova_sched.db import wal_checkpoints

PAGE = 4096


def _fill(pages: int, pause_every: int = 0) -> None:
    """Write about ``pages`` pages, one transaction of ours each; a
    millisecond's pause every ``pause_every``, as a daemon's writers leave
    the interpreter to its other threads now and then."""
    with db_api.transaction() as conn:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS filler (b BLOB)")
    for done in range(1, pages + 1):
        with db_api.transaction() as conn:
            conn.execute(sa.text("INSERT INTO filler VALUES (:b)"),
                         {"b": os.urandom(PAGE - 200)})
        if pause_every and done % pause_every == 0:
            time.sleep(0.001)


def test_writers_leave_checkpoints_to_the_checkpointer(tmp_path):
    path = tmp_path / "wal.sqlite"
    db_api.configure(f"sqlite:///{path}")
    try:
        assert db_api._checkpointer is not None
        with db_api.get_engine().connect() as conn:
            assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == (
                wal_checkpoints.SAFETY_NET_PAGES)
        # With the checkpointer stopped, 1,500 pages stay in the log: by
        # default the commit past 1,000 pages would have copied them.
        db_api._checkpointer.stop()
        _fill(1500)
        wal = path.with_name(path.name + "-wal")
        assert wal.stat().st_size > 1000 * PAGE
        database_size = path.stat().st_size
        assert database_size < 1000 * PAGE
        # Started again, it copies them into the database file.
        checkpointer = wal_checkpoints.WalCheckpointer(f"sqlite:///{path}",
                                                       interval=0.05).start()
        try:
            deadline = time.monotonic() + 10
            while path.stat().st_size < 1400 * PAGE:
                assert time.monotonic() < deadline, "the log was never checkpointed"
                time.sleep(0.05)
        finally:
            checkpointer.stop()
        assert checkpointer.checkpoints > 0
    finally:
        db_api.configure("sqlite://")


def test_the_log_starts_again_while_writers_never_pause(tmp_path, monkeypatch):
    """A writer appending without a break never lets a checkpoint finish
    by itself: the log would only grow. Finished under the writers' lock
    once long enough, it starts again from its beginning."""
    monkeypatch.setattr(wal_checkpoints, "RESTART_PAGES", 100)
    path = tmp_path / "busy.sqlite"
    db_api.configure(f"sqlite:///{path}")
    try:
        db_api._checkpointer.stop()
        checkpointer = wal_checkpoints.WalCheckpointer(
            f"sqlite:///{path}", db_api._sqlite_lock, interval=0.01).start()
        try:
            _fill(3000, pause_every=20)
        finally:
            checkpointer.stop()
        wal = path.with_name(path.name + "-wal")
        assert path.stat().st_size > 2000 * PAGE, "checkpointed as it went"
        assert wal.stat().st_size < 1500 * PAGE, "the log started again"
    finally:
        db_api.configure("sqlite://")


def test_a_database_in_memory_or_elsewhere_has_no_checkpointer(tmp_path):
    assert not wal_checkpoints.checkpointed_here("sqlite://")
    assert not wal_checkpoints.checkpointed_here("sqlite:///:memory:")
    assert not wal_checkpoints.checkpointed_here("postgresql://u@h/db")
    assert wal_checkpoints.checkpointed_here(f"sqlite:///{tmp_path}/x.sqlite")
    db_api.configure("sqlite://")
    assert db_api._checkpointer is None


def test_a_missing_file_is_not_created_by_the_checkpointer(tmp_path, caplog):
    path = tmp_path / "never.sqlite"
    checkpointer = wal_checkpoints.WalCheckpointer(f"sqlite:///{path}",
                                                   interval=0.01).start()
    time.sleep(0.1)
    checkpointer.stop()
    assert not path.exists()
    # One that cannot be read is said once while it fails, never fatal.
    path.write_bytes(b"not a database" * 100)
    checkpointer = wal_checkpoints.WalCheckpointer(f"sqlite:///{path}",
                                                   interval=0.01).start()
    with caplog.at_level(logging.WARNING):
        time.sleep(0.2)
        checkpointer.stop()
    said = [r for r in caplog.records if "Could not checkpoint" in r.getMessage()]
    assert len(said) == 1 and str(path) in said[0].getMessage()
