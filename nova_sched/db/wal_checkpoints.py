"""Checkpoints of a SQLite file's write-ahead log, mostly off the writers' path.

By default SQLite checkpoints inside the commit that takes the WAL past
1,000 pages: that writer copies the log into the database file and waits
for ``fdatasync`` twice before its commit returns, and this process's
writers queue on one lock meanwhile. In the daemon that writer is as
often a request thread in the middle of a claim as the report writer
(perf showed request threads blocked in ``sqlite3WalCheckpoint`` about
once every six requests at 10,000 hosts).

Here a thread of its own checkpoints ten times a second, PASSIVE (it
neither waits for nor blocks readers and writers): the bulk of the log is
copied and synced while the writers go on. The log only starts again
from its beginning once a checkpoint has copied all of it before the next
write, which writers appending all the while never allow: so once it is
longer than ``RESTART_PAGES`` the thread copies the few pages written
during its pass while holding the writers' lock. Writers checkpoint
themselves only past ``SAFETY_NET_PAGES``, should this thread fall
behind or stop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import urllib.parse

import sqlalchemy as sa

LOG = logging.getLogger(__name__)

# Seconds between checkpoints. At 10,000 hosts re-reporting every 10 s
# and 200 requests a second the daemon logs some 5,000 pages a second.
INTERVAL = 0.1
# A log longer than this many pages is finished under the writers' lock,
# so that it starts again from its beginning.
RESTART_PAGES = 2000
# wal_autocheckpoint of the engine's connections: a writer checkpoints
# itself past this many pages (about 160 MB) only.
SAFETY_NET_PAGES = 40000


def checkpointed_here(url: str) -> bool:
    """Whether an engine on ``url`` leaves its checkpoints to a
    ``WalCheckpointer``: a SQLite file (an in-memory database has no WAL)."""
    return url.startswith("sqlite") and sa.engine.make_url(url).database not in (
        None, "", ":memory:")


class WalCheckpointer:
    """Checkpoints the WAL of the SQLite file at ``url`` every ``interval``
    seconds from a thread and a connection of its own, until ``stop``;
    ``writers_lock`` is the lock this process's writers hold."""

    def __init__(self, url: str, writers_lock=None, interval: float = INTERVAL):
        self._path = sa.engine.make_url(url).database
        self._writers_lock = writers_lock or contextlib.nullcontext()
        self._interval = interval
        self._stopping = threading.Event()
        self.checkpoints = 0
        self._thread = threading.Thread(target=self._run, name="wal-checkpoints",
                                        daemon=True)

    def start(self) -> "WalCheckpointer":
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        conn = None
        failing = False
        while not self._stopping.wait(self._interval):
            try:
                if conn is None:
                    if not os.path.exists(self._path):
                        continue  # the engine's first connection makes it
                    # mode=rw: never creates the file.
                    conn = sqlite3.connect(f"file:{urllib.parse.quote(self._path)}?mode=rw",
                                           uri=True, timeout=0, isolation_level=None,
                                           check_same_thread=False)
                self._checkpoint(conn)
                failing = False
            except sqlite3.Error as err:
                # Said once until it works again; writers checkpoint
                # themselves past the safety net meanwhile.
                if not failing:
                    LOG.warning("Could not checkpoint the SQLite WAL of %s (%s); "
                                "trying again", self._path, err)
                failing = True
                if conn is not None:
                    conn.close()
                    conn = None
        if conn is not None:
            conn.close()

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        busy, log, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self.checkpoints += 1
        if busy or log < RESTART_PAGES:
            return  # another process checkpoints, or the log is short yet
        with self._writers_lock:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
