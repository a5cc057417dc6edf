"""The compute-api side of the demo: boot requests in, outcomes tracked.

A client thread casts ``run_instance`` for each request through
``SchedulerAPI`` (the real RPC path), keeping at most ``window`` instances
in flight, as a compute API serving many users would: a request waits for
room, so the latencies measured are those of a busy but not flooded
scheduler rather than the length of a queue. An instance is done when its
compute cast reaches the fake fleet (placed) or when the database shows it
in ERROR (failed); the main thread polls the database for the latter.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Callable

from nova_sched import rpc
from nova_sched.db import instances as db_instances
from nova_sched.sim.flavors import BootRequest

# Instances in flight at once (cast, not yet placed or failed).
DEFAULT_WINDOW = 4
# Seconds between looks at the database for instances gone to ERROR (a
# failure holds its place in the window until then; each look costs a
# transaction, taken from the scheduler under the GIL), and how long an
# instance must have been in flight before it is looked for there: most
# are placed sooner, and need no look at all.
_ERROR_POLL_INTERVAL = 0.2
_ERROR_POLL_MIN_AGE = 0.1
# Seconds between redraws of the progress bar.
_PROGRESS_INTERVAL = 0.1
# Give up when nothing completes for this long (the run must end by itself).
STALL_TIMEOUT = 60.0
# A fake secret, so the demo exercises the path that must never log it.
_ADMIN_PASSWORD = "sim-admin-password"


class BootTracker:
    """Cast and arrival times per instance uuid, and the in-flight window."""

    def __init__(self, window: int):
        self.window = max(int(window), 1)
        self.cast_at: dict[str, float] = {}
        self.arrived_at: dict[str, float] = {}
        self.hosts: dict[str, str] = {}
        self.failed_at: dict[str, float] = {}
        self.late_arrivals = 0
        # uuid -> cast time of the instances neither placed nor failed yet.
        self._in_flight: dict[str, float] = {}
        self._cond = threading.Condition()
        self._closed = False

    # -- client side --------------------------------------------------------
    def wait_for_room(self, count: int) -> bool:
        """Block until ``count`` more instances fit in the window."""
        count = min(count, self.window)
        with self._cond:
            while not self._closed and len(self._in_flight) + count > self.window:
                self._cond.wait(0.5)
            return not self._closed

    def note_cast(self, uuids: list[str], at: float) -> None:
        with self._cond:
            for uuid in uuids:
                self.cast_at[uuid] = at
                self._in_flight[uuid] = at

    def close(self) -> None:
        """Wake and stop the client (the run is over or gave up)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- outcomes -----------------------------------------------------------
    def _done(self, uuid: str) -> bool:
        return uuid in self.arrived_at or uuid in self.failed_at

    def note_arrival(self, uuid: str, host: str, at: float) -> None:
        with self._cond:
            if uuid not in self.cast_at:
                return  # not one of ours
            if self._done(uuid):
                # A reschedule after a failed build reaches a second node:
                # the first arrival is what the client waited for.
                self.late_arrivals += 1
                return
            self.arrived_at[uuid] = at
            self.hosts[uuid] = host
            self._in_flight.pop(uuid, None)
            self._cond.notify_all()

    def note_failed(self, uuids: list[str], at: float) -> None:
        with self._cond:
            for uuid in uuids:
                if uuid in self.cast_at and not self._done(uuid):
                    self.failed_at[uuid] = at
                    self._in_flight.pop(uuid, None)
            self._cond.notify_all()

    def outstanding(self, cast_before: float | None = None) -> list[str]:
        """Instances in flight, or those of them cast before ``cast_before``."""
        with self._cond:
            return [u for u, at in self._in_flight.items()
                    if cast_before is None or at < cast_before]

    @property
    def completed(self) -> int:
        return len(self.arrived_at) + len(self.failed_at)

    def last_completion(self) -> float | None:
        times = list(self.arrived_at.values()) + list(self.failed_at.values())
        return max(times) if times else None

    def request_ms(self) -> list[float]:
        """Cast-to-compute-cast latency of every placed instance, in ms."""
        with self._cond:
            return [(at - self.cast_at[u]) * 1000.0 for u, at in self.arrived_at.items()]


@dataclasses.dataclass
class BootOutcome:
    first_cast: float
    last_done: float
    gave_up: bool
    client_error: BaseException | None
    # Why the run stopped waiting, when it did (gave_up).
    stall_reason: str | None = None


def _stall_reason(in_flight: list[str], stall_timeout: float) -> str:
    """What the instances the run waited for were doing when it gave up."""
    standing = db_instances.where_they_stand(in_flight)
    parts = ", ".join(f"{count} {what}" for what, count in standing.items() if count)
    hint = ""
    if standing["not recorded"]:
        hint = ("; unrecorded instances mean the scheduler had not taken their "
                "request off its queue")
    elif standing["waiting for a host"]:
        hint = "; the scheduler was still deciding"
    elif standing["placed"]:
        hint = "; their compute casts never reached the fleet"
    return (f"nothing finished for {stall_timeout:.0f} s with {len(in_flight)} "
            f"instances in flight ({parts or 'none found'}){hint}")


def _client(scheduler_api, requests: list[BootRequest], tracker: BootTracker,
            errors: list) -> None:
    try:
        for req in requests:
            uuids = req.instance_uuids
            if not tracker.wait_for_room(len(uuids)):
                return
            props = req.request_spec["instance_properties"]
            ctxt = rpc.RequestContext(user_id=props["user_id"],
                                      project_id=props["project_id"])
            tracker.note_cast(uuids, time.perf_counter())
            scheduler_api.run_instance(ctxt, req.request_spec, _ADMIN_PASSWORD, [],
                                       None, True, req.filter_properties)
    except BaseException as err:  # reported by boot(), never lost in a thread
        errors.append(err)


def boot(scheduler_api, requests: list[BootRequest], tracker: BootTracker,
         progress: Callable[[int, int, int], None] | None = None,
         stall_timeout: float = STALL_TIMEOUT) -> BootOutcome:
    """Cast every request and wait until each instance is placed or failed.

    Returns early (``gave_up``) if nothing completes for ``stall_timeout``
    seconds or the client thread fails.
    """
    total = sum(len(r.instance_uuids) for r in requests)
    errors: list[BaseException] = []
    first_cast = time.perf_counter()
    client = threading.Thread(target=_client, name="sim-compute-api",
                              args=(scheduler_api, requests, tracker, errors),
                              daemon=True)
    client.start()
    last_progress = time.monotonic()
    last_count = -1
    gave_up = False
    stall_reason = None
    next_poll = 0.0
    while tracker.completed < total:
        now = time.monotonic()
        if now >= next_poll:
            old = tracker.outstanding(time.perf_counter() - _ERROR_POLL_MIN_AGE)
            failed = db_instances.in_error(old)
            if failed:
                tracker.note_failed(failed, time.perf_counter())
            next_poll = now + _ERROR_POLL_INTERVAL
        count = tracker.completed
        if count != last_count:
            last_count, last_progress = count, now
        elif now - last_progress > stall_timeout:
            gave_up = True
            stall_reason = _stall_reason(tracker.outstanding(), stall_timeout)
            break
        if errors and not client.is_alive() and not tracker.outstanding():
            gave_up = True  # the client died: what it never cast never ends
            stall_reason = f"the compute-api client failed: {errors[0]!r}"
            break
        if progress is not None:
            progress(count, len(tracker.arrived_at), len(tracker.failed_at))
        time.sleep(_PROGRESS_INTERVAL)
    tracker.close()
    client.join(timeout=5)
    last = tracker.last_completion() or time.perf_counter()
    return BootOutcome(first_cast=first_cast, last_done=last, gave_up=gave_up,
                       client_error=errors[0] if errors else None,
                       stall_reason=stall_reason)
