"""Publishes waiting for the broker: the compute cast and notifications.

Both are publishes the broker must confirm. oslo.messaging retries one
until the broker takes it (on a cluster, failing over to another node),
and the request it belongs to is acknowledged only after; meanwhile the
request waits, and an operator should see why. ``PublishWatch`` keeps the
publishes in flight, so that ``/healthz`` names one that waits longer than
a moment and the log says how long it waited once it went through.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from typing import Callable, Iterator

LOG = logging.getLogger(__name__)

# A publish normally takes a millisecond or two (the broker's confirm);
# one waiting this long is waiting for a broker that is away.
SLOW = 2.0


class PublishWatch:
    """The publishes in flight in one process, and the slow ones' count.

    Each of ``on_slow``'s callbacks is told ``(what, seconds)`` of each
    publish that took longer than ``SLOW`` once it is through.
    """

    def __init__(self, on_slow: Callable[[str, float], None] | None = None):
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._in_flight: dict[int, tuple[str, float]] = {}
        self.on_slow: list[Callable[[str, float], None]] = [on_slow] if on_slow else []

    @contextlib.contextmanager
    def publishing(self, what: str) -> Iterator[None]:
        """Around one publish; ``what`` names it for the log and /healthz."""
        through = self.start(what)
        try:
            yield
        finally:
            through()

    def start(self, what: str) -> Callable[[], None]:
        """A publish begins that may end later, in another call (a cast
        whose confirm is read after the next decision): the function
        returned says it is through."""
        key = next(self._ids)
        started = time.monotonic()
        with self._lock:
            self._in_flight[key] = (what, started)

        def through() -> None:
            with self._lock:
                del self._in_flight[key]
            took = time.monotonic() - started
            if took > SLOW:
                LOG.warning("Publishing %s waited %.1f s for the broker", what, took)
                for callback in self.on_slow:
                    callback(what, took)

        return through

    def problem(self) -> str | None:
        """The oldest publish waiting longer than ``SLOW``, or None."""
        with self._lock:
            oldest = min(self._in_flight.values(), key=lambda item: item[1],
                         default=None)
            waiting = len(self._in_flight)
        if oldest is None:
            return None
        age = time.monotonic() - oldest[1]
        if age <= SLOW:
            return None
        return (f"{waiting} publishes waiting for the broker, the oldest "
                f"({oldest[0]}) for {age:.0f} s")
