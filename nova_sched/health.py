"""Is the daemon doing its job? The answer ``GET /healthz`` gives.

A scheduler process is healthy while it consumes its topic (the consumer
thread runs and polls the broker) and reaches its database (a ``SELECT 1``
answered within the last few probes). The database is probed on a thread
of its own every ``PROBE_INTERVAL`` seconds, so that a health request never
waits on a database that hangs: it reads the last probe's result.

With ``[scheduler] workers > 1`` the parent process answers for its
workers: each worker writes its own verdict to a small file
(``WorkerHealthFiles``) at every probe, and the parent is healthy when
every worker it started is alive and has written "ok" recently.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

LOG = logging.getLogger(__name__)

# Seconds between two probes of the database (and samples of the gauges).
PROBE_INTERVAL = 5.0
# A database probe taking longer than this counts as a failure when read.
_PROBE_LATE = 3 * PROBE_INTERVAL


class RecentEvents:
    """What happened lately that an operator asks ``/healthz?verbose`` for:
    a broker failover, publishes that waited for the broker, database
    transactions retried. The same event repeated is counted, not listed
    again."""

    def __init__(self, keep: int = 20):
        self._lock = threading.Lock()
        self._events: collections.deque[list] = collections.deque(maxlen=keep)

    def note(self, text: str) -> None:
        now = time.monotonic()
        with self._lock:
            if self._events and self._events[-1][0] == text:
                self._events[-1][1] = now
                self._events[-1][2] += 1
            else:
                self._events.append([text, now, 1])

    def lines(self) -> list[str]:
        """Each event, oldest first, with how long ago it last happened."""
        now = time.monotonic()
        with self._lock:
            events = [tuple(event) for event in self._events]
        return [f"{now - at:.0f} s ago: {text}" + (f" (x{count})" if count > 1 else "")
                for text, at, count in events]


class HealthMonitor:
    """The health of one scheduler process: its consumer and its database.

    ``consumer_problem()`` returns why the consumer is not consuming, or
    None; ``ping()`` raises when the database does not answer. Every probe
    also runs ``on_probe(reason)`` (sampling the gauges, writing a worker's
    health file); ``reason`` is None when healthy.
    """

    def __init__(self, consumer_problem: Callable[[], str | None],
                 ping: Callable[[], None],
                 on_probe: Iterable[Callable[[str | None], None]] = (),
                 interval: float = PROBE_INTERVAL):
        self._consumer_problem = consumer_problem
        self._ping = ping
        self._on_probe = list(on_probe)
        self._interval = interval
        self._db_error: str | None = "the database has not been probed yet"
        self._db_probed = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.probe()
        self._thread = threading.Thread(target=self._run, name="health-probe",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._interval + 5)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.probe()

    def probe(self) -> None:
        """Ask the database now, then tell the ``on_probe`` callbacks."""
        try:
            self._ping()
            error = None
        except Exception as err:  # whatever the driver raises: unhealthy
            error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        with self._lock:
            self._db_error = error
            self._db_probed = time.monotonic()
        reason = self.reason()
        for callback in self._on_probe:
            try:
                callback(reason)
            except Exception:  # a probe must never stop the next one
                LOG.exception("A health probe callback failed")

    def reason(self) -> str | None:
        """Why this process is unhealthy, in one line; None when healthy."""
        problem = self._consumer_problem()
        if problem:
            return problem
        with self._lock:
            error, probed = self._db_error, self._db_probed
        if error:
            return f"database unreachable: {error}"
        age = time.monotonic() - probed
        if age > _PROBE_LATE:
            return f"database probe stuck for {age:.0f} s"
        return None


class WorkerHealthFiles:
    """Each worker's verdict in a file of ``directory``, read by the parent:
    its first line the verdict, the others its recent events."""

    def __init__(self, directory: str, details: Callable[[], list[str]] | None = None):
        self.directory = Path(directory)
        self._details = details

    def _path(self, pid: int) -> Path:
        return self.directory / f"health-{pid}.txt"

    def write(self, reason: str | None) -> None:
        """This worker's verdict now (atomically: a reader sees old or new)."""
        path = self._path(os.getpid())
        tmp = path.with_suffix(".tmp")
        lines = [reason or "ok", *(self._details() if self._details else [])]
        tmp.write_text("\n".join(lines))
        os.replace(tmp, path)

    def details(self, pids: Iterable[int]) -> list[str]:
        """The workers' recent events, each line naming its worker."""
        out = []
        for pid in pids:
            try:
                lines = self._path(pid).read_text().splitlines()[1:]
            except FileNotFoundError:
                continue
            out.extend(f"worker {pid}: {line}" for line in lines)
        return out

    def reason(self, pids: Iterable[int]) -> str | None:
        """Why the workers ``pids`` are not all healthy; None when they are."""
        now = time.time()
        problems = []
        pids = list(pids)
        if not pids:
            return "no worker is running"
        for pid in pids:
            path = self._path(pid)
            try:
                text = (path.read_text().splitlines() or [""])[0].strip()
                age = now - path.stat().st_mtime
            except FileNotFoundError:
                problems.append(f"worker {pid} has not reported its health yet")
                continue
            if age > _PROBE_LATE:
                problems.append(f"worker {pid} last reported {age:.0f} s ago")
            elif text != "ok":
                problems.append(f"worker {pid}: {text}")
        return "; ".join(problems) or None

    def forget(self, pid: int) -> None:
        self._path(pid).unlink(missing_ok=True)
