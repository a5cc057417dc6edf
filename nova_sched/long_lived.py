"""The daemon's long-lived objects kept out of the cyclic collector's full passes.

A daemon holds a couple of hundred thousand objects that live as long as it
does: the libraries' modules, classes and functions, and what it keeps of
each host. CPython's cyclic collector walks every one of them in each
collection of its oldest generation, which it starts every few seconds
while requests and reports allocate: at 10,000 hosts a pause of about 100
ms with the GIL held, every request and report of the process waiting
behind it (bench/README.md, issue 19's eleventh session).

``gc.freeze()`` moves every object the collector tracks into a permanent
generation it never walks. Frozen objects are still freed as soon as their
last reference goes; only garbage held in a reference cycle among them
would outlive its use. Freezing again is cheap (a collection of the young
generations, then a splice of lists), so the periodic tasks' thread does it
when what is alive has changed: hosts joining (a quarter more since the
last look, and at least ``_GROWTH_MIN``) and a rebuilt host table (a full
resync builds every host's state anew; the old table breaks its own cycles
as it is replaced, ``HostTable.retire``). Only ``settle`` lets the
collector see everything (unfreeze, collect, freeze again): a pause as long
as the collection it avoids (80-220 ms at 10,000 hosts, 700 ms at
100,000), so it comes only every ``_RESETTLE_SECONDS``, for whatever
cyclic garbage was frozen: after 500 requests, every host's report and a
full resync it found none (bench/README.md, issue 19's thirteenth
session), and its log line says what it found.
"""

from __future__ import annotations

import gc
import logging
import time
import weakref

LOG = logging.getLogger(__name__)

# Cyclic garbage among frozen objects is collected at least this often.
_RESETTLE_SECONDS = 3600.0
# Hosts joining since the last freeze that make the next one due: a quarter
# more, and at least this many (a small cloud's few hosts never matter).
_GROWTH = 0.25
_GROWTH_MIN = 1000


class LongLived:
    """When to freeze what the daemon has built, and when to look again."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        # The first settle comes _RESETTLE_SECONDS after the daemon's start.
        self._settled_at = clock()
        self._hosts = 0
        self._table: weakref.ref | None = None

    def freeze(self, table) -> None:
        """Freeze what is alive now after collecting only the young
        generations (milliseconds: the objects made since the last freeze,
        not every long-lived one); cyclic garbage that reached the oldest
        generation meanwhile is frozen with the rest until the next
        ``settle``."""
        gc.collect(1)
        gc.freeze()
        self._frozen(table)

    def settle(self, table) -> None:
        """Collect everything once, then freeze the survivors."""
        started = time.perf_counter()
        gc.unfreeze()
        found = gc.collect()
        gc.freeze()
        self._settled_at = self._clock()
        self._frozen(table)
        LOG.info("Froze %d long-lived objects (%d hosts) in %.0f ms; %d "
                 "unreachable objects collected", gc.get_freeze_count(),
                 self._hosts, (time.perf_counter() - started) * 1000, found)

    def _frozen(self, table) -> None:
        self._hosts = len(table.index)
        # Weakly: a table replaced by a rebuild is not kept alive here.
        self._table = weakref.ref(table)

    def due(self, table) -> str | None:
        """What is due with ``table`` the host table now: ``"settle"``,
        ``"freeze"`` or None."""
        if self._clock() - self._settled_at >= _RESETTLE_SECONDS:
            return "settle"
        if self._table is None or self._table() is not table:
            return "freeze"  # never frozen, or the table was rebuilt since
        grown = len(table.index) - self._hosts
        if grown >= _GROWTH_MIN and grown >= _GROWTH * self._hosts:
            return "freeze"
        return None

    def settle_if_due(self, table) -> str | None:
        """``settle`` or ``freeze`` when due; which it did."""
        due = self.due(table)
        if due == "settle":
            self.settle(table)
        elif due == "freeze":
            self.freeze(table)
        return due
