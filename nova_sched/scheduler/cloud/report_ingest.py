"""Compute reports in: validated, applied, coalesced, written in batches.

``compute_node_update`` is the busiest cast a scheduler receives: nova's
computes report every 10 seconds, 1,000 reports a second at 10,000 hosts.
The RPC handler only validates a report and hands it to ``submit``, which

1. applies it to the in-memory host table at once (from the validated
   report itself: no read-back), so the next decision sees it;
2. queues it for the database, keyed by (host, node): a newer report of a
   node replaces one not yet written, since only the latest matters.

A writer thread takes what is queued and stores it in batches
(``db.compute_nodes.store_reports``), so heartbeats never hold a
request's thread and the database sees a few statements per batch instead
of a transaction per report. A batch is written in short transactions of
``REPORTS_PER_TRANSACTION`` reports, each letting the claims waiting for
SQLite's write lock go first (``db.writers_lock``). What fails to write is
logged and put back (unless a newer report of the node arrived
meanwhile), then written again after ``_RETRY_INTERVAL``: a report is
never silently dropped. A node the table does not know yet joins it once
its row has an id.

Without a running writer (before ``start``, after ``stop``, in tools and
tests) ``submit`` writes the report through at once.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Mapping

from nova_sched.conf import CONF
from nova_sched.db import compute_nodes as db_nodes

LOG = logging.getLogger(__name__)

# Reports taken from the queue at once: a 10,000-host cloud's round of
# reports is a handful of batches.
BATCH_MAX = 2000
# Reports per transaction of a batch. 250 reports in one transaction held
# SQLite's write lock for 20-50 ms at 10,000 hosts, a claim waiting behind
# it (the writer takes the interpreter back after each row's statement,
# behind the threads wanting it); 50 still held it for 5-10 ms.
REPORTS_PER_TRANSACTION = 20
# Seconds between batches: reports gather for this long (or until a batch
# is full), so a batch's fixed cost is shared by hundreds of reports rather
# than paid for every few. A node's heartbeat reaches the database this much
# later; the daemon that took the report applies it to its table at once.
_BATCH_INTERVAL = 0.25
# Seconds to wait after a failed write before trying the batch again.
_RETRY_INTERVAL = 1.0

Key = tuple[str, str]


class ReportIngest:
    """The path of compute reports from the RPC handler to table and database."""

    def __init__(self, host_manager,
                 store: Callable[[list[dict], str, dict[Key, int], int],
                                 dict[Key, int]] | None = None):
        self.host_manager = host_manager
        self._store = store or db_nodes.store_reports
        self._pending: dict[Key, dict] = {}
        self._cond = threading.Condition()
        self._writing = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        # Figures for the log and benchmarks.
        self.received = 0
        self.coalesced = 0
        self.written = 0
        self.batches = 0
        self.failed_batches = 0

    # -- the RPC side -------------------------------------------------------
    def submit(self, values: Mapping) -> None:
        """Take a validated report (``compute_report.validate``'s values)."""
        key = (values["host"], values["hypervisor_hostname"])
        node_id = self.host_manager.node_id_of(*key)
        if node_id is not None:
            self.host_manager.apply_report(values, node_id)
        with self._cond:
            self.received += 1
            if self._thread is None:
                write_through = True
            else:
                write_through = False
                pending = self._pending
                if key in pending:
                    self.coalesced += 1
                pending[key] = dict(values)
                # The writer waits for the first report of a batch, or for
                # a full batch; waking it for every report in between (a
                # thousand a second) only sends it back to waiting.
                if len(pending) == 1 or len(pending) >= BATCH_MAX:
                    self._cond.notify_all()
        if write_through:
            self._write([dict(values)])

    # -- the writer -----------------------------------------------------------
    def start(self) -> None:
        """Start the writer thread: from now on reports are written in batches."""
        with self._cond:
            if self._thread is not None:
                return
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="report-writer",
                                            daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Write what is queued, then stop the writer."""
        with self._cond:
            thread = self._thread
            if thread is None:
                return
            self._stopping = True
            self._cond.notify_all()
        thread.join(timeout)
        with self._cond:
            self._thread = None
            left = list(self._pending.values())
            self._pending.clear()
        unstored = self._write(left)
        if unstored:
            # The nodes' next reports (to any daemon) bring them back.
            LOG.error("%d compute reports queued at shutdown could not be "
                      "stored", len(unstored))

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every queued report is written; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._writing:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.05))
        return True

    def queued(self) -> int:
        with self._cond:
            return len(self._pending)

    def _run(self) -> None:
        last_batch = 0.0
        while True:
            with self._cond:
                while not self._stopping:
                    if not self._pending:
                        self._cond.wait()
                        continue
                    gather = last_batch + _BATCH_INTERVAL - time.monotonic()
                    if gather <= 0 or len(self._pending) >= BATCH_MAX:
                        break
                    self._cond.wait(gather)
                if not self._pending:
                    return
                batch = self._take(BATCH_MAX)
                self._writing = True
                last_batch = time.monotonic()
            try:
                unstored = self._write(batch)
            finally:
                with self._cond:
                    self._writing = False
                    self._cond.notify_all()
            if unstored:
                self._put_back(unstored)
                with self._cond:
                    if self._stopping:
                        return
                    self._cond.wait(_RETRY_INTERVAL)

    def _take(self, limit: int) -> list[dict]:
        keys = list(self._pending)[:limit]
        return [self._pending.pop(key) for key in keys]

    def _put_back(self, batch: list[dict]) -> None:
        with self._cond:
            for values in batch:
                key = (values["host"], values["hypervisor_hostname"])
                # A newer report that arrived meanwhile wins.
                self._pending.setdefault(key, values)

    def _write(self, batch: list[dict]) -> list[dict]:
        """Store ``batch`` a transaction at a time; what could not be stored."""
        for start in range(0, len(batch), REPORTS_PER_TRANSACTION):
            if not self._write_one(batch[start:start + REPORTS_PER_TRANSACTION]):
                return batch[start:]
        return []

    def _write_one(self, batch: list[dict]) -> bool:
        known = {}
        for values in batch:
            key = (values["host"], values["hypervisor_hostname"])
            node_id = self.host_manager.node_id_of(*key)
            if node_id is not None:
                known[key] = node_id
        try:
            ids = self._store(batch, CONF.compute_topic, known,
                              self.host_manager.read_through_us())
        except Exception as err:  # any failure: the batch is kept, not lost
            self.failed_batches += 1
            LOG.error("Could not store %d compute reports (%s: %s); trying "
                      "again in %.0f s", len(batch), type(err).__name__, err,
                      _RETRY_INTERVAL)
            return False
        self.batches += 1
        self.written += len(batch)
        for values in batch:
            key = (values["host"], values["hypervisor_hostname"])
            if self.host_manager.node_id_of(*key) != ids[key]:
                # A node new to this daemon joins the table with its id.
                self.host_manager.apply_report(values, ids[key])
        return True
