"""EventReporter: the ``schedule`` event of each instance's action.

Like nova's, it records the event's start when entered and its finish and
result when left. Unlike Havana's it records ``Error`` for an instance that
could not be placed (``fail``), with the reason as the traceback text, so
that anyone reading the events sees the failure. All instances of a request
are recorded in one transaction on entry and one on exit.
"""

from __future__ import annotations

import logging
import traceback as tb

from nova_sched.db import instances as db_instances

LOG = logging.getLogger(__name__)


def event_start(ctxt, event: str, host: str,
                action: str = "create") -> db_instances.EventStart:
    """What starting ``event`` for the request of ``ctxt`` records."""
    return db_instances.EventStart(action, event, ctxt.request_id,
                                   getattr(ctxt, "user_id", None),
                                   getattr(ctxt, "project_id", None), host)


class EventReporter:
    """Context manager around one event of many instances' actions."""

    def __init__(self, ctxt, event: str, instance_uuids: list[str], host: str,
                 action: str = "create", started: dict[str, int] | None = None):
        self.ctxt = ctxt
        self.event = event
        self.instance_uuids = list(instance_uuids)
        self.host = host
        self.action = action
        # Events already started by the caller (db.instances.begin_request).
        self._event_ids: dict[str, int] = dict(started or {})
        self._started = started is not None
        self._failures: dict[str, str] = {}

    def __enter__(self) -> "EventReporter":
        if self.instance_uuids and not self._started:
            self._event_ids = db_instances.start_events(
                self.instance_uuids,
                event_start(self.ctxt, self.event, self.host, self.action))
        return self

    def adopt(self, instance_uuid: str, event_id: int) -> None:
        """The instance's event was started by another transaction (the
        claim that recorded a new request): finish it as the others."""
        self._event_ids[instance_uuid] = event_id

    def finish_on_cast(self, instance_uuid: str) -> dict[int, tuple[str, None]]:
        """The instance's event as finished with Success, for the caller to
        record with its cast (``db.instances.mark_cast``); not again on exit."""
        event_id = self._event_ids.pop(instance_uuid, None)
        return {} if event_id is None else {event_id: ("Success", None)}

    def fail(self, instance_uuid: str, reason: str) -> None:
        """Record Error for one instance, with ``reason`` as the traceback."""
        self._failures[instance_uuid] = reason

    def __exit__(self, exc_type, exc, trace) -> bool:
        text = "".join(tb.format_exception(exc_type, exc, trace)) if exc else None
        results = {}
        for uuid, event_id in self._event_ids.items():
            reason = self._failures.get(uuid) or text
            results[event_id] = ("Error" if reason else "Success", reason)
        try:
            db_instances.finish_events(results)
        except Exception:
            LOG.exception("Could not record the end of event %s of %s",
                          self.event, list(self._event_ids))
        return False
