"""Poison requests: those that kill every daemon that handles them.

The topic consumer acknowledges a request only once it is handled, so a
request whose handler kills the daemon (a crash in a plugin, memory
exhausted, a watchdog's kill) comes back from the broker to the next
daemon, and the next, for ever. ``PoisonGuard`` counts the starts of such
redelivered requests in the database, where every daemon sees them, and
past ``[scheduler] poison_delivery_limit`` fails the request visibly
instead of handling it once more.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Any

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.db import deliveries
from nova_sched.scheduler.wire.topic_consumer import RedeliveryGuard

LOG = logging.getLogger(__name__)

# Counts of requests nobody finished (their daemon died for good, or the
# request was acknowledged by another path) are forgotten after a day.
_KEEP = dt.timedelta(days=1)
_PURGE_EVERY = 3600.0


class PoisonGuard(RedeliveryGuard):
    """The scheduler's RedeliveryGuard: counts in ``request_deliveries``,
    gives up through the manager."""

    def __init__(self, manager):
        self._manager = manager
        self._next_purge = 0.0

    def limit(self) -> int:
        return CONF.scheduler.poison_delivery_limit

    def starts(self, message_id: str, method: str | None) -> int:
        try:
            return deliveries.start(message_id, method, CONF.host)
        except exception.DatabaseUnavailable as err:
            # Not counted: handled as an ordinary request (which parks
            # itself until the database answers).
            LOG.warning("Could not count the start of redelivered request %s: %s",
                        message_id, err.message)
            return 0

    def handled(self, message_id: str) -> None:
        try:
            deliveries.finish(message_id)
        except exception.DatabaseUnavailable as err:
            LOG.warning("Could not forget redelivered request %s: %s",
                        message_id, err.message)

    def give_up(self, ctxt, method: str | None, args: Any, starts: int,
                broker_count: int | None) -> None:
        reason = (f"Request given up: a scheduler daemon died (or lost its "
                  f"broker connection) each of the {starts - 1} times one "
                  f"began it ([scheduler] poison_delivery_limit is "
                  f"{self.limit()}); see the scheduler logs")
        LOG.error("Poison %s request (started %d times, broker's delivery "
                  "count %s): %s", method, starts - 1, broker_count, reason)
        self._manager.metrics.request(str(method), "poison")
        if method == "run_instance":
            self._manager.give_up(ctxt, args, reason)
        elif method == "select_destinations":
            if isinstance(args, dict) and "spec_obj" in args:
                # Today's nova (4.x): the error its conductor knows.
                raise exception.NovaNoValidHost(reason)
            raise exception.NoValidHost(reason=reason)

    def purge(self) -> None:
        """Forget old counts, at most once an hour (periodic task)."""
        now = time.monotonic()
        if now < self._next_purge:
            return
        self._next_purge = now + _PURGE_EVERY
        try:
            gone = deliveries.purge(db_api.utcnow() - _KEEP)
        except exception.DatabaseUnavailable:
            return
        if gone:
            LOG.info("Forgot %d redelivered requests nobody finished", gone)
