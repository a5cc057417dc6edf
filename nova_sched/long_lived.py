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
would outlive its use. So ``LongLived.settle`` lets the collector see
everything once (unfreeze, collect, freeze again), from the periodic
tasks' thread: after the host table was rebuilt (a full resync builds
every host's state anew), when it has grown by a quarter since (hosts
joining a new cloud), and at least every ``_RESETTLE_SECONDS``.
"""

from __future__ import annotations

import gc
import logging
import time
import weakref

LOG = logging.getLogger(__name__)

# Cyclic garbage among frozen objects is collected at least this often.
_RESETTLE_SECONDS = 600.0
# Hosts joining since the last settle that make the next one due: a quarter
# more, and at least this many (a small cloud's few hosts never matter).
_GROWTH = 0.25
_GROWTH_MIN = 1000


class LongLived:
    """When to freeze what the daemon has built, and when to look again."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._settled_at = 0.0
        self._hosts = 0
        self._table: weakref.ref | None = None

    def freeze(self, table) -> None:
        """Freeze what is alive now, without a collection (cheap: the
        daemon's start, after its first load of the hosts into ``table``);
        cyclic garbage frozen with it waits for the next ``settle``."""
        gc.freeze()
        self._settled(table)

    def settle(self, table) -> None:
        """Collect everything once, then freeze the survivors."""
        started = time.perf_counter()
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self._settled(table)
        LOG.info("Froze %d long-lived objects (%d hosts) in %.0f ms",
                 gc.get_freeze_count(), self._hosts,
                 (time.perf_counter() - started) * 1000)

    def _settled(self, table) -> None:
        self._settled_at, self._hosts = self._clock(), len(table.index)
        # Weakly: a table replaced by a rebuild is not kept alive here.
        self._table = weakref.ref(table)

    def due(self, table) -> bool:
        """Whether ``settle`` is due with ``table`` the host table now."""
        if self._table is None or self._table() is not table:
            return True  # never settled, or the table was rebuilt since
        grown = len(table.index) - self._hosts
        return (self._clock() - self._settled_at >= _RESETTLE_SECONDS
                or (grown >= _GROWTH_MIN and grown >= _GROWTH * self._hosts))

    def settle_if_due(self, table) -> bool:
        """``settle`` when due; whether it did."""
        if not self.due(table):
            return False
        self.settle(table)
        return True
