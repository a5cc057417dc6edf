"""The scheduler topic's consumer: acknowledged when handled, reports inline.

oslo.messaging's RPC server acknowledges a message before dispatching it
and runs every message, a heartbeat as much as a boot request, through a
pool of executor threads. Both are wrong for a scheduler: a daemon killed
between the acknowledgement and recording a request loses the request,
and at 1,000 compute reports a second the executor's per-message cost
(a future, a thread hand-off, the dispatcher's watchdog set-up) is most of
the daemon's CPU.

This consumer keeps oslo.messaging for everything on the wire (its
connection: failover, TLS, heartbeats, reconnection; its queue and exchange
declarations; its message envelope; its replies and remote exceptions) and
does three things differently:

- **Late acknowledgement.** A request is acknowledged when its handler
  returns (for ``run_instance``: when every instance is placed and cast, or
  in ERROR), so a request held by a daemon that dies goes back to the queue
  and another daemon takes it. Handlers must therefore be idempotent.
- **Bounded prefetch.** The broker gives the daemon at most
  ``[oslo_messaging_rabbit] rabbit_qos_prefetch_count`` messages not yet
  acknowledged; the rest wait in the broker's queue, not in our memory.
- **Inline methods.** ``compute_node_update`` (validate, apply, queue for the
  batched write: tens of microseconds) runs on the consumer thread and is
  acknowledged at once: a report's only state is the host table it was
  applied to, and the node's next report supersedes it anyway.

Every other method runs on one of ``[scheduler] request_threads`` worker
threads, through oslo.messaging's own dispatcher (version and namespace
checks, ``@expose`` access policy, expected exceptions, call-monitor
heartbeats), and a call's reply goes out through oslo.messaging's driver.
kombu's channel is not thread-safe, so workers never touch it: they queue
their acknowledgements, and the consumer thread sends them between polls.
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import errno
import hashlib
import json
import logging
import queue
import socket
import sys
import threading
import time
from typing import Any, Callable, Iterable

import amqp
import oslo_messaging as messaging
from oslo_messaging import _utils as messaging_utils
from oslo_messaging._drivers import amqpdriver
from oslo_messaging._drivers import common as driver_common
from oslo_messaging.rpc import dispatcher as rpc_dispatcher

from nova_sched import exception
from nova_sched.scheduler.notifications import scrub

LOG = logging.getLogger(__name__)

# Seconds the consumer thread waits for a message when it has
# acknowledgements to send soon (a worker finishing a request); idle, it
# waits longer so an idle daemon costs nothing.
_BUSY_POLL = 0.005
_IDLE_POLL = 0.5
# Bytes the consumer's socket reads take at a time (a compute report is
# about 2 KB): see _read_ahead.
_READ_AHEAD = 16384
# Seconds between two readings of the queue's depth (backlog_seconds).
_BACKLOG_SAMPLE = 1.0
# Acknowledgements gather for at most this many messages or this many
# seconds, then go out together: where the delivery tags allow, one
# ``multiple`` ack frame covers dozens of reports instead of a frame (a
# socket write) each. The messages they hold count against the prefetch
# meanwhile, so the batch stays well below it.
_ACK_BATCH = 32
_ACK_DELAY = 0.01
# Frames handled straight from the read buffer per poll (_drain_buffered).
_DRAIN_FRAMES = 192
# Seconds without a poll of the broker after which the consumer counts as
# stalled (it polls at least every _IDLE_POLL; oslo's reconnection loop
# holds it longer while the broker is away).
_STALLED = 20.0
# Seconds inside one poll after which the consumer counts as having been
# away from the broker (the process stopped or starved): a poll normally
# returns within _IDLE_POLL.
_AWAY = 5.0


def supports(transport) -> bool:
    """Whether ``transport`` is one this consumer can read (AMQP over kombu)."""
    return isinstance(getattr(transport, "_driver", None), amqpdriver.AMQPDriverBase)


def _read_ahead(transport) -> None:
    """Make py-amqp's plain TCP transport read ahead instead of exactly.

    py-amqp reads each frame with three exact-size ``recv`` calls (header,
    payload, end byte): nine system calls per message, each giving up the
    GIL and waiting to get it back from the request threads. Reading what
    the socket holds, up to ``_READ_AHEAD`` bytes, serves several messages
    from one call. Same contract as py-amqp's ``_read``: return exactly
    ``n`` bytes, keep what is left in ``_read_buffer``.
    """
    quick_recv = transport._quick_recv

    def _read(n, initial=False, _errnos=(errno.EAGAIN, errno.EINTR)):
        rbuf = transport._read_buffer
        try:
            while len(rbuf) < n:
                try:
                    chunk = quick_recv(max(n - len(rbuf), _READ_AHEAD))
                except OSError as exc:
                    if exc.errno in _errnos:
                        if initial and transport.raise_on_initial_eintr:
                            raise socket.timeout()
                        continue
                    raise
                if not chunk:
                    raise OSError("Server unexpectedly closed connection")
                rbuf += chunk
        except:  # noqa: E722  (py-amqp's own handler: keep what was read)
            transport._read_buffer = rbuf
            raise
        result, transport._read_buffer = rbuf[:n], rbuf[n:]
        return result

    transport._read = _read


class _Delivery:
    """One message taken from the queue, until it is acknowledged."""

    __slots__ = ("tag", "channel", "incoming", "method", "deferred",
                 "message_id", "redelivered", "broker_count")

    def __init__(self, tag, channel, incoming, method, message_id=None,
                 redelivered=False, broker_count=None):
        self.tag = tag            # its delivery tag on that channel
        self.channel = channel    # the channel it came on
        self.incoming = incoming  # oslo's AMQPIncomingMessage: ctxt, reply()
        self.method = method
        self.deferred = False     # its handler keeps the acknowledgement
        self.message_id = message_id      # the sender's unique id
        self.redelivered = redelivered    # the broker delivered it before
        self.broker_count = broker_count  # a quorum queue's x-delivery-count


class RedeliveryGuard:
    """What a consumer asks before it handles a request delivered again.

    The broker delivers a message again when the daemon holding it died
    (or lost its connection) before acknowledging it. Most such requests
    are innocent; one that kills every daemon that handles it (a poison
    request) would circle between the daemons for ever. Each redelivered
    request is therefore handled alone (no other request running in this
    daemon, so that a crash is its own), and its starts are counted where
    every daemon sees them: past the limit it is given up.
    """

    def starts(self, message_id: str, method: str | None) -> int:
        """Count this start; how many there have been (0: unknown)."""
        raise NotImplementedError

    def limit(self) -> int:
        """Starts after which a request is given up."""
        raise NotImplementedError

    def handled(self, message_id: str) -> None:
        """The request was handled or given up: forget its count."""
        raise NotImplementedError

    def give_up(self, ctxt, method: str | None, args: Any, starts: int,
                broker_count: int | None) -> None:
        """Fail the request visibly instead of handling it; for a call,
        raise the error its caller should get."""
        raise NotImplementedError


class _SoloGate:
    """Requests run side by side; a redelivered one runs alone.

    ``shared()`` around an ordinary request, ``alone()`` around a
    redelivered one: it waits for the running requests to finish, and no
    other request starts until it is done. Waiting ``alone()`` callers go
    first, so a stream of ordinary requests cannot starve them.
    """

    def __init__(self):
        self._cond = threading.Condition()
        self._running = 0
        self._solo = False
        self._waiting_solo = 0

    @contextlib.contextmanager
    def shared(self):
        with self._cond:
            while self._solo or self._waiting_solo:
                self._cond.wait()
            self._running += 1
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def alone(self):
        with self._cond:
            self._waiting_solo += 1
            while self._solo or self._running:
                self._cond.wait()
            self._waiting_solo -= 1
            self._solo = True
        try:
            yield
        finally:
            with self._cond:
                self._solo = False
                self._cond.notify_all()


# The delivery a worker thread is handling, for defer_ack.
_current: contextvars.ContextVar[tuple["TopicConsumer", _Delivery] | None] = (
    contextvars.ContextVar("nova_sched_delivery", default=None))


def defer_ack() -> Callable[[], None]:
    """Keep the message being handled unacknowledged when its handler returns.

    For a handler that cannot finish now (the database is away) but keeps
    the request to finish later: it calls the returned function once the
    request is handled. Until then the broker counts the message as held
    by this daemon, and delivers it again should the daemon die. Outside a
    worker of a TopicConsumer (a direct call) the function does nothing.
    """
    current = _current.get()
    if current is None:
        return lambda: None
    consumer, delivery = current
    delivery.deferred = True
    done = threading.Event()

    def _ack() -> None:
        if not done.is_set():
            done.set()
            consumer._acks.put(delivery)

    return _ack


def _fingerprint(body: dict) -> str:
    """A stable name for a message that came without a unique id (made
    from the body with its secrets masked, as it is stored)."""
    text = json.dumps(scrub(body), sort_keys=True, default=str)
    return "sha1-" + hashlib.sha1(text.encode()).hexdigest()


class _ReplyVia:
    """What oslo's incoming message needs from a listener to send replies."""

    def __init__(self, driver):
        self.driver = driver


class TopicConsumer:
    """Consumes a topic's queues for one RPC endpoint, acknowledging late.

    ``endpoints`` is one endpoint or a list of them (one per major API
    version). ``inline`` names the first endpoint's methods run on the
    consumer thread (they
    must be quick and must not block); the rest run on ``threads`` worker
    threads. ``serializer`` turns wire contexts into the endpoint's.
    ``on_backlog(seconds)`` is told, about once a second, how far behind the
    topic's queue the consumer runs (``backlog_seconds``). ``guard`` (a
    RedeliveryGuard) counts and gives up requests delivered again; without
    one they are handled like any other. A redelivered message of an
    inline method (a compute report) is dropped: the node's next report
    supersedes it, and it may be what killed the daemon.
    ``on_reconnect(seconds, through)`` is told each time the consumer is
    back on the broker after losing it (a node died: oslo's connection
    fails over to the next), with the seconds it was away and the node
    (``host:port``) it consumes through now.
    """

    def __init__(self, transport, target: messaging.Target, endpoints: Any,
                 serializer, inline: Iterable[str] = (), threads: int = 8,
                 on_backlog: Callable[[float], None] | None = None,
                 guard: RedeliveryGuard | None = None,
                 on_reconnect: Callable[[float, str], None] | None = None):
        if not supports(transport):
            raise exception.ConfigurationError(
                "the scheduler daemon needs an AMQP transport (rabbit:// or "
                "kombu+memory://); transport_url names another kind")
        # One endpoint, or several of different major versions (oslo's
        # dispatcher picks by the caller's version); inline methods are
        # the first endpoint's.
        endpoints = (list(endpoints) if isinstance(endpoints, (list, tuple))
                     else [endpoints])
        endpoint = endpoints[0]
        self._driver = transport._driver
        self._target = target
        self._endpoint = endpoint
        self._serializer = serializer
        self._dispatcher = rpc_dispatcher.RPCDispatcher(
            endpoints, serializer, messaging.ExplicitRPCAccessPolicy)
        endpoint_target = getattr(endpoint, "target", None)
        self._endpoint_version = getattr(endpoint_target, "version", None) or "1.0"
        self._compatible: dict[Any, bool] = {}
        self._inline: dict[str, Callable] = {
            name: getattr(endpoint, name) for name in inline}
        self._reply_via = _ReplyVia(self._driver)
        self._gone_reply_queues = amqpdriver.ObsoleteReplyQueuesCache()
        self._work: queue.SimpleQueue[_Delivery | None] = queue.SimpleQueue()
        self._acks: queue.SimpleQueue[_Delivery] = queue.SimpleQueue()
        self._threads = threads
        self._workers: list[threading.Thread] = []
        self._consumer: threading.Thread | None = None
        self._stopping = threading.Event()
        self._abandoned = threading.Event()
        self._lock = threading.Lock()
        self._in_hand = 0  # taken by a worker or waiting for one, not yet acked
        self._conn = None
        # Consumer thread only: the channel the tags below belong to, the
        # tags ready to acknowledge, and those a worker holds.
        self._ack_channel = None
        self._ready: list[int] = []
        self._ready_since = 0.0
        self._held: set[int] = set()
        self.ready = threading.Event()
        self._last_poll = time.monotonic()
        self._on_backlog = on_backlog
        self._guard = guard
        self._gate = _SoloGate()
        self._on_reconnect = on_reconnect
        # Consumer thread: when the broker connection was lost (None while
        # connected), the channel last seen working, and when.
        self._lost_at: float | None = None
        self._seen_channel = None
        self._seen_ok = time.monotonic()
        self.reconnects = 0
        self._backlog = 0.0
        self._next_sample = 0.0
        self._sampled_delivered = 0
        # Figures for the log, health checks and tests.
        self.delivered = 0
        self.acknowledged = 0
        self.ack_frames = 0  # basic.ack frames sent: fewer than acknowledged
        self.dropped_acks = 0
        self.redelivered = 0   # messages the broker delivered again
        self.given_up = 0      # poison requests failed without handling

    # -- life cycle ------------------------------------------------------------
    def start(self) -> None:
        """Connect, declare the queues and start consuming."""
        self._conn = self._driver._get_connection(driver_common.PURPOSE_LISTEN)
        exchange = self._driver._get_exchange(self._target)
        topic, server = self._target.topic, self._target.server
        self._conn.declare_topic_consumer(exchange_name=exchange, topic=topic,
                                          callback=self._on_message)
        self._conn.declare_topic_consumer(exchange_name=exchange,
                                          topic=f"{topic}.{server}",
                                          callback=self._on_message)
        self._conn.declare_fanout_consumer(topic, self._on_message)
        for number in range(self._threads):
            worker = threading.Thread(target=self._work_loop,
                                      name=f"request-worker-{number}", daemon=True)
            worker.start()
            self._workers.append(worker)
        self._consumer = threading.Thread(target=self._consume_loop,
                                          name="topic-consumer", daemon=True)
        self._consumer.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop taking messages; finish and acknowledge the ones being handled.

        Messages taken but not started are left unacknowledged: closing the
        connection returns them to the queue for another daemon.
        """
        self._stopping.set()
        for _ in self._workers:
            self._work.put(None)
        deadline = time.monotonic() + timeout
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        # A handler still running past the deadline is abandoned: its
        # message, never acknowledged, goes back to the queue on close.
        self._abandoned.set()
        if self._consumer is not None:
            self._consumer.join(max(0.0, deadline - time.monotonic()) + 5.0)
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception as err:  # the broker may be gone already
                LOG.debug("Closing the consumer connection: %s", err)
            if self._consumer is None or not self._consumer.is_alive():
                self._conn = None

    @property
    def connection(self):
        """oslo.messaging's connection this consumer reads (None unless started)."""
        return self._conn

    def problem(self) -> str | None:
        """Why this consumer is not consuming its topic now; None if it is."""
        topic = self._target.topic
        if self._consumer is None or not self.ready.is_set():
            return f"not consuming topic {topic} yet"
        if self._stopping.is_set():
            return f"stopping: no longer consuming topic {topic}"
        if not self._consumer.is_alive():
            return f"the consumer of topic {topic} has stopped"
        lost_at = self._lost_at
        if lost_at is not None:
            return (f"not consuming topic {topic}: broker connection lost "
                    f"{time.monotonic() - lost_at:.0f} s ago, failing over "
                    f"(last through {self._broker_address()})")
        quiet = time.monotonic() - self._last_poll
        if quiet > _STALLED:
            return (f"not consuming topic {topic}: no poll of the broker for "
                    f"{quiet:.0f} s (reconnecting?)")
        return None

    def in_hand(self) -> int:
        """Requests taken from the broker and not yet acknowledged."""
        with self._lock:
            return self._in_hand

    # -- the consumer thread --------------------------------------------------
    def _consume_loop(self) -> None:
        conn = self._conn
        patched = None
        # Workers still finishing when a stop is asked need their
        # acknowledgements sent, so the loop runs until they are done.
        while not (self._stopping.is_set()
                   and (self._workers_done() or self._abandoned.is_set())):
            self._send_acks()
            transport = self._amqp_transport()
            if transport is not patched:  # a new connection after a reconnect
                if type(transport).__name__ == "TCPTransport":
                    _read_ahead(transport)
                patched = transport
            self._sample_backlog()
            busy = self.in_hand() > 0 or bool(self._ready)
            self._last_poll = time.monotonic()
            try:
                self.ready.set()
                conn.consume(timeout=_BUSY_POLL if busy else _IDLE_POLL)
                self._drain_buffered(transport)
            except driver_common.Timeout:
                pass
            except Exception:  # oslo's consume retries connection errors itself
                LOG.exception("Consuming the %s topic failed; trying again",
                              self._target.topic)
                self._stopping.wait(1.0)
            self._watch_connection()
        self._send_acks(force=True)
        try:
            conn.stop_consuming()
        except Exception as err:
            LOG.debug("Stopping the consumer: %s", err)

    def _kombu_connection(self):
        """kombu's connection under oslo's (None before the first)."""
        return getattr(getattr(self._conn, "connection", None), "connection", None)

    def _broker_connected(self):
        """The channel oslo's connection consumes on, when it is connected."""
        kombu_conn = self._kombu_connection()
        try:
            channel = self._conn.channel
            return channel if kombu_conn is not None and kombu_conn.connected else None
        except Exception:  # the transport's own check failing: not connected
            return None

    def _broker_address(self) -> str:
        kombu_conn = self._kombu_connection()
        host = getattr(kombu_conn, "hostname", None)
        port = getattr(kombu_conn, "port", None)
        return f"{host}:{port}" if host else "no broker yet"

    def _watch_connection(self) -> None:
        """Note the broker connection lost and found again (consumer thread).

        oslo's ``consume`` reconnects by itself, failing over to the next
        node of ``transport_url``; between its attempts this sees the
        connection down. A failover quicker than one poll shows only as a
        new channel.
        """
        now = time.monotonic()
        channel = self._broker_connected()
        if channel is None:
            if self._lost_at is None:
                self._lost_at = now
                LOG.warning("Lost the broker connection consuming topic %s "
                            "(through %s); reconnecting",
                            self._target.topic, self._broker_address())
            return
        if self._lost_at is not None or (
                self._seen_channel is not None and channel is not self._seen_channel):
            self._returned(now - self._seen_ok)
        else:
            self._seen_ok = now
            self._seen_channel = channel

    def _returned(self, away: float) -> None:
        """Back after ``away`` seconds without the broker (consumer thread).

        Counted from when the connection was last seen working: a daemon
        that could not poll at all (stopped, starved) was away too, and no
        heartbeat reached it meanwhile.
        """
        self._lost_at = None
        # Counted once: the messages this same poll goes on delivering are
        # not each a return.
        self._seen_ok = self._last_poll = time.monotonic()
        self._seen_channel = self._broker_connected() or self._seen_channel
        self.reconnects += 1
        LOG.warning("Consuming topic %s again through %s, %.1f s after the "
                    "broker connection was last seen working; unacknowledged "
                    "requests went back to the queue", self._target.topic,
                    self._broker_address(), away)
        if self._on_reconnect is not None:
            self._on_reconnect(away, self._broker_address())

    def backlog_seconds(self) -> float:
        """How long the messages waiting in the topic's queue will take at the
        rate this consumer has been taking them: how old, about, is what it
        takes now. Compute reports wait in the same queue as requests, so a
        host's last report is this much older than it would otherwise be."""
        return self._backlog

    def _sample_backlog(self) -> None:
        now = time.monotonic()
        if now < self._next_sample:
            return
        elapsed = now - self._next_sample + _BACKLOG_SAMPLE
        self._next_sample = now + _BACKLOG_SAMPLE
        rate = (self.delivered - self._sampled_delivered) / max(elapsed, 1e-3)
        self._sampled_delivered = self.delivered
        try:
            # A passive declare answers with the queue's ready messages;
            # oslo's lock keeps its heartbeat thread off the socket meanwhile.
            with self._conn.connection._connection_lock:
                waiting = self._conn.channel.queue_declare(
                    queue=self._target.topic, passive=True).message_count
        except Exception as err:  # a reconnect in progress: try next time
            LOG.debug("Could not read the depth of queue %s: %s",
                      self._target.topic, err)
            return
        self._backlog = waiting / max(rate, 1.0) if waiting else 0.0
        if self._on_backlog is not None:
            self._on_backlog(self._backlog)

    def _drain_buffered(self, transport) -> None:
        """Handle the frames the last socket read brought in with it.

        oslo's ``consume`` handles one frame per call (a message is three)
        and sets the socket's timeout around each: two system calls and a
        stack of retry wrappers per frame. Frames already whole in the read
        buffer need none of that, so they are handled here, up to the
        prefetch's worth, without touching the socket; a connection error
        reaches oslo's own handling at its next ``consume``.
        """
        if transport is None or not transport._read_buffer:
            return
        amqp_conn = self._conn.connection.connection._connection
        try:
            with self._conn.connection._connection_lock:
                for _ in range(_DRAIN_FRAMES):
                    buffered = transport._read_buffer
                    # A frame: type (1 byte), channel (2), size (4), payload,
                    # end marker (1).
                    if (len(buffered) < 8 or len(buffered)
                            < int.from_bytes(buffered[3:7], "big") + 8):
                        return
                    amqp_conn.blocking_read(None)
        except Exception as err:  # the connection's trouble: oslo's to handle
            LOG.debug("Reading buffered frames: %s", err)

    def _amqp_transport(self):
        """py-amqp's transport under oslo's and kombu's connections, if any."""
        try:
            # kombu's private ``_connection``: its public one reconnects.
            return self._conn.connection.connection._connection.transport
        except AttributeError:  # kombu's in-memory transport, or not connected
            return None

    def _workers_done(self) -> bool:
        return not any(worker.is_alive() for worker in self._workers)

    def _on_message(self, message) -> None:
        """kombu's callback, on the consumer thread: one message delivered."""
        channel = self._conn.channel
        if self._stopping.is_set():
            # Not ours to handle any more: unacknowledged, it returns to the
            # queue when the connection closes.
            return
        self.delivered += 1
        body = dict(message)
        ctxt = {}
        for key in [k for k in body if k.startswith("_context_")]:
            ctxt[key[9:]] = body.pop(key)
        msg_id = body.pop("_msg_id", None)
        reply_q = body.pop("_reply_q", None)
        client_timeout = body.pop("_timeout", None)
        unique_id = body.pop("_unique_id", None)
        method = body.get("method")
        handler = self._inline.get(method) if isinstance(method, str) else None
        raw = message._raw_message
        tag = raw.delivery_tag
        redelivered = bool(raw.delivery_info.get("redelivered"))
        if channel is not self._ack_channel:
            self._new_channel(channel)
        now = time.monotonic()
        if ((self._seen_channel is not None and channel is not self._seen_channel)
                or now - self._last_poll > _AWAY):
            # oslo reconnects and delivers within one consume(), and a
            # process stopped inside consume() finds messages waiting when
            # it resumes: note the time away before handling them.
            self._returned(now - self._seen_ok)
        if redelivered:
            self.redelivered += 1
        if handler is not None and msg_id is None and self._accepts(body):
            if not redelivered:
                self._run_inline(handler, ctxt, body)
            self._ready_to_ack(tag)
            return
        incoming = amqpdriver.AMQPIncomingMessage(
            self._reply_via, ctxt, body, unique_id, msg_id, reply_q,
            client_timeout, self._gone_reply_queues, None)
        with self._lock:
            self._in_hand += 1
        self._held.add(tag)
        count = (raw.headers or {}).get("x-delivery-count")
        self._work.put(_Delivery(tag, channel, incoming, method, unique_id,
                                 redelivered, count if isinstance(count, int) else None))

    def _accepts(self, body: dict) -> bool:
        """The dispatcher's version and namespace rules, cached per version."""
        if body.get("namespace") is not None:
            return False
        version = body.get("version", "1.0")
        known = self._compatible.get(version)
        if known is None:
            try:
                known = messaging_utils.version_is_compatible(
                    self._endpoint_version, version)
            except Exception:  # a malformed version string
                known = False
            if len(self._compatible) < 64:
                self._compatible[version] = known
        return known

    def _run_inline(self, handler, ctxt: dict, body: dict) -> None:
        args = body.get("args")
        try:
            if not isinstance(args, dict):
                raise TypeError(f"arguments must be a dict, not {type(args).__name__}")
            handler(self._serializer.deserialize_context(ctxt), **args)
        except Exception:
            LOG.exception("Handling a %s cast failed; message dropped",
                          body.get("method"))

    def _new_channel(self, channel) -> None:
        """Messages now come on ``channel`` (a reconnect): tags of the old one
        mean nothing on it, and the broker has put those messages back."""
        if self._ready:
            self.dropped_acks += len(self._ready)
            self._ready.clear()
        self._held.clear()
        self._ack_channel = channel

    def _ready_to_ack(self, tag: int) -> None:
        if not self._ready:
            self._ready_since = time.monotonic()
        self._ready.append(tag)

    def _send_acks(self, force: bool = False) -> None:
        """Send the acknowledgements that are due (consumer thread only)."""
        while True:
            try:
                delivery = self._acks.get_nowait()
            except queue.Empty:
                break
            with self._lock:
                self._in_hand -= 1
            if delivery.channel is self._ack_channel:
                self._held.discard(delivery.tag)
                self._ready_to_ack(delivery.tag)
            else:
                # Taken on a connection since lost: the broker has already
                # put the message back.
                self.dropped_acks += 1
        ready = self._ready
        if not ready or not (force or len(ready) >= _ACK_BATCH
                             or time.monotonic() - self._ready_since >= _ACK_DELAY):
            return
        channel = self._ack_channel
        tags = sorted(ready)
        ready.clear()
        if channel is not self._conn.channel:
            self.dropped_acks += len(tags)
            return
        # A multiple ack covers every unacknowledged tag up to its own, so
        # it may only reach up to the lowest tag a worker still holds.
        below = (bisect.bisect_left(tags, min(self._held)) if self._held
                 else len(tags))
        if not isinstance(channel, amqp.Channel):
            below = 0  # kombu's in-memory channel ignores ``multiple``
        try:
            # Outside consume() oslo's lock is free: hold it, so that its
            # heartbeat thread never writes to the socket at the same time.
            with self._conn.connection._connection_lock:
                if below:
                    channel.basic_ack(tags[below - 1], multiple=True)
                    self.ack_frames += 1
                for tag in tags[below:]:
                    channel.basic_ack(tag)
                    self.ack_frames += 1
        except Exception as err:
            self.dropped_acks += len(tags)
            LOG.warning("Could not acknowledge %d messages (%s); the broker will "
                        "deliver them again", len(tags), err)
            return
        self.acknowledged += len(tags)

    # -- the workers ------------------------------------------------------------
    def _work_loop(self) -> None:
        while True:
            delivery = self._work.get()
            if delivery is None:
                return
            if self._stopping.is_set():
                # Left for another daemon: never acknowledged.
                with self._lock:
                    self._in_hand -= 1
                continue
            token = _current.set((self, delivery))
            try:
                if delivery.redelivered and self._guard is not None:
                    with self._gate.alone():
                        self._handle_redelivered(delivery)
                else:
                    with self._gate.shared():
                        self._dispatch(delivery.incoming)
            finally:
                _current.reset(token)
                if not delivery.deferred:
                    self._acks.put(delivery)

    def _handle_redelivered(self, delivery: _Delivery) -> None:
        """Count the start; past the guard's limit give the request up,
        else handle it as any other."""
        guard = self._guard
        message_id = delivery.message_id or _fingerprint(delivery.incoming.message)
        starts = guard.starts(message_id, delivery.method)
        if starts > guard.limit():
            self.given_up += 1
            self._give_up(delivery, starts)
        else:
            if starts:
                LOG.info("Handling %s request %s delivered again (start %d of "
                         "at most %d; broker's delivery count %s)",
                         delivery.method, message_id, starts, guard.limit(),
                         delivery.broker_count)
            self._dispatch(delivery.incoming)
        guard.handled(message_id)

    def _give_up(self, delivery: _Delivery, starts: int) -> None:
        incoming = delivery.incoming
        failure = None
        try:
            self._guard.give_up(
                self._serializer.deserialize_context(incoming.ctxt),
                delivery.method, incoming.message.get("args"), starts,
                delivery.broker_count)
        except Exception as err:
            failure = sys.exc_info()
            LOG.debug("Gave up %s: %s", delivery.method, err)
        self._reply(incoming, None, failure)

    def _dispatch(self, incoming) -> None:
        """oslo.messaging's RPC server's handling of one message, minus its ack."""
        failure = None
        result = None
        try:
            result = self._dispatcher.dispatch(incoming)
        except rpc_dispatcher.ExpectedException as err:
            failure = err.exc_info
            LOG.debug("Expected exception during message handling (%s)", err)
        except Exception:
            failure = sys.exc_info()
            LOG.exception("Exception during message handling")
        self._reply(incoming, result, failure)

    @staticmethod
    def _reply(incoming, result, failure) -> None:
        """Answer a call with its result or failure (a cast: nothing)."""
        try:
            if failure is None:
                incoming.reply(result)
            else:
                incoming.reply(failure=failure)
        except Exception:
            LOG.exception("Could not send the reply to %s",
                          incoming.message.get("method"))
        finally:
            del failure
