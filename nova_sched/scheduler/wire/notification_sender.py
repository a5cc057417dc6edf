"""Notifications sent from a thread of their own, on a connection of their own.

oslo.messaging's notifier publishes on the caller's thread and waits for
the broker's confirm of each notification: a boot request sent three of
them and waited three times. Here the request only queues its
notifications (the payload already scrubbed of secrets, so what is queued
is what may be seen) and goes on; one thread publishes them in order
through a ``Publisher`` of its own, each confirmed by the broker and tried
again until it is, as oslo's notifier does with ``NOTIFY_RETRIES``.
While a thread ``holding`` them, its notifications wait instead for a
publish of its own to the same broker to take them along (``taken``): a
boot's start and scheduled go out with its compute cast, and its end
after the cast, in one batch and one wait for the broker's confirms,
with no handoff to this thread.

What goes on the wire is what oslo.messaging's ``messagingv2`` driver
sends, so any oslo.messaging notification listener reads it: the
notification (``message_id``, ``publisher_id``, ``event_type``,
``priority``, ``payload``, ``timestamp``) with the request context's
redacted copy as ``_context_*`` keys, in the 2.0 envelope, published to
``control_exchange`` with the routing key ``<topic>.<priority>``; the
queue of that name is declared with the arguments the rabbit driver gives
it, so notifications wait there until a listener comes.

Nothing is dropped silently: a publish that fails is logged ("Publishing
... failed") and tried again; one dropped after all is logged as
"Notification ... was not sent". The queue is bounded, so while the
broker is away requests wait for room instead of the daemon's memory
growing; at shutdown what is still queued is sent if the broker answers
within ``_FLUSH_TIMEOUT`` seconds, and every notification that is not is
logged by event type and instance.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from typing import Any, Iterator

import oslo_messaging as messaging
from oslo_utils import timeutils

from nova_sched.publish_watch import PublishWatch
from nova_sched.scheduler.wire.publisher import Outgoing, Publisher, envelope, speaks
from nova_sched.scheduler.wire.rpc_envelope import unique_ids

LOG = logging.getLogger(__name__)

# Notifications queued at most: about a second of a busy daemon's. A full
# queue makes the request wait (the broker is away), as the publish did.
_QUEUE_SIZE = 1000
# Seconds stop() waits for the queue to be sent before logging the rest.
_FLUSH_TIMEOUT = 10.0
_STOP = object()
# Notifications published at most before their confirms are read.
_BATCH = 64


def notification_url(conf) -> messaging.TransportURL:
    """The URL notifications go to, as oslo.messaging picks it:
    ``[oslo_messaging_notifications] transport_url``, else the RPC one."""
    group = getattr(conf, "oslo_messaging_notifications", None)
    return messaging.TransportURL.parse(conf, getattr(group, "transport_url", None) or None)


def can_send(transport) -> bool:
    """Whether ``transport`` (an oslo.messaging notification transport) is
    one this sender speaks: RabbitMQ, or kombu's in-memory broker."""
    return speaks(notification_url(transport.conf))


class NotificationSender:
    """Queues notifications and publishes them, in order, from its thread.

    ``info`` and ``error`` take what oslo's Notifier takes (a context, the
    event type, a JSON-able payload); ``serializer`` turns the context into
    its wire form. ``watch`` shows a publish waiting for the broker in
    ``/healthz``.
    """

    def __init__(self, transport, publisher_id: str, serializer, topics=("notifications",),
                 watch: PublishWatch | None = None):
        conf = transport.conf
        # The broker the notifications go to: a publisher to the same one
        # may take them along (``taken``).
        self.url = notification_url(conf)
        self._publisher = Publisher(conf, self.url, "notifications")
        self._exchange = conf.control_exchange
        self._publisher_id = publisher_id
        self._serializer = serializer
        self._topics = tuple(topics)
        self._watch = watch or PublishWatch()
        self._queue: queue.Queue = queue.Queue(_QUEUE_SIZE)
        self._stopping = threading.Event()
        self._in_hand: list[dict] = []
        # .items: the notifications a thread holds (``holding``), else None.
        self._held = threading.local()
        self._last_context: tuple[Any, dict] | None = None
        self.sent = 0
        self._sent_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="notifications",
                                        daemon=True)
        self._thread.start()

    # -- the request's side ------------------------------------------------
    def info(self, ctxt, event_type: str, payload: Any) -> None:
        self._put(ctxt, event_type, payload, "INFO")

    def error(self, ctxt, event_type: str, payload: Any) -> None:
        self._put(ctxt, event_type, payload, "ERROR")

    def _item(self, ctxt, event_type: str, payload: Any, priority: str
              ) -> tuple[dict, dict]:
        return ({"message_id": unique_ids.text(), "publisher_id": self._publisher_id,
                 "event_type": event_type, "priority": priority,
                 "payload": payload, "timestamp": str(timeutils.utcnow())},
                self._context(ctxt))

    def _put(self, ctxt, event_type: str, payload: Any, priority: str) -> None:
        item = self._item(ctxt, event_type, payload, priority)
        held = getattr(self._held, "items", None)
        if held is not None:
            held.append(item)
        else:
            self._enqueue(item)

    def _enqueue(self, item: tuple[dict, dict]) -> None:
        if self._stopping.is_set():
            LOG.error("Notification %s was not sent: the scheduler is stopping (%s)",
                      item[0]["event_type"], _instances(item[0]["payload"]))
            return
        self._queue.put(item)

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Hold the notifications this thread emits in the block for a
        publish to take along (``taken``); those left are queued, in
        order, when the block ends."""
        self._held.items = held = []
        try:
            yield
        finally:
            self._held.items = None
            for item in held:
                self._enqueue(item)

    @contextlib.contextmanager
    def taken(self, closing: tuple[Any, str, Any] | None = None
              ) -> Iterator[tuple[list[Outgoing], list[Outgoing]]]:
        """The notifications this thread holds, as messages for the
        caller to publish (to the broker at ``url``) before its own and
        have confirmed with them: they are held no longer. If the block
        fails they are queued as if they had never been held, and so is
        every later one until the holding ends: what is queued never
        overtakes them.

        ``closing`` (a context, an event type and a payload: the request's
        last INFO notification) becomes the second list, messages to
        publish after the caller's own, when this thread is holding; it is
        the caller's to send again some other way when that list is empty
        or the block fails (it is then dropped here, not queued).
        """
        held = getattr(self._held, "items", None)
        items = list(held or ())
        if held:
            held.clear()
        outgoing = self._outgoing(items)
        after = (self._outgoing([self._item(*closing, "INFO")])
                 if closing is not None and held is not None else [])
        try:
            yield outgoing, after
        except BaseException:
            self._held.items = None
            for item in items:
                self._enqueue(item)
            raise
        self._count_sent(len(outgoing) + len(after))

    def _context(self, ctxt) -> dict:
        # As oslo's notifier: the context's redacted copy (no token, no
        # secrets); a bare dict or None sends none. A request's several
        # notifications share one context: its wire form is made once
        # (it is only read after).
        if ctxt is None or type(ctxt) is dict:
            return {}
        last = self._last_context
        if last is not None and last[0] is ctxt:
            return last[1]
        redacted = getattr(ctxt, "redacted_copy", None)
        wire = self._serializer.serialize_context(redacted() if redacted else ctxt)
        self._last_context = (ctxt, wire)
        return wire

    # -- the sending thread ------------------------------------------------
    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            # What queued meanwhile goes in the same batch: its confirms
            # are read together.
            while len(batch) < _BATCH and batch[-1] is not _STOP:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = batch[-1] is _STOP
            items = batch[:-1] if stop else batch
            if items:
                self._in_hand = [message for message, _ in items]
                self._send(items)
                self._in_hand = []
            if stop:
                return

    def _outgoing(self, items: list[tuple[dict, dict]]) -> list[Outgoing]:
        """The notifications as messages, one per topic; one that cannot
        be serialized is logged and left out."""
        outgoing = []
        for message, context in items:
            try:
                body = envelope(message, context)
            except Exception as err:  # a payload JSON cannot carry: said, not sent
                LOG.error("Notification %s was not sent: it cannot be serialized "
                          "(%s): %s", message["event_type"],
                          _instances(message["payload"]), err)
                continue
            what = f"notification {message['event_type']}"
            outgoing.extend(Outgoing(self._exchange,
                                     f"{topic}.{message['priority'].lower()}",
                                     body, what, declare_queue=True)
                            for topic in self._topics)
        return outgoing

    def _send(self, items: list[tuple[dict, dict]]) -> None:
        """Publish notifications; tries until the broker confirms them all."""
        outgoing = self._outgoing(items)
        if not outgoing:
            return
        try:
            with self._watch.publishing(outgoing[0].what):
                self._publisher.publish_many(outgoing)
        except messaging.MessageDeliveryFailure:
            return  # closed at shutdown with the broker away: stop() said so
        self._count_sent(len(outgoing))

    def _count_sent(self, messages: int) -> None:
        with self._sent_lock:  # counted from the sending and the casting threads
            self.sent += messages // len(self._topics)

    # -- shutdown -------------------------------------------------------------
    def stop(self, timeout: float = _FLUSH_TIMEOUT) -> None:
        """Send what is queued (for at most ``timeout`` seconds), then close.
        Notifications left unsent (the broker away) are logged one by one."""
        self._stopping.set()
        deadline = time.monotonic() + timeout
        with contextlib.suppress(queue.Full):
            self._queue.put(_STOP, timeout=timeout)
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            left = list(self._in_hand)
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not _STOP:
                    left.append(item[0])
            for message in left:
                LOG.error("Notification %s was not sent before the scheduler stopped: "
                          "the broker did not take it within %.0f s (%s)",
                          message["event_type"], timeout, _instances(message["payload"]))
        self._publisher.close()


def _instances(payload: Any) -> str:
    """Which instances a notification was about, for the log."""
    if not isinstance(payload, dict):
        return "no instance"
    if payload.get("instance_id"):
        return f"instance {payload['instance_id']}"
    spec = payload.get("request_spec")
    uuids = spec.get("instance_uuids") if isinstance(spec, dict) else None
    return f"instances {uuids}" if uuids else "no instance"
