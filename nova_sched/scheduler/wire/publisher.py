"""One kombu connection that publishes oslo.messaging casts and notifications.

oslo.messaging's clients publish through the rabbit driver's connection
pool, its retry wrapper and a socket-timeout change around every
publish: a third of a millisecond of CPU apiece, a boot request paying it
four times (the compute cast and three notifications). The scheduler's
own publishes go through this instead: a kombu ``Producer`` on one
connection kept open, each publish confirmed by the broker (publisher
confirms, as the rabbit driver has them), retried until it is, failing
over between the transport URL's nodes; the failures are logged. What goes
on the wire is oslo.messaging's 2.0 envelope (``rpc_envelope``) with the
context as ``_context_*`` keys and a ``_unique_id``, as its clients send
it, so oslo.messaging's servers and listeners read it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

import kombu
import oslo_messaging as messaging

from nova_sched.scheduler.wire.broker import RabbitSettings, declare_queue, discard, heartbeat
from nova_sched.scheduler.wire.rpc_envelope import pack_text, unique_ids

LOG = logging.getLogger(__name__)

# Seconds between heartbeat checks of an idle connection.
_IDLE = 1.0


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
    """Publishes to exchanges of the broker at ``url``, one message at a time.

    Thread-safe: publishes from several threads take turns on the one
    connection. ``name`` shows in the broker's list of connections.
    """

    def __init__(self, conf, url: messaging.TransportURL, name: str):
        self.settings = RabbitSettings(conf, url)
        self._name = name
        self._lock = threading.Lock()
        self._conn: kombu.Connection | None = None
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
        """Publish ``body`` (an envelope's JSON text) and wait for the broker's confirm;
        tried again, each failure logged, until it is confirmed.

        ``declare_queue_too``: the queue named ``routing_key`` is declared
        (once per connection) so that messages wait there until a consumer
        comes, as oslo's notifier does for notifications.
        """
        target = self.exchange(exchange)
        while not self._closed.is_set():
            try:
                with self._lock:
                    self._publish(target, routing_key, body, declare_queue_too, what)
                return
            except Exception as err:  # logged and tried again: never dropped
                LOG.error("Publishing %s failed (%s); trying again in %.1f s", what,
                          err, self.settings.reconnect_delay)
                with self._lock:
                    self._drop()
                time.sleep(self.settings.reconnect_delay)
        raise messaging.MessageDeliveryFailure(f"{what} not sent: the publisher is closed")

    def _publish(self, target: kombu.Exchange, routing_key: str, body: str,
                 declare: bool, what: str) -> None:
        # A failure raises to ``publish``, which logs it, drops the
        # connection and comes back here: kombu's retry wrapper around each
        # publish would only cost its CPU on every one.
        if self._producer is None:
            conn = self.settings.connection(self._name)
            conn.ensure_connection(
                max_retries=None, **self.settings.retry,
                errback=lambda exc, interval: LOG.error(
                    "Could not connect to publish %s (%s); trying again in %.1f s",
                    what, exc, interval))
            self._conn = conn
            self._producer = kombu.Producer(conn)
            self._declared = set()
        if ("exchange", target.name) not in self._declared:
            self._declare_exchange(target)
            self._declared.add(("exchange", target.name))
        if declare and ("queue", routing_key) not in self._declared:
            declare_queue(kombu.Queue(
                routing_key, target, routing_key=routing_key, durable=target.durable,
                auto_delete=target.auto_delete,
                queue_arguments=self.settings.topic_queue_arguments),
                self._producer.channel, self._conn.channel_errors)
            self._declared.add(("queue", routing_key))
        # Already JSON: with its content type given, kombu sends it as it is.
        self._producer.publish(body, exchange=target, routing_key=routing_key,
                               content_type="application/json", content_encoding="utf-8",
                               compression=self.settings.compression)

    def _declare_exchange(self, target: kombu.Exchange) -> None:
        try:
            target(self._producer.channel).declare()
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
        conn, self._conn, self._producer = self._conn, None, None
        discard(conn)

    def close(self) -> None:
        """Close the connection; a publish still waiting for the broker keeps
        it (and its thread) until it is through or the process ends."""
        self._closed.set()
        if not self._lock.acquire(timeout=1.0):
            return
        try:
            conn, self._conn, self._producer = self._conn, None, None
        finally:
            self._lock.release()
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.release()
