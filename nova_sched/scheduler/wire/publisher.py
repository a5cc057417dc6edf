"""One kombu connection that publishes oslo.messaging casts and notifications.

oslo.messaging's clients publish through the rabbit driver's connection
pool, its retry wrapper and a socket-timeout change around every
publish: a third of a millisecond of CPU apiece, a boot request paying it
four times (the compute cast and three notifications). The scheduler's
own publishes go through this instead: one connection kept open, every
message confirmed by the broker (publisher confirms, as the rabbit driver
has them), retried until it is, failing over between the transport URL's
nodes; the failures are logged. What goes on the wire is oslo.messaging's
2.0 envelope (``rpc_envelope``) with the context as ``_context_*`` keys
and a ``_unique_id``, as its clients send it, so oslo.messaging's servers
and listeners read it.

On RabbitMQ the messages go out on py-amqp's channel, which is in confirm
mode, and ``publish_many`` sends a batch before it waits: its frames are
built by ``amqp_frames`` and written at once, and the broker's confirms
(one often covering several messages) are read once for the batch, not
once per message. ``send`` writes a batch and returns a ``Pending``
whose ``wait`` reads its confirms later: the compute cast's are read
after the next request's decision, the broker's round trip overlapping
it. A message the broker refuses (a nack) or that a lost connection
leaves unconfirmed is sent again; those it confirmed are not. kombu's
in-memory broker (the demo) takes them through kombu's ``Producer``, one
by one, with nothing to confirm.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import socket
import threading
import time
from typing import Callable

import amqp
import kombu
import kombu.compression
import oslo_messaging as messaging

from nova_sched.scheduler.wire.amqp_frames import PublishFrames
from nova_sched.scheduler.wire.broker import RabbitSettings, declare_queue, discard, heartbeat
from nova_sched.scheduler.wire.rpc_envelope import pack_text, unique_ids

LOG = logging.getLogger(__name__)

# Seconds between heartbeat checks of an idle connection, and between
# checks of the connection while confirms are awaited.
_IDLE = 1.0
# Every message's properties: kombu's Producer gave these to the JSON
# text oslo.messaging hands it, and marks every message persistent unless
# told otherwise; the messages sent here are the same as the ones it sent.
_CONTENT_TYPE = "application/json"
_CONTENT_ENCODING = "utf-8"
_PERSISTENT = 2


@dataclasses.dataclass
class Outgoing:
    """One message for ``Publisher.publish_many``: ``body`` is an
    envelope's JSON text; ``declare_queue`` declares the queue named
    ``routing_key`` first (once per connection), so that the message waits
    there until a consumer comes, as oslo's notifier does."""

    exchange: str
    routing_key: str
    body: str
    what: str
    declare_queue: bool = False


class _Confirms:
    """The broker's confirms on a channel in confirm mode: which of the
    messages published on it (numbered from 1, as the broker numbers them)
    it has settled, and which of those it refused."""

    def __init__(self):
        self.published = 0
        self.settled = 0        # every number up to this one is settled
        self.refused: set[int] = set()
        self._out_of_order: set[int] = set()

    def ack(self, tag: int, multiple: bool) -> None:
        if multiple or tag == self.settled + 1:
            self.settled = max(self.settled, tag)
        else:
            self._out_of_order.add(tag)
        if self._out_of_order:
            while self.settled + 1 in self._out_of_order:
                self.settled += 1
            self._out_of_order = {t for t in self._out_of_order if t > self.settled}

    def nack(self, tag: int, multiple: bool) -> None:
        first = self.settled + 1 if multiple else tag
        self.refused.update(t for t in range(first, tag + 1) if t not in self._out_of_order)
        self.ack(tag, multiple)

    def taken(self, first: int, last: int) -> set[int]:
        """The numbers from ``first`` to ``last`` that the broker took
        (settled, not refused)."""
        return {t for t in range(first, min(self.settled, last) + 1)
                if t not in self.refused} | {
            t for t in self._out_of_order if first <= t <= last and t not in self.refused}


def speaks(url: messaging.TransportURL) -> bool:
    """Whether a transport URL is one these publishes go to: RabbitMQ, or
    kombu's in-memory broker (the demo)."""
    return url.transport.split("+")[0] in ("rabbit", "kombu")


def envelope(message: dict, context: dict) -> str:
    """``message`` with the context's keys and a unique id, in the 2.0
    envelope, as oslo.messaging's AMQP driver sends a cast or notification:
    the JSON text ``Publisher.publish`` sends."""
    message["_unique_id"] = unique_ids.hex()
    for key, value in context.items():
        message["_context_" + key] = value
    return pack_text(message)


class Publisher:
    """Publishes to exchanges of the broker at ``url``, confirmed by it.

    Thread-safe: publishes from several threads take turns on the one
    connection. ``name`` shows in the broker's list of connections.
    """

    def __init__(self, conf, url: messaging.TransportURL, name: str):
        self.settings = RabbitSettings(conf, url)
        self._name = name
        self._lock = threading.Lock()
        self._conn: kombu.Connection | None = None
        self._channel = None
        self._confirms: _Confirms | None = None
        self._frames: PublishFrames | None = None
        self._producer: kombu.Producer | None = None
        self._declared: set[tuple[str, str]] = set()
        self._exchanges: dict[str, kombu.Exchange] = {}
        self._closed = threading.Event()
        if self.settings.heartbeat > 0:
            threading.Thread(target=self._keep_alive, name=f"{name}-heartbeat",
                             daemon=True).start()

    def exchange(self, name: str) -> kombu.Exchange:
        """A topic exchange as the rabbit driver declares it."""
        found = self._exchanges.get(name)
        if found is None:
            found = self._exchanges[name] = kombu.Exchange(
                name, type="topic", durable=self.settings.durable,
                auto_delete=self.settings.auto_delete)
        return found

    def publish(self, exchange: str, routing_key: str, body: str, what: str,
                declare_queue_too: bool = False) -> None:
        """Publish ``body`` (an envelope's JSON text) and wait for the
        broker's confirm; tried again, each failure logged, until it is
        confirmed. ``declare_queue_too``: see ``Outgoing.declare_queue``."""
        self.publish_many([Outgoing(exchange, routing_key, body, what,
                                    declare_queue_too)])

    def publish_many(self, messages: list[Outgoing]) -> None:
        """Publish ``messages`` in order, then wait until the broker has
        confirmed every one. A failure is logged and what it left
        unconfirmed is sent again (in order) until it is; a message sent
        twice that way is one the broker may have taken before the failure,
        as with any publisher confirms. MessageDeliveryFailure once the
        publisher is closed."""
        self.send(messages).wait()

    def send(self, messages: list[Outgoing],
             done: Callable[[], None] | None = None) -> "Pending":
        """Publish ``messages`` in order without waiting for the broker's
        confirms: the returned ``Pending.wait()`` does, so that the caller
        can work meanwhile (``publish_many`` is both at once). A failure to
        write them is logged and they are sent again at once, confirmed
        before this returns. ``done`` is called once they are confirmed or
        given up."""
        if self._closed.is_set():
            if done is not None:
                done()
            raise messaging.MessageDeliveryFailure(
                f"{_what(messages)} not sent: the publisher is closed")
        try:
            with self._lock:
                confirms, first = self._write(messages)
        except Exception as err:
            self._failed(messages, err)
            pending = Pending(self, list(messages), None, 0, done, written=False)
            pending.wait()
            return pending
        return Pending(self, list(messages), confirms, first, done)

    def _settle(self, pending: "Pending") -> None:
        """``Pending.wait``: read the broker's confirms of ``pending``'s
        messages; send again, until confirmed, what it refused or what a
        lost connection left unconfirmed."""
        waiting = list(pending.messages)
        if pending.written:
            try:
                with self._lock:
                    self._await(waiting, pending.confirms, pending.first)
            except Exception as err:
                self._failed(waiting, err, pending.confirms)
        while waiting and not self._closed.is_set():
            try:
                with self._lock:
                    confirms, first = self._write(waiting)
                    self._await(waiting, confirms, first)
            except Exception as err:  # logged and tried again: never dropped
                self._failed(waiting, err)
        if waiting:
            raise messaging.MessageDeliveryFailure(
                f"{_what(waiting)} not sent: the publisher is closed")

    def _failed(self, waiting: list[Outgoing], err: Exception,
                confirms: "_Confirms | None" = None) -> None:
        """A publish of ``waiting`` failed: logged, and its connection
        dropped with a pause before the next try, unless the connection
        ``confirms`` belonged to was replaced already."""
        if confirms is not None and confirms is not self._confirms:
            LOG.error("Publishing %s failed (%s); sending it again", _what(waiting), err)
            return
        LOG.error("Publishing %s failed (%s); trying again in %.1f s",
                  _what(waiting), err, self.settings.reconnect_delay)
        with self._lock:
            self._drop()
        time.sleep(self.settings.reconnect_delay)

    def _write(self, messages: list[Outgoing]) -> tuple["_Confirms | None", int]:
        """Put ``messages`` on the wire (under the lock): the confirms they
        are numbered in and the first one's number; no confirms on kombu's
        in-memory broker, which has nothing to confirm. kombu's retry
        wrapper around each publish would only cost its CPU on every one: a
        failure raises to the caller, which logs it, drops the connection
        and sends again what is left."""
        self._connect(messages[0].what)
        for message in messages:
            self._declare(message)
        confirms = self._confirms
        if confirms is None:
            for message in messages:
                self._producer.publish(
                    message.body, exchange=self.exchange(message.exchange),
                    routing_key=message.routing_key, content_type=_CONTENT_TYPE,
                    content_encoding=_CONTENT_ENCODING,
                    compression=self.settings.compression)
            return None, 0
        first = confirms.published + 1
        if self.settings.compression:
            for message in messages:
                self._channel.basic_publish(
                    self._message(message.body),
                    exchange=self.exchange(message.exchange).name,
                    routing_key=message.routing_key)
                confirms.published += 1
        else:
            self._write_frames(messages)
            confirms.published += len(messages)
        return confirms, first

    def _await(self, waiting: list[Outgoing], confirms: "_Confirms | None",
               first: int) -> None:
        """Wait (under the lock) for the confirms of ``waiting``, numbered
        from ``first``, removing each message from it once the broker took
        it. MessageDeliveryFailure for what it refused, or what a connection
        lost meanwhile (``confirms`` no longer the connection's) left
        unconfirmed."""
        if confirms is None:
            waiting.clear()  # kombu's in-memory broker: nothing to confirm
            return
        last = first + len(waiting) - 1
        try:
            while confirms is self._confirms and confirms.settled < last:
                try:
                    self._conn.drain_events(timeout=_IDLE)
                except socket.timeout:
                    # A broker that stopped answering fails this check after
                    # two heartbeats: the connection is dropped, the rest
                    # sent again on a new one.
                    if self.settings.heartbeat > 0:
                        self._conn.heartbeat_check(rate=self.settings.heartbeat_rate)
        finally:
            # What the broker took is not sent again, whatever failed after.
            taken = confirms.taken(first, last)
            sent = len(waiting)
            waiting[:] = [m for tag, m in enumerate(waiting, first) if tag not in taken]
            confirms.refused.difference_update(range(first, last + 1))
        if waiting:
            raise messaging.MessageDeliveryFailure(
                f"the broker refused {len(waiting)} of {sent} messages"
                if confirms is self._confirms else
                f"the connection was lost before the broker confirmed {len(waiting)} "
                f"of {sent} messages")

    def _write_frames(self, waiting: list[Outgoing]) -> None:
        """The messages' frames, as py-amqp's basic_publish would write them
        one by one, in one write (``amqp_frames``)."""
        conn = self._channel.connection
        frames = self._frames
        if frames is None:
            # Once per connection: the channel's number and the frame size
            # are the connection's, and the properties are encoded once.
            frames = self._frames = PublishFrames(
                self._channel.channel_id, conn.frame_max, _CONTENT_TYPE,
                _CONTENT_ENCODING, _PERSISTENT)
        for message in waiting:
            frames.add(self.exchange(message.exchange).name, message.routing_key,
                       message.body.encode(_CONTENT_ENCODING))
        conn.transport.write(frames.take())
        # What py-amqp counts per frame written, so that its heartbeat
        # check sees the connection in use.
        conn.bytes_sent += 1

    def _message(self, body: str) -> amqp.Message:
        """The message kombu's Producer would make of ``body``."""
        data = body.encode(_CONTENT_ENCODING)
        headers: dict = {}
        if self.settings.compression:
            data, headers["compression"] = kombu.compression.compress(
                data, self.settings.compression)
        return amqp.Message(data, priority=0, content_type=_CONTENT_TYPE,
                            content_encoding=_CONTENT_ENCODING, application_headers=headers,
                            delivery_mode=_PERSISTENT)

    def _connect(self, what: str) -> None:
        if self._conn is not None:
            return
        # The channel is put in confirm mode here, not for each publish as
        # py-amqp's confirm_publish does, so that publishes need not wait
        # one by one.
        conn = self.settings.connection(self._name, confirm_each=False)
        conn.ensure_connection(
            max_retries=None, **self.settings.retry,
            errback=lambda exc, interval: LOG.error(
                "Could not connect to publish %s (%s); trying again in %.1f s",
                what, exc, interval))
        channel = conn.default_channel
        confirms = None
        if isinstance(channel, amqp.Channel):
            channel.confirm_select()
            confirms = _Confirms()
            channel.events["basic_ack"].add(confirms.ack)
            channel.events["basic_nack"].add(confirms.nack)
        self._conn, self._channel, self._confirms = conn, channel, confirms
        self._producer = kombu.Producer(channel)
        self._declared = set()

    def _declare(self, message: Outgoing) -> None:
        """The message's exchange and, if asked, its queue: once per connection."""
        target = self.exchange(message.exchange)
        if ("exchange", target.name) not in self._declared:
            self._declare_exchange(target)
            self._declared.add(("exchange", target.name))
        if message.declare_queue and ("queue", message.routing_key) not in self._declared:
            declare_queue(kombu.Queue(
                message.routing_key, target, routing_key=message.routing_key,
                durable=target.durable, auto_delete=target.auto_delete,
                queue_arguments=self.settings.topic_queue_arguments),
                self._channel, self._conn.channel_errors, keep_durable=False)
            self._declared.add(("queue", message.routing_key))

    def _declare_exchange(self, target: kombu.Exchange) -> None:
        try:
            target(self._channel).declare()
        except self._conn.channel_errors as err:
            if getattr(err, "code", None) == 406 and "inequivalent arg 'durable'" in str(err):
                # Declared non-durable by another service sharing it: follow
                # it, as oslo.messaging does; the next try uses it.
                LOG.warning("Exchange %s exists non-durable (%s); publishing to it "
                            "as it is", target.name, err)
                self._exchanges[target.name] = kombu.Exchange(
                    target.name, type=target.type, durable=False,
                    auto_delete=target.auto_delete)
            raise

    def _keep_alive(self) -> None:
        """AMQP heartbeats while no publish goes out, so the broker keeps the
        connection (oslo.messaging's heartbeat thread does the same)."""
        while not self._closed.wait(_IDLE):
            if self._conn is None or not self._lock.acquire(blocking=False):
                continue
            try:
                if self._conn is not None:
                    heartbeat(self._conn, self.settings.heartbeat_rate)
            except Exception as err:  # the next publish reconnects
                LOG.info("The connection %s failed (%s); a new one will be made "
                         "for the next publish", self._name, err)
                self._drop()
            finally:
                self._lock.release()

    def _drop(self) -> None:
        conn = self._conn
        self._conn = self._channel = self._confirms = self._producer = None
        self._frames = None
        discard(conn)

    def close(self) -> None:
        """Close the connection; a publish still waiting for the broker keeps
        it (and its thread) until it is through or the process ends."""
        self._closed.set()
        if not self._lock.acquire(timeout=1.0):
            return
        try:
            conn = self._conn
            self._conn = self._channel = self._confirms = self._producer = None
            self._frames = None
        finally:
            self._lock.release()
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.release()


class Pending:
    """Messages a ``Publisher`` sent whose confirms may not be read yet.

    ``wait()`` returns once the broker has confirmed every one, sending
    again what it refused or what a lost connection left unconfirmed; it
    raises MessageDeliveryFailure only once the publisher is closed. Until
    then the caller may do other work: the compute cast's confirm is read
    after the next request's decision, not before it.
    """

    def __init__(self, publisher: Publisher, messages: list[Outgoing],
                 confirms: _Confirms | None, first: int,
                 done: Callable[[], None] | None = None, written: bool = True):
        self.publisher = publisher
        self.messages = messages
        self.confirms = confirms
        self.first = first
        # False: their write failed, and wait() sends them anew.
        self.written = written
        self._done = done
        self.settled = False

    def wait(self) -> None:
        if self.settled:
            return
        try:
            self.publisher._settle(self)
            self.settled = True
        finally:
            if self._done is not None:
                done, self._done = self._done, None
                done()


def _what(messages: list[Outgoing]) -> str:
    """The messages for a log line: the first's name, and how many more."""
    more = len(messages) - 1
    return messages[0].what + (f" and {more} more" if more > 0 else "")
