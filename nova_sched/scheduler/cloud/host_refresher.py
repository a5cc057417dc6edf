"""The host table kept in step with its source from a thread of its own.

Without it a decision reads the changed rows itself once its table is
``REFRESH_INTERVAL`` old: every half second one request waited for that
read (3-37 ms at 10,000 hosts re-reporting, the database scanning a couple
of seconds of changes) and the requests queued behind it with it, which
was most of a paced run's slowest percent (bench/README.md, issue 19's
thirteenth session). Here the read happens beside the decisions, as
kube-scheduler's informers feed its cache; the rows it reads, all of
them at a full resync, are applied under the host manager's lock as
reports are, and only a table built anew, which replaces the old one,
waits for the decision in hand (``SchedulingCycle.keep_fresh``). A
request that lost claims still refreshes the table itself, through the
same ``keep_fresh`` and outside the cycle's lock, and one overtaken by an
operator's change catches it up (``HostManager.catch_up``).
"""

from __future__ import annotations

import logging
import threading

from nova_sched.scheduler.host_manager import REFRESH_INTERVAL

LOG = logging.getLogger(__name__)


class HostRefresher:
    """Refreshes the cycle's host table every ``interval`` seconds until
    ``stop``; a failed read is logged (once until one succeeds again) and
    tried again at the next turn, the decisions going on with what the
    table holds."""

    def __init__(self, cycle, interval: float = REFRESH_INTERVAL):
        self._cycle = cycle
        self._interval = interval
        self._stopping = threading.Event()
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="host-refresher",
                                        daemon=True)

    def start(self) -> "HostRefresher":
        self._cycle.host_manager.refreshed_elsewhere = True
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._cycle.host_manager.refreshed_elsewhere = False

    def _run(self) -> None:
        while not self._stopping.wait(self._interval):
            try:
                self._cycle.keep_fresh()
            except Exception:  # the next turn tries again
                if not self._failing:
                    LOG.exception("Refreshing the host states failed; decisions "
                                  "go on with what they hold, trying again every "
                                  "%.1f s", self._interval)
                self._failing = True
                continue
            if self._failing:
                LOG.info("Host states refreshed again")
                self._failing = False
