"""The ``scheduler.run_instance.*`` notifications (CONTRACT section 3).

Payloads carry the request as the caller sent it, minus anything secret:
keys naming a password and injected files' contents are scrubbed before a
payload leaves the process.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import re
import threading
from typing import Any, Iterator

from nova_sched import rpc
from nova_sched.publish_watch import PublishWatch
from nova_sched.scheduler.wire.notification_sender import NotificationSender, can_send

LOG = logging.getLogger(__name__)

_SECRET_MARKERS = ("password", "admin_pass", "secret", "auth_token")
_SECRET_KEY = re.compile("|".join(re.escape(m) for m in _SECRET_MARKERS))
# Values with nothing inside to scrub: kept as they are, without a call.
_PLAIN = (str, int, float, bool, type(None))
# Request specs whose scrubbed copy is kept: a request's is needed by its
# start, scheduled and end notifications, and several requests are handled
# at once.
_SCRUBBED_KEPT = 32


# What each key seen is (_SECRET, _FILES or _OTHER), so that a request's
# few dozen keys are not lowered and searched each time it is scrubbed;
# bounded, since keys of metadata and hints are the callers' choice.
_SECRET, _FILES, _OTHER = 1, 2, 0
_KINDS: dict[Any, int] = {}
_KINDS_KEPT = 4096


def _kind(key: Any) -> int:
    kind = _KINDS.get(key)
    if kind is None:
        lowered = key.lower() if type(key) is str else str(key).lower()
        kind = (_SECRET if _SECRET_KEY.search(lowered)
                else _FILES if lowered == "injected_files" else _OTHER)
        if len(_KINDS) < _KINDS_KEPT and type(key) is str:
            _KINDS[key] = kind
    return kind


def scrub(value: Any) -> Any:
    """A copy of ``value`` with secret keys masked, recursively."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            kind = _kind(key)
            if kind == _SECRET:
                out[key] = "***"
            elif kind == _FILES:
                out[key] = [
                    [f[0], "***"] if isinstance(f, (list, tuple)) and f else "***"
                    for f in (item or [])
                ]
            else:
                out[key] = item if type(item) in _PLAIN else scrub(item)
        return out
    if isinstance(value, (list, tuple)):
        return [v if type(v) in _PLAIN else scrub(v) for v in value]
    return value


@dataclasses.dataclass(frozen=True)
class Along:
    """Notifications to publish with a compute cast, in its batch."""

    before: list
    after: list

    @property
    def ends(self) -> bool:
        """Whether the request's ``end`` notification is among them."""
        return bool(self.after)


class SchedulerNotifier:
    """Emits the scheduler's notifications.

    On RabbitMQ (and kombu's in-memory broker) they are queued for a
    ``NotificationSender``: published in order from a thread of their own,
    each retried until the broker confirms it, while the request goes on;
    a boot's notifications up to its cast, and its end when that cast is
    its last, go out with the cast instead (``holding``, ``taken``) when
    both go to the same broker.
    On another transport oslo.messaging's notifier publishes them on the
    request's thread.
    """

    def __init__(self, transport, host: str, watch: PublishWatch | None = None):
        self._watch = watch or PublishWatch()
        # id of a request's spec -> (the spec, its scrubbed copy); the spec
        # is held so that its id is not reused while it is here.
        self._scrubbed: collections.OrderedDict[int, tuple[Any, Any]] = (
            collections.OrderedDict())
        self._scrubbed_lock = threading.Lock()
        publisher = f"scheduler.{host}"
        self._sender: NotificationSender | None = None
        if can_send(transport):
            self._sender = NotificationSender(
                transport, publisher, rpc.ContextSerializer(), topics=rpc.NOTIFY_TOPICS,
                watch=self._watch)
            self._notifier = self._sender
        else:
            self._notifier = rpc.get_notifier(transport, publisher)

    def _emit(self, ctxt, priority: str, event_type: str, payload: dict,
              scrubbed: bool = False) -> None:
        try:
            if not scrubbed:
                payload = scrub(payload)
            if self._notifier is self._sender:
                getattr(self._notifier, priority)(ctxt, event_type, payload)
                return
            with self._watch.publishing(f"notification {event_type}"):
                getattr(self._notifier, priority)(ctxt, event_type, payload)
        except Exception:  # a notification must never fail a placement
            LOG.exception("Could not emit notification %s", event_type)

    def holding(self, url) -> contextlib.AbstractContextManager:
        """Around one request on its thread: when the notifications go to
        the broker at ``url`` (a TransportURL; None: none), those the
        request emits wait to go out with its next publish there
        (``taken``), else (and those left at the end) they are queued."""
        if self._sender is None or url is None or url != self._sender.url:
            return contextlib.nullcontext()
        return self._sender.holding()

    @contextlib.contextmanager
    def taken(self, end: tuple[Any, dict] | None = None) -> Iterator[Along]:
        """The notifications this thread holds, as ``Outgoing`` messages
        for the caller's publish; queued instead if the block fails.

        ``end``, (context, request spec) when the caller's publish is the
        request's last act (its last instance's cast), asks for the
        request's ``end`` notification after it, in the same batch:
        ``Along.ends`` says whether it is there. If it is not, or the
        block fails, ``run_instance_end`` is the caller's to emit after.
        """
        if self._sender is None:
            yield Along([], [])
            return
        closing = None if end is None else self._end(*end)
        with self._sender.taken(closing) as (before, after):
            yield Along(before, after)

    def stop(self) -> None:
        """Send the notifications still queued (the daemon is stopping)."""
        if self._sender is not None:
            self._sender.stop()

    def _request_spec(self, request_spec: Any) -> Any:
        """The request spec scrubbed, once for a request's start, scheduled
        and end notifications (the request's spec is not changed in
        between: a placement works on a copy)."""
        with self._scrubbed_lock:
            kept = self._scrubbed.get(id(request_spec))
            if kept is not None and kept[0] is request_spec:
                self._scrubbed.move_to_end(id(request_spec))
                return kept[1]
        clean = scrub(request_spec)
        with self._scrubbed_lock:
            self._scrubbed[id(request_spec)] = (request_spec, clean)
            while len(self._scrubbed) > _SCRUBBED_KEPT:
                self._scrubbed.popitem(last=False)
        return clean

    def _instance_spec(self, request_spec: Any, base: Any) -> Any:
        """``request_spec`` (an instance's copy of the request's ``base``
        spec) scrubbed: the values it shares with ``base`` are taken from
        ``base``'s scrubbed copy."""
        if not isinstance(request_spec, dict) or not isinstance(base, dict):
            return scrub(request_spec)
        clean_base = self._request_spec(base)
        out = {}
        for key, value in request_spec.items():
            if key in clean_base and base.get(key) is value:
                out[key] = clean_base[key]
            else:
                out.update(scrub({key: value}))
        return out

    def run_instance_start(self, ctxt, request_spec: dict) -> None:
        self._emit(ctxt, "info", "scheduler.run_instance.start",
                   {"request_spec": self._request_spec(request_spec)}, scrubbed=True)

    def run_instance_scheduled(self, ctxt, request_spec: dict, host: str,
                               weight: float, instance_uuid: str,
                               base: dict | None = None) -> None:
        """``base``: the request's spec when ``request_spec`` is the
        instance's copy of it."""
        self._emit(ctxt, "info", "scheduler.run_instance.scheduled", {
            "request_spec": self._instance_spec(request_spec, base),
            "weighted_host": {"host": host, "weight": weight},
            "instance_id": instance_uuid,
        }, scrubbed=True)

    def _end(self, ctxt, request_spec: dict) -> tuple[Any, str, dict]:
        """The request's end notification: context, event type, scrubbed payload."""
        return (ctxt, "scheduler.run_instance.end",
                {"request_spec": self._request_spec(request_spec)})

    def run_instance_end(self, ctxt, request_spec: dict) -> None:
        _, event_type, payload = self._end(ctxt, request_spec)
        self._emit(ctxt, "info", event_type, payload, scrubbed=True)

    def run_instance_error(self, ctxt, request_spec: Any, instance_uuid: str,
                           reason: str) -> None:
        props = request_spec.get("instance_properties", {}) if isinstance(
            request_spec, dict) else {}
        self._emit(ctxt, "error", "scheduler.run_instance", {
            "request_spec": request_spec,
            "instance_properties": props,
            "instance_id": instance_uuid,
            "state": "error",
            "method": "run_instance",
            "reason": reason,
        })
