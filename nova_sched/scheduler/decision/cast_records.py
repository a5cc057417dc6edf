"""Casts sent whose records wait for the next claim's transaction.

A boot seen for the first time costs the scheduler's database two write
transactions: the claim (which also writes the instance's rows) and, once
the compute cast is confirmed by the broker, the record of that cast
(``db.instances.mark_cast``). When another request is already waiting, the
record is held here instead and written by that request's claim, in the
same transaction: one transaction per boot. The cast's confirm is read
then too, before its record is written (``take``): the broker confirms it
while the next request is decided, instead of the request thread waiting
for it (a cast recorded before the broker took it could be lost). Its
message stays unacknowledged until then (``topic_consumer.defer_ack``), so
that a daemon dying with records held leaves the requests to the broker,
which delivers them again: each is then found claimed and not recorded as
cast, and is cast to the node it holds, never elsewhere
(``ScheduleCycle._recast``), as when a daemon dies between a cast and its
record.

A worker that finds no request waiting, nor any arriving within
``IDLE_GRACE_S``, writes what is held (``flush``, the consumer's idle
hook), and so does one about to handle a request delivered again (a
possible poison: dying on it, the daemon would leave the held casts to be
cast again), as do the general way of a request (before it reads where its
instances stand), the periodic tasks and a stopping daemon.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Callable

from nova_sched import exception
from nova_sched.db import instances as db_instances

LOG = logging.getLogger(__name__)

# How long a worker with nothing to do waits for the next request before
# writing the held records itself. Without it, requests arriving one at a
# time (a steady rate below what the daemon can take) each found the queue
# empty and paid a second write transaction; with it, at 120 requests a
# second, 2 of 2,400 did. Only the records, the reading of the casts'
# confirms and the messages' acknowledgements wait this long; the casts
# are out already.
IDLE_GRACE_S = 0.02
# After a flush found the database away, idle workers leave the records to
# the next claim and the periodic tasks for this long: each try waits out
# the database's retries, and requests would queue behind it.
_AFTER_FAILURE_S = 1.0


@dataclasses.dataclass
class HeldCast:
    """One cast not yet recorded, and what lets its message go."""

    uuid: str
    finished: dict[int, tuple[str, str | None]]
    ack: Callable[[], None]
    # Waits for the broker's confirm of the cast (``Pending.wait``).
    confirm: Callable[[], None]

    @property
    def record(self) -> db_instances.Cast:
        return self.uuid, self.finished


def _both(first: Callable[[], None], second: Callable[[], None]) -> Callable[[], None]:
    def both() -> None:
        first()
        second()

    return both


def _confirmed() -> None:
    """The confirm of a cast that was waited for when it was sent."""


class CastRecords:
    """The casts held until a transaction records them (see the module)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._held: dict[str, HeldCast] = {}
        self._failed_at = float("-inf")

    def hold(self, uuid: str, finished: dict[int, tuple[str, str | None]],
             ack: Callable[[], None], confirm: Callable[[], None] | None = None) -> None:
        """Keep ``uuid``'s cast to be recorded with ``finished`` (its
        events' results); ``ack`` is called once it is. ``confirm`` waits
        for the broker's confirm of the cast, when it was not waited for."""
        with self._lock:
            self._add(HeldCast(uuid, finished, ack, confirm or _confirmed))

    def _add(self, held: HeldCast) -> None:
        # The same instance held twice (cast again before its first record
        # was written): one record, both messages let go after it.
        other = self._held.get(held.uuid)
        if other is not None:
            held = HeldCast(held.uuid, {**other.finished, **held.finished},
                            _both(other.ack, held.ack), _both(other.confirm, held.confirm))
        self._held[held.uuid] = held

    def holds(self, uuid: str) -> bool:
        """Whether ``uuid`` was cast and its record is still held here."""
        with self._lock:
            return uuid in self._held

    def confirm(self, uuid: str) -> None:
        """Wait for the broker's confirm of ``uuid``'s held cast, if any."""
        with self._lock:
            held = self._held.get(uuid)
        if held is not None:
            held.confirm()

    def take(self) -> list[HeldCast]:
        """Every cast held whose broker confirm is in (waited for here),
        for a transaction to record; ``written`` or ``put_back`` must
        follow. One whose confirm cannot be had (the publisher is closed:
        the daemon is stopping) stays held, its message unacknowledged,
        for the broker to deliver again to a daemon that casts it to the
        same node."""
        with self._lock:
            taken = list(self._held.values())
            self._held.clear()
        confirmed = []
        for held in taken:
            try:
                held.confirm()
            except Exception as err:
                LOG.warning("The broker's confirm of the cast of instance %s could "
                            "not be read (%s); its record waits", held.uuid, err)
                self.put_back([held])
            else:
                confirmed.append(held)
        return confirmed

    def written(self, taken: list[HeldCast]) -> None:
        """``taken`` is committed: their messages may go."""
        for held in taken:
            held.ack()

    def put_back(self, taken: list[HeldCast]) -> None:
        """The transaction that took them failed: they wait again."""
        with self._lock:
            for held in taken:
                self._add(held)

    def flush(self, idle: bool = False) -> None:
        """Record what is held, in a transaction of its own.

        DatabaseUnavailable propagates, the records kept. ``idle``: a
        worker with nothing else to do, which leaves them for a while
        after such a failure.
        """
        if idle and time.monotonic() - self._failed_at < _AFTER_FAILURE_S:
            return
        taken = self.take()
        if not taken:
            return
        try:
            db_instances.mark_casts([held.record for held in taken])
        except BaseException as err:
            self.put_back(taken)
            if isinstance(err, exception.DatabaseUnavailable):
                self._failed_at = time.monotonic()
            raise
        self.written(taken)
