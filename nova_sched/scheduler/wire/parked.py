"""Requests that arrived while the database could not be reached.

A request that finds the database gone is parked here and handled again
once the database answers; only instances not placed meanwhile are
scheduled then. Its message stays unacknowledged meanwhile (``ack`` is
called once it is handled), so a daemon that dies during the outage loses
nothing: the broker delivers the request again.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
from typing import Any, Callable

LOG = logging.getLogger(__name__)

# A bound on memory during a long outage; past it the oldest request is
# dropped with an error naming its instances (the stuck-instance recovery
# puts any that were recorded into ERROR).
MAX_PARKED = 10000


@dataclasses.dataclass
class ParkedRequest:
    """A run_instance cast as it arrived, to be handled again."""

    context: Any
    request_spec: Any
    filter_properties: Any
    boot: Any  # cycle.BootArgs
    instance_uuids: list[str]
    # Acknowledges the request's message (topic_consumer.defer_ack).
    ack: Callable[[], None] = lambda: None


class ParkedRequests:
    """A bounded, thread-safe FIFO of run_instance requests to try again."""

    def __init__(self, limit: int = MAX_PARKED):
        self._queue: collections.deque[ParkedRequest] = collections.deque()
        self._limit = limit
        self._lock = threading.Lock()

    def park(self, item: ParkedRequest) -> None:
        with self._lock:
            if len(self._queue) >= self._limit:
                dropped = self._queue.popleft()
                LOG.error("Too many requests parked during the database outage; "
                          "dropped request %s for instances %s",
                          dropped.context.request_id, dropped.instance_uuids)
            self._queue.append(item)

    def take_all(self) -> list[ParkedRequest]:
        with self._lock:
            items = list(self._queue)
            self._queue.clear()
            return items

    def __len__(self) -> int:
        return len(self._queue)
