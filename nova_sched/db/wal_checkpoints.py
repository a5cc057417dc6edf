"""Checkpoints of a SQLite file's write-ahead log, off the writers' path.

By default SQLite checkpoints inside the commit that takes the WAL past
1,000 pages: that writer copies the log into the database file and waits
for ``fdatasync`` twice before its commit returns. In the daemon the
writer is as often a request thread, in the middle of a claim, as the
report writer, and this process's writers queue on one lock: every
writer waited for the disk (perf showed request threads blocked in
``sqlite3WalCheckpoint`` about once every six requests at 10,000 hosts).
Here a thread of its own checkpoints a few times a second instead,
PASSIVE (it neither waits for nor blocks readers and writers); writers
checkpoint themselves only past ``SAFETY_NET_PAGES``, should this thread
fall behind or stop.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import urllib.parse

import sqlalchemy as sa

LOG = logging.getLogger(__name__)

# Seconds between checkpoints.
INTERVAL = 0.25
# wal_autocheckpoint of the engine's connections: a writer checkpoints
# itself past this many pages (about 40 MB) only.
SAFETY_NET_PAGES = 10000


def checkpointed_here(url: str) -> bool:
    """Whether an engine on ``url`` leaves its checkpoints to a
    ``WalCheckpointer``: a SQLite file (an in-memory database has no WAL)."""
    return url.startswith("sqlite") and sa.engine.make_url(url).database not in (
        None, "", ":memory:")


class WalCheckpointer:
    """Checkpoints the WAL of the SQLite file at ``url`` every ``interval``
    seconds from a thread and a connection of its own, until ``stop``."""

    def __init__(self, url: str, interval: float = INTERVAL):
        self._path = sa.engine.make_url(url).database
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
                busy, log, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                self.checkpoints += 1
                failing = False
                if busy:  # another process checkpoints: its turn
                    continue
                if log > 0 and done < log:
                    LOG.debug("WAL checkpoint copied %d of %d pages (readers on "
                              "older snapshots hold the rest)", done, log)
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
