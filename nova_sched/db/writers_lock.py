"""The lock this process's SQLite writers queue on, with a way to step aside.

SQLite has one writer at a time, and a connection that finds the file
taken polls with sleeps of up to 100 ms; so this process's write
transactions take turns on a lock of their own instead (``db.api``).

Most are short: a claim is about ten statements. A batch of compute
reports is not: at 10,000 hosts the report writer stores some 250 a
quarter second, and measured in one transaction that held the lock for
20-50 ms, four times a second, while a request's claim waited behind it:
the paced benchmark's latency tail. A bulk writer therefore writes in
short transactions and takes each one through ``after_waiters``: it first
lets every writer already waiting for the lock go before it.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

# Seconds a bulk writer lets waiting writers go first at most: more
# writers waiting all the while (several request threads, a storm of
# claims) must not keep a batch of heartbeats out for long.
PATIENCE = 0.05


class WritersLock:
    """A re-entrant lock that counts the threads waiting for it.

    ``with lock:`` takes it as ``threading.RLock`` does; ``with
    lock.after_waiters():`` takes it once no other thread waits for it
    (or ``patience`` seconds have passed).
    """

    def __init__(self, patience: float = PATIENCE):
        self._lock = threading.Lock()
        self._state = threading.Condition(threading.Lock())
        self._waiting = 0
        self._owner: int | None = None
        self._depth = 0
        self._patience = patience

    def acquire(self) -> bool:
        me = threading.get_ident()
        if self._owner == me:
            self._depth += 1
            return True
        if not self._lock.acquire(blocking=False):
            with self._state:
                self._waiting += 1
            try:
                self._lock.acquire()
            finally:
                with self._state:
                    self._waiting -= 1
                    if not self._waiting:
                        self._state.notify_all()
        self._owner, self._depth = me, 1
        return True

    def release(self) -> None:
        if self._owner != threading.get_ident():
            raise RuntimeError("cannot release un-acquired lock")
        self._depth -= 1
        if not self._depth:
            self._owner = None
            self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def waiting(self) -> int:
        """Threads waiting for the lock now."""
        with self._state:
            return self._waiting

    @contextlib.contextmanager
    def after_waiters(self) -> Iterator[None]:
        """Hold the lock, taken once the writers waiting for it had it
        (at once by a thread holding it already)."""
        if self._owner != threading.get_ident():
            with self._state:
                self._state.wait_for(lambda: not self._waiting, self._patience)
        with self:
            yield
