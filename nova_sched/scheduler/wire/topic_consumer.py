"""The scheduler topic's consumer: acknowledged when handled, reports inline.

oslo.messaging's RPC server acknowledges a message before dispatching it
and runs every message, a heartbeat as much as a boot request, through a
pool of executor threads. Both are wrong for a scheduler: a daemon killed
between the acknowledgement and recording a request loses the request,
and at 1,000 compute reports a second the executor's per-message cost
(a future, a thread hand-off, the dispatcher's watchdog set-up) is most of
the daemon's CPU.

So this consumer reads the topic itself, on kombu's public API
(``Connection``, ``Consumer``, ``Producer``, message acknowledgement), and
takes from oslo.messaging only what it publishes as its own: the
transport's configuration (``transport_url`` as ``TransportURL.parse``
reads it, the ``[oslo_messaging_rabbit]`` options as its rabbit driver
registers them), its RPC dispatcher (version and namespace checks,
``@expose`` access policy, expected exceptions, call-monitor heartbeats)
and its wire format: the 2.0 envelope (``oslo.version``,
``oslo.message``), the ``_context_*``, ``_msg_id``, ``_reply_q``,
``_timeout`` and ``_unique_id`` fields, replies with ``result``,
``failure`` and ``ending``, remote exceptions as oslo serializes them.
Exchanges and queues are declared with the names and arguments the rabbit
driver gives them (``broker``; the wire format is in ``rpc_envelope``), so oslo.messaging's clients, and oslo.messaging's own
servers on the same topic, meet this consumer where they expect it. Under
kombu, py-amqp is made to read several frames per system call
(``pyamqp_adapter``, the one private API used, says why). It does three
things differently from oslo.messaging's server:

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
threads, through oslo.messaging's dispatcher, and a call's reply goes out
on a connection of its own. kombu's connections are not thread-safe, so
workers never touch the consumer's: they queue their acknowledgements,
and the consumer thread sends them between polls.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import contextvars
import hashlib
import json
import logging
import queue
import socket
import sys
import threading
import time
from typing import Any, Callable, Iterable, Iterator

import kombu
import oslo_messaging as messaging

from nova_sched import exception, json_text
from nova_sched.scheduler.wire import pyamqp_adapter
from nova_sched.scheduler.wire.broker import (RabbitSettings, declare_queue, discard,
                                             heartbeat)
from nova_sched.scheduler.wire.notifications import scrub
from nova_sched.scheduler.wire.rpc_envelope import (remote_failure, reply_message, unpack,
                                                   version_is_compatible)

LOG = logging.getLogger(__name__)

# Seconds the consumer thread waits for a message when it has
# acknowledgements to send soon (a worker finishing a request); idle, it
# waits longer so an idle daemon costs nothing.
_BUSY_POLL = 0.005
_IDLE_POLL = 0.5
# Seconds between two readings of the queue's depth (backlog_seconds).
_BACKLOG_SAMPLE = 1.0
# Acknowledgements gather for at most this many messages or this many
# seconds, then go out together: where the delivery tags allow, one
# ``multiple`` ack frame covers dozens of reports instead of a frame (a
# socket write) each. The messages they hold count against the prefetch
# meanwhile, so the batch stays well below it.
_ACK_BATCH = 32
_ACK_DELAY = 0.01
# Frames (three to a message) handled per poll at most once the first has
# come: what one read brought in, and what the socket holds besides.
_DRAIN_FRAMES = 192
# Seconds without a poll of the broker after which the consumer counts as
# stalled (it polls at least every _IDLE_POLL; reconnecting holds it
# longer while the broker is away).
_STALLED = 20.0
# Seconds inside one poll after which the consumer counts as having been
# away from the broker (the process stopped or starved): a poll normally
# returns within _IDLE_POLL.
_AWAY = 5.0
# Reply queues found missing are remembered this long (seconds), this many
# at most: replies to a caller that is gone are then dropped at once
# instead of each waiting [oslo_messaging_rabbit]
# kombu_missing_consumer_retry_timeout for it (as oslo.messaging does).
_GONE_REPLY_QUEUES = 200
_GONE_REPLY_TTL = 60.0
# Seconds between two tries to reply to a queue not there (yet).
_REPLY_RETRY = 0.25

class _Stopping(Exception):
    """Raised inside kombu's reconnection loop to leave it: stop() was asked."""


class _Replies:
    """Sends calls' replies and call-monitor heartbeats, on a connection of
    its own (the consumer's is the consumer thread's alone).

    One connection under a lock: only calls get replies, and they are few
    beside the casts. The consumer thread keeps it alive between replies
    (``keep_alive``), as oslo.messaging's heartbeat thread does for its
    sending connections.
    """

    def __init__(self, settings: RabbitSettings):
        self._settings = settings
        self._lock = threading.Lock()
        self._conn: kombu.Connection | None = None
        self._producer: kombu.Producer | None = None
        self._returned = False
        # The default exchange: a reply goes straight to the caller's
        # reply queue, which an oslo.messaging client of any release reads.
        self._exchange = kombu.Exchange("", type="direct",
                                        durable=settings.transient_quorum,
                                        auto_delete=True, passive=True)
        # Reply queues found missing -> when to stop taking them for gone.
        self._gone: dict[str, float] = {}
        self._gone_lock = threading.Lock()

    def reply(self, request: "_Request", result: Any, failure) -> None:
        """Send a call's result or failure (``sys.exc_info()``) to its caller.

        A reply queue not there yet (the caller reconnecting) is waited for
        ``[oslo_messaging_rabbit] kombu_missing_consumer_retry_timeout``
        seconds; then the reply is dropped and the queue remembered as gone.
        """
        if self._is_gone(request):
            return
        failure_text = remote_failure(failure) if failure else None
        deadline = time.monotonic() + self._settings.missing_reply_queue_wait
        while not self._publish(request.reply_q, reply_message(
                request.msg_id, result, failure_text)):
            if time.monotonic() >= deadline:
                self._forget(request.reply_q)
                LOG.error("The reply %s failed to send after %d seconds due to "
                          "a missing queue (%s). Abandoning...", request.msg_id,
                          self._settings.missing_reply_queue_wait, request.reply_q)
                return
            time.sleep(_REPLY_RETRY)

    def heartbeat(self, request: "_Request") -> None:
        """Tell the caller the call is still being handled (its call monitor
        restarts its timer); MessageDeliveryFailure if its queue is gone."""
        if self._is_gone(request):
            return
        if not self._publish(request.reply_q,
                             reply_message(request.msg_id, ending=False)):
            raise messaging.MessageDeliveryFailure(
                "Heartbeat send failed. Missing queue")

    def _is_gone(self, request: "_Request") -> bool:
        with self._gone_lock:
            until = self._gone.get(request.reply_q)
            if until is None:
                return False
            if time.monotonic() > until:
                del self._gone[request.reply_q]
                return False
        LOG.warning("%s doesn't exist, drop reply to %s", request.reply_q,
                    request.msg_id)
        return True

    def _forget(self, reply_q: str) -> None:
        with self._gone_lock:
            if len(self._gone) >= _GONE_REPLY_QUEUES:
                self._gone.pop(min(self._gone, key=self._gone.__getitem__))
            self._gone[reply_q] = time.monotonic() + _GONE_REPLY_TTL

    def _on_return(self, exc, exchange, routing_key, message) -> None:
        # The broker had no queue to route the (mandatory) reply to; it
        # says so before it confirms the publish, inside publish().
        self._returned = True

    def _publish(self, reply_q: str, body: dict) -> bool:
        """Publish, reconnecting as often as it takes; False when the broker
        returned the message (no such queue)."""
        with self._lock:
            if self._producer is None:
                conn = self._settings.connection("reply")
                conn.ensure_connection(
                    max_retries=None,
                    errback=lambda exc, interval: LOG.error(
                        "Could not connect to send a reply (%s); trying again "
                        "in %.1f s", exc, interval),
                    **self._settings.retry)
                self._conn = conn
                self._producer = kombu.Producer(conn, on_return=self._on_return)
            self._returned = False
            self._producer.publish(
                body, exchange=self._exchange, routing_key=reply_q,
                mandatory=True, compression=self._settings.compression,
                retry=True, retry_policy=self._settings.retry_policy("send a reply"))
            return not self._returned

    def keep_alive(self) -> None:
        """Send and check AMQP heartbeats while no reply is being sent."""
        if self._conn is None or not self._lock.acquire(blocking=False):
            return
        try:
            conn = self._conn
            if conn is None:
                return
            heartbeat(conn, self._settings.heartbeat_rate)
        except Exception as err:  # the next reply reconnects
            LOG.info("The connection for replies failed (%s); a new one will "
                     "be made for the next reply", err)
            self._drop()
        finally:
            self._lock.release()

    def _drop(self) -> None:
        conn, self._conn, self._producer = self._conn, None, None
        discard(conn)

    def close(self) -> None:
        with self._lock:
            conn, self._conn, self._producer = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.release()


class _Request:
    """A request as oslo.messaging's dispatcher reads it (``ctxt``,
    ``message``, ``client_timeout``, ``heartbeat()``), and the way back to
    its caller (``reply()``; a cast has none)."""

    __slots__ = ("ctxt", "message", "msg_id", "reply_q", "client_timeout", "_replies")

    def __init__(self, ctxt: dict, message: dict, msg_id, reply_q, client_timeout,
                 replies: _Replies):
        self.ctxt = ctxt
        self.message = message
        self.msg_id = msg_id
        self.reply_q = reply_q
        self.client_timeout = client_timeout
        self._replies = replies

    def heartbeat(self) -> None:
        if self.msg_id:
            self._replies.heartbeat(self)

    def reply(self, result: Any = None, failure=None) -> None:
        if self.msg_id:
            self._replies.reply(self, result, failure)


def queue_lag(marks: collections.deque, now: float, delivered: int, waiting: int,
              rate: float) -> float:
    """Seconds behind its queue a consumer runs, from one sample: ``now``,
    the messages ``delivered`` so far, its share of those ``waiting`` in
    the queue, the recent delivery ``rate``. ``marks`` carries the earlier samples.

    Two readings, the larger wins. Ahead: what a message arriving now will
    wait (``waiting / rate``), which rises first at a burst's start.
    Behind: how old the messages taken now are, measured, not predicted:
    a sample remembers where the queue's end was (``delivered +
    waiting``); once that many have been delivered, what is taken was sent
    after the sample. At a burst's end the queue shortens while what is
    taken still waited the whole burst: there only this reading is right.
    """
    while marks and marks[0][1] <= delivered:
        marks.popleft()
    behind = now - marks[0][0] if marks else 0.0
    if waiting:
        marks.append((now, delivered + waiting))
    ahead = waiting / max(rate, 1.0) if waiting else 0.0
    return max(ahead, behind)

def _decoded(message) -> Any:
    """A message's body: JSON (what oslo.messaging sends) read by
    ``json_text``, ten times faster than kombu's reader, on the thread that
    reads every report and request; anything else (a compressed body,
    another content type) as kombu decodes it."""
    if (message.content_type == "application/json"
            and message.content_encoding in ("utf-8", "utf8")
            and "compression" not in (message.headers or {})):
        return json_text.loads(message.body)
    return message.decode()


class _Delivery:
    """One message taken from the queue, until it is acknowledged."""

    __slots__ = ("message", "request", "method", "message_id",
                 "redelivered", "broker_count")

    def __init__(self, message, request: _Request, method, message_id=None,
                 redelivered=False, broker_count=None):
        self.message = message    # kombu's: its delivery tag, its channel
        self.request = request
        self.method = method
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


class _Holding:
    """The acknowledgement of the message a worker is handling: sent when
    its handler returns, unless holders took it over (``defer_ack``); then
    when the last of them lets it go."""

    __slots__ = ("_ack", "_holders", "_returned", "_lock")

    def __init__(self, ack: Callable[[], None]):
        self._ack = ack
        self._holders = 0
        self._returned = False
        self._lock = threading.Lock()

    def hold(self) -> Callable[[], None]:
        with self._lock:
            self._holders += 1
        released = threading.Event()

        def _release() -> None:
            if not released.is_set():
                released.set()
                self._let_go(holder=True)

        return _release

    def _let_go(self, holder: bool) -> None:
        with self._lock:
            if holder:
                self._holders -= 1
            else:
                self._returned = True
            due = self._returned and self._holders == 0
            if due:
                self._returned = False  # once
        if due:
            self._ack()


# The message a worker thread is handling, for defer_ack.
_current: contextvars.ContextVar[_Holding | None] = (
    contextvars.ContextVar("nova_sched_delivery", default=None))


@contextlib.contextmanager
def handling(ack: Callable[[], None]) -> Iterator[None]:
    """Run a handler as a worker runs it: ``ack`` is called once the handler
    has returned and every ``defer_ack`` holder it gave out has been called
    (at once if it gave out none). The workers use it; so can a benchmark
    or a test that hands requests to a handler itself."""
    holding = _Holding(ack)
    token = _current.set(holding)
    try:
        yield
    finally:
        _current.reset(token)
        holding._let_go(holder=False)


def in_handler() -> bool:
    """Whether this thread is running a handler under ``handling`` (a worker
    of a TopicConsumer): only there does ``defer_ack`` keep a message."""
    return _current.get() is not None


def defer_ack() -> Callable[[], None]:
    """Keep the message being handled unacknowledged when its handler returns.

    For a handler that cannot finish now (the database is away) but keeps
    the request to finish later, or that leaves part of its work (the
    record of a cast) to be written later: it calls the returned function
    once that is done. Several holders may keep one message; it is
    acknowledged when the last lets it go. Until then the broker counts
    the message as held by this daemon, and delivers it again should the
    daemon die. Outside a handler (a direct call) the function does
    nothing.
    """
    holding = _current.get()
    if holding is None:
        return lambda: None
    return holding.hold()


def _fingerprint(body: dict) -> str:
    """A stable name for a message that came without a unique id (made
    from the body with its secrets masked, as it is stored)."""
    text = json.dumps(scrub(body), sort_keys=True, default=str)
    return "sha1-" + hashlib.sha1(text.encode()).hexdigest()



class TopicConsumer:
    """Consumes a topic's queues for one RPC endpoint, acknowledging late.

    ``transport`` is the oslo.messaging transport whose configuration it
    follows (``Transport.conf``: the control exchange, the
    ``[oslo_messaging_rabbit]`` options); ``url`` the transport URL it was
    made from, when not ``[DEFAULT] transport_url``. ``endpoints`` is one
    endpoint or a list of them (one per major API version). ``inline``
    names the first endpoint's methods run on the consumer thread (they
    must be quick and must not block, and are given the caller's context
    as the dict it travelled as, not the serializer's); the rest run on
    ``threads`` worker threads. ``serializer`` turns wire contexts into
    the endpoint's.
    ``on_backlog(seconds)`` is told, about once a second, how far behind the
    topic's queue the consumer runs (``backlog_seconds``). ``guard`` (a
    RedeliveryGuard) counts and gives up requests delivered again; without
    one they are handled like any other. A redelivered message of an
    inline method (a compute report) is dropped: the node's next report
    supersedes it, and it may be what killed the daemon.
    ``on_reconnect(seconds, through)`` is told each time the consumer is
    back on the broker after losing it (a node died: it fails over to the
    next of ``transport_url``), with the seconds it was away and the node
    (``host:port``) it consumes through now.
    ``on_idle()`` is called by a worker that finds no message waiting after
    one it handled, nor any coming within ``idle_grace`` seconds, before a
    request delivered again (with ``guard``: it runs alone, and may be a
    poison), and by each worker as the consumer stops: the endpoint
    finishes there what its handlers left for later (``defer_ack``), which
    a message arriving within the grace may finish in passing.
    """

    def __init__(self, transport, target: messaging.Target, endpoints: Any,
                 serializer, inline: Iterable[str] = (), threads: int = 8,
                 on_backlog: Callable[[float], None] | None = None,
                 guard: RedeliveryGuard | None = None,
                 on_reconnect: Callable[[float, str], None] | None = None,
                 url: str | None = None,
                 on_idle: Callable[[], None] | None = None,
                 idle_grace: float = 0.0):
        conf = transport.conf
        transport_url = messaging.TransportURL.parse(conf, url)
        if transport_url.transport.split("+")[0] not in ("rabbit", "kombu"):
            raise exception.ConfigurationError(
                "the scheduler daemon needs an AMQP transport (rabbit:// or "
                "kombu+memory://); transport_url names another kind")
        self._settings = RabbitSettings(conf, transport_url)
        self._exchange = target.exchange or conf.control_exchange
        # One endpoint, or several of different major versions (oslo's
        # dispatcher picks by the caller's version); inline methods are
        # the first endpoint's.
        endpoints = (list(endpoints) if isinstance(endpoints, (list, tuple))
                     else [endpoints])
        endpoint = endpoints[0]
        self._target = target
        self._endpoint = endpoint
        self._serializer = serializer
        self._dispatcher = messaging.RPCDispatcher(
            endpoints, serializer, messaging.ExplicitRPCAccessPolicy)
        endpoint_target = getattr(endpoint, "target", None)
        self._endpoint_version = getattr(endpoint_target, "version", None) or "1.0"
        self._compatible: dict[Any, bool] = {}
        self._inline: dict[str, Callable] = {
            name: getattr(endpoint, name) for name in inline}
        self._replies = _Replies(self._settings)
        self._work: queue.SimpleQueue[_Delivery | None] = queue.SimpleQueue()
        self._acks: queue.SimpleQueue[_Delivery] = queue.SimpleQueue()
        self._threads = threads
        self._workers: list[threading.Thread] = []
        self._consumer_thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._abandoned = threading.Event()
        self._lock = threading.Lock()
        self._in_hand = 0  # taken by a worker or waiting for one, not yet acked
        self._conn: kombu.Connection | None = None
        # Consumer thread only: what it consumes on (None while the broker
        # is lost), the messages ready to acknowledge, the tags a worker
        # holds, and where a stream fanout queue's reading goes on from.
        self._channel = None
        self._consumer: kombu.Consumer | None = None
        self._topic_queue: kombu.Queue | None = None
        self._fanout_queue: kombu.Queue | None = None
        self._multiple_acks = False
        self._buffered: pyamqp_adapter.BufferedFrames | None = None
        self._ready: list = []
        self._ready_since = 0.0
        self._held: set[int] = set()
        self._stream_offset: Any = "last"
        self._next_heartbeat = 0.0
        self.ready = threading.Event()
        self._last_poll = time.monotonic()
        self._on_backlog = on_backlog
        self._guard = guard
        self._gate = _SoloGate()
        self._on_reconnect = on_reconnect
        # Called by a worker that finds no message waiting, and by each
        # worker as it stops.
        self._on_idle = on_idle
        self._idle_grace = idle_grace
        # Consumer thread: when the broker connection was lost (None while
        # connected), and when it was last seen working.
        self._lost_at: float | None = None
        self._seen_ok = time.monotonic()
        self.reconnects = 0
        self._backlog = 0.0
        self._next_sample = 0.0
        self._sampled_delivered = 0
        # (when, how many messages delivered once that moment's queue has
        # been read to its end): see _sample_backlog.
        self._tail_marks: collections.deque[tuple[float, int]] = collections.deque()
        # Figures for the log, health checks and tests.
        self.delivered = 0
        self.acknowledged = 0
        self.ack_frames = 0  # basic.ack frames sent: fewer than acknowledged
        self.dropped_acks = 0
        self.redelivered = 0   # messages the broker delivered again
        self.given_up = 0      # poison requests failed without handling

    # -- life cycle ------------------------------------------------------------
    def start(self) -> None:
        """Connect, declare the queues and start consuming.

        Waits for the broker as long as it takes (as oslo.messaging's
        server does); a declaration the broker refuses (queue arguments
        that differ from an existing queue's) raises.
        """
        self._conn = self._settings.connection("listen")
        for number in range(self._threads):
            worker = threading.Thread(target=self._work_loop,
                                      name=f"request-worker-{number}", daemon=True)
            worker.start()
            self._workers.append(worker)
        # The consumer thread connects: messages arrive as soon as the
        # first queue is consumed, and inline methods run on it alone.
        connected = threading.Event()
        failure: list[BaseException] = []
        self._consumer_thread = threading.Thread(
            target=self._consume_loop, args=(connected, failure),
            name="topic-consumer", daemon=True)
        self._consumer_thread.start()
        connected.wait()
        if failure:
            self.stop(timeout=0)
            if not isinstance(failure[0], _Stopping):
                raise failure[0]

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
        thread = self._consumer_thread
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()) + 5.0)
            if thread.is_alive():
                LOG.warning("The consumer of topic %s did not stop in time; "
                            "its connection is left to the process's exit",
                            self._target.topic)
                return
        elif self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.release()
        self._conn = None

    @property
    def connection(self) -> kombu.Connection | None:
        """kombu's connection this consumer reads (None unless started)."""
        return self._conn

    def problem(self) -> str | None:
        """Why this consumer is not consuming its topic now; None if it is."""
        topic = self._target.topic
        thread = self._consumer_thread
        if thread is None or not self.ready.is_set():
            return f"not consuming topic {topic} yet"
        if self._stopping.is_set():
            return f"stopping: no longer consuming topic {topic}"
        if not thread.is_alive():
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

    def backlog_seconds(self) -> float:
        """How long the messages waiting in the topic's queue will take at the
        rate this consumer has been taking them: how old, about, is what it
        takes now. Compute reports wait in the same queue as requests, so a
        host's last report is this much older than it would otherwise be."""
        return self._backlog

    # -- the broker (consumer thread, and start) ----------------------------------
    def _connect(self) -> None:
        """Connect (again), declare the queues and consume from them."""
        conn = self._conn

        def unreachable(exc, interval):
            LOG.error("AMQP server on %s is unreachable: %s. Trying again in "
                      "%.1f seconds.", self._broker_address(), exc, interval)

        def leave_if_stopping():
            if self._stopping.is_set():
                raise _Stopping()

        conn.ensure_connection(errback=unreachable, max_retries=None,
                               callback=leave_if_stopping, **self._settings.retry)
        channel = conn.channel()
        if self._settings.prefetch > 0:
            channel.basic_qos(0, self._settings.prefetch, False)
        queues = [declare_queue(q, channel, conn.channel_errors)
                  for q in self._settings.topic_queues(
                      self._exchange, self._target.topic, self._target.server,
                      self._stream_offset)]
        # Messages may arrive while the later queues' consumers are being
        # set up: they belong to this channel already.
        self._new_channel(channel)
        self._last_poll = time.monotonic()
        consumer = kombu.Consumer(channel, queues=queues, no_ack=False,
                                  auto_declare=False, on_message=self._on_message)
        consumer.consume()
        self._consumer = consumer
        self._topic_queue, self._fanout_queue = queues[0], queues[-1]
        # Only AMQP brokers take one acknowledgement for many messages;
        # kombu's in-memory transport ignores ``multiple``.
        self._multiple_acks = conn.transport.driver_type == "amqp"
        self._buffered = pyamqp_adapter.read_ahead(conn)

    def _reconnect(self) -> bool:
        """Consume again after losing the broker; False when stopping first."""
        while not self._stopping.wait(self._settings.reconnect_delay):
            try:
                self._connect()
                return True
            except _Stopping:
                return False
            except Exception as err:
                LOG.error("Could not consume topic %s through %s: %s",
                          self._target.topic, self._broker_address(), err)
                self._drop_connection()
        return False

    def _lost(self, err: Exception) -> None:
        if self._lost_at is None:
            self._lost_at = time.monotonic()
            LOG.warning("Lost the broker connection consuming topic %s "
                        "(through %s): %s; reconnecting", self._target.topic,
                        self._broker_address(), err)
        self._drop_connection()

    def _drop_connection(self) -> None:
        """Forget the connection's state without talking to it (it is broken),
        and move on to the next node of transport_url."""
        self._consumer = self._topic_queue = self._fanout_queue = None
        self._buffered = None
        self._new_channel(None)
        conn = self._conn
        with contextlib.suppress(Exception):
            conn.collect()
        with contextlib.suppress(Exception):
            conn.maybe_switch_next()

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
        self.reconnects += 1
        LOG.warning("Consuming topic %s again through %s, %.1f s after the "
                    "broker connection was last seen working; unacknowledged "
                    "requests went back to the queue", self._target.topic,
                    self._broker_address(), away)
        if self._on_reconnect is not None:
            self._on_reconnect(away, self._broker_address())

    def _broker_address(self) -> str:
        conn = self._conn
        host = getattr(conn, "hostname", None)
        return f"{host}:{getattr(conn, 'port', None)}" if host else "no broker yet"

    def _close(self) -> None:
        """Stop consuming and close (consumer thread, on its way out)."""
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                self._consumer.cancel()
            if self._fanout_queue is not None and not self._settings.keep_fanout_queue:
                # Named for this consumer alone: nobody reads it after us.
                with contextlib.suppress(Exception):
                    self._fanout_queue.delete()
        with contextlib.suppress(Exception):
            self._conn.release()
        self._replies.close()

    # -- the consumer thread --------------------------------------------------
    def _consume_loop(self, connected: threading.Event,
                      failure: list[BaseException]) -> None:
        try:
            self._connect()
        except BaseException as err:
            failure.append(err)
            with contextlib.suppress(Exception):
                self._conn.release()
            return
        finally:
            connected.set()
        # Workers still finishing when a stop is asked need their
        # acknowledgements sent, so the loop runs until they are done.
        while not (self._stopping.is_set()
                   and (self._workers_done() or self._abandoned.is_set())):
            self._send_acks()
            if self._consumer is None:
                # Messages held on the lost connection are back in the
                # queue: nothing to acknowledge until connected again.
                last_seen_ok = self._seen_ok
                if self._stopping.is_set() or not self._reconnect():
                    self._stopping.wait(0.05)
                    continue
                self._returned(time.monotonic() - last_seen_ok)
            try:
                self._keep_alive()
                self._sample_backlog()
                busy = self.in_hand() > 0 or bool(self._ready)
                self._poll(_BUSY_POLL if busy else _IDLE_POLL)
            except Exception as err:  # the connection's trouble: reconnect
                self._lost(err)
        self._send_acks(force=True)
        self._close()

    def _poll(self, timeout: float) -> None:
        """Handle what the broker sent, waiting up to ``timeout`` for it."""
        conn = self._conn
        self._last_poll = time.monotonic()
        self.ready.set()
        try:
            conn.drain_events(timeout=timeout)
            # What has arrived besides is taken without waiting, until
            # enough is ready to acknowledge together: first the frames
            # the last read brought in, without a system call (each one
            # gives the GIL up to the request threads), then what the
            # socket holds.
            buffered = self._buffered
            for _ in range(_DRAIN_FRAMES):
                if len(self._ready) >= _ACK_BATCH or self._stopping.is_set():
                    break
                if buffered is None or not buffered.handle_one():
                    conn.drain_events(timeout=0)
        except socket.timeout:
            pass
        self._seen_ok = time.monotonic()

    def _keep_alive(self) -> None:
        """AMQP heartbeats, both connections, about once a second."""
        now = time.monotonic()
        if now < self._next_heartbeat or self._settings.heartbeat <= 0:
            return
        self._next_heartbeat = now + 1.0
        self._conn.heartbeat_check(rate=self._settings.heartbeat_rate)
        self._replies.keep_alive()

    def _sample_backlog(self) -> None:
        now = time.monotonic()
        if now < self._next_sample:
            return
        elapsed = now - self._next_sample + _BACKLOG_SAMPLE
        self._next_sample = now + _BACKLOG_SAMPLE
        rate = (self.delivered - self._sampled_delivered) / max(elapsed, 1e-3)
        self._sampled_delivered = self.delivered
        # A passive declare answers with the queue's ready messages and its
        # consumers: the daemons on the topic share what waits.
        declared = self._topic_queue.queue_declare(passive=True)
        waiting = -(-declared.message_count // max(declared.consumer_count, 1))
        self._backlog = queue_lag(self._tail_marks, now, self.delivered, waiting, rate)
        if self._on_backlog is not None:
            self._on_backlog(self._backlog)

    def _workers_done(self) -> bool:
        return not any(worker.is_alive() for worker in self._workers)

    def _on_message(self, message) -> None:
        """kombu's callback, on the consumer thread: one message delivered."""
        if self._stopping.is_set():
            # Not ours to handle any more: unacknowledged, it returns to the
            # queue when the connection closes.
            return
        self.delivered += 1
        try:
            body = unpack(_decoded(message))
            if not isinstance(body, dict):
                raise ValueError(f"a {type(body).__name__}, not a dict")
        except Exception as err:
            LOG.error("Dropped a message on topic %s that is not an oslo.messaging "
                      "request: %s", self._target.topic, err)
            with contextlib.suppress(Exception):
                message.reject()
            return
        ctxt = {}
        for key in [k for k in body if k.startswith("_context_")]:
            ctxt[key[9:]] = body.pop(key)
        msg_id = body.pop("_msg_id", None)
        reply_q = body.pop("_reply_q", None)
        client_timeout = body.pop("_timeout", None)
        unique_id = body.pop("_unique_id", None)
        method = body.get("method")
        handler = self._inline.get(method) if isinstance(method, str) else None
        headers = message.headers or {}
        redelivered = bool(message.delivery_info.get("redelivered"))
        if self._settings.stream_fanout and "x-stream-offset" in headers:
            self._stream_offset = headers["x-stream-offset"] + 1
        now = time.monotonic()
        if now - self._last_poll > _AWAY:
            # A process stopped inside a poll finds messages waiting when it
            # resumes: note the time away before handling them.
            self._returned(now - self._seen_ok)
        if redelivered:
            self.redelivered += 1
        if handler is not None and msg_id is None and self._accepts(body):
            if not redelivered:
                self._run_inline(handler, ctxt, body)
            self._ready_to_ack(message)
            return
        request = _Request(ctxt, body, msg_id, reply_q, client_timeout, self._replies)
        with self._lock:
            self._in_hand += 1
        self._held.add(message.delivery_tag)
        count = headers.get("x-delivery-count")
        self._work.put(_Delivery(message, request, method, unique_id, redelivered,
                                 count if isinstance(count, int) else None))

    def _accepts(self, body: dict) -> bool:
        """The dispatcher's version and namespace rules, cached per version."""
        if body.get("namespace") is not None:
            return False
        version = body.get("version", "1.0")
        known = self._compatible.get(version)
        if known is None:
            try:
                known = version_is_compatible(self._endpoint_version, version)
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
            # The context as it travelled: an inline method (a compute
            # report, a thousand a second) does not read it, and building
            # a RequestContext cost about 20 us of a report's 0.5 ms.
            handler(ctxt, **args)
        except Exception:
            LOG.exception("Handling a %s cast failed; message dropped",
                          body.get("method"))

    def _new_channel(self, channel) -> None:
        """Messages now come on ``channel`` (None: the broker is lost): those
        of the old one cannot be acknowledged on it, and the broker has put
        them back."""
        if self._ready:
            self.dropped_acks += len(self._ready)
            self._ready.clear()
        self._held.clear()
        self._channel = channel

    def _ready_to_ack(self, message) -> None:
        if not self._ready:
            self._ready_since = time.monotonic()
        self._ready.append(message)

    def _send_acks(self, force: bool = False) -> None:
        """Send the acknowledgements that are due (consumer thread only)."""
        while True:
            try:
                delivery = self._acks.get_nowait()
            except queue.Empty:
                break
            with self._lock:
                self._in_hand -= 1
            message = delivery.message
            if self._channel is not None and message.channel is self._channel:
                self._held.discard(message.delivery_tag)
                self._ready_to_ack(message)
            else:
                # Taken on a connection since lost: the broker has already
                # put the message back.
                self.dropped_acks += 1
        ready = self._ready
        if not ready or not (force or len(ready) >= _ACK_BATCH
                             or time.monotonic() - self._ready_since >= _ACK_DELAY):
            return
        messages = sorted(ready, key=lambda m: m.delivery_tag)
        ready.clear()
        # A multiple ack covers every unacknowledged tag up to its own, so
        # it may only reach up to the lowest tag a worker still holds.
        below = 0
        if self._multiple_acks:
            below = (bisect.bisect_left([m.delivery_tag for m in messages],
                                        min(self._held))
                     if self._held else len(messages))
        try:
            if below:
                messages[below - 1].ack(multiple=True)
                self.ack_frames += 1
            for message in messages[below:]:
                message.ack()
                self.ack_frames += 1
        except Exception as err:
            self.dropped_acks += len(messages)
            LOG.warning("Could not acknowledge %d messages (%s); the broker will "
                        "deliver them again", len(messages), err)
            return
        self.acknowledged += len(messages)

    # -- the workers ------------------------------------------------------------
    def _work_loop(self) -> None:
        idle_due = False  # a message was handled since on_idle last ran
        while True:
            if idle_due:
                try:
                    delivery = self._work.get(timeout=max(0.0, self._idle_grace))
                except queue.Empty:
                    self._idle()
                    delivery = self._work.get()
                idle_due = False
            else:
                delivery = self._work.get()
            if delivery is None:
                if self._on_idle is not None:
                    # Stopping: what the owner left for later is done now,
                    # while acknowledgements can still be sent.
                    self._idle()
                return
            if self._stopping.is_set():
                # Left for another daemon: never acknowledged.
                with self._lock:
                    self._in_hand -= 1
                continue
            with handling(lambda delivery=delivery: self._acks.put(delivery)):
                if delivery.redelivered and self._guard is not None:
                    with self._gate.alone():
                        if self._on_idle is not None:
                            # It may be what killed a daemon: what handlers
                            # left for later (a boot's cast record, its
                            # message) is finished first, so that nothing
                            # of theirs is done again should it kill this
                            # one too.
                            self._idle()
                        self._handle_redelivered(delivery)
                else:
                    with self._gate.shared():
                        self._dispatch(delivery.request)
            # With no grace, the next get finds the queue empty or not at once.
            idle_due = self._on_idle is not None

    def _idle(self) -> None:
        """A worker found no message waiting: the owner's ``on_idle``."""
        try:
            self._on_idle()
        except Exception:  # the owner's trouble: logged, the worker goes on
            LOG.exception("The idle hook of the consumer of topic %s failed",
                          self._target.topic)

    def _handle_redelivered(self, delivery: _Delivery) -> None:
        """Count the start; past the guard's limit give the request up,
        else handle it as any other."""
        guard = self._guard
        message_id = delivery.message_id or _fingerprint(delivery.request.message)
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
            self._dispatch(delivery.request)
        guard.handled(message_id)

    def _give_up(self, delivery: _Delivery, starts: int) -> None:
        request = delivery.request
        failure = None
        try:
            self._guard.give_up(
                self._serializer.deserialize_context(request.ctxt),
                delivery.method, request.message.get("args"), starts,
                delivery.broker_count)
        except Exception as err:
            failure = sys.exc_info()
            LOG.debug("Gave up %s: %s", delivery.method, err)
        self._reply(request, None, failure)

    def _dispatch(self, request: _Request) -> None:
        """oslo.messaging's RPC server's handling of one message, minus its ack."""
        failure = None
        result = None
        try:
            result = self._dispatcher.dispatch(request)
        except messaging.ExpectedException as err:
            failure = err.exc_info
            LOG.debug("Expected exception during message handling (%s)", err)
        except Exception:
            failure = sys.exc_info()
            LOG.exception("Exception during message handling")
        self._reply(request, result, failure)

    @staticmethod
    def _reply(request: _Request, result, failure) -> None:
        """Answer a call with its result or failure (a cast: nothing)."""
        try:
            request.reply(result, failure)
        except Exception:
            LOG.exception("Could not send the reply to %s",
                          request.message.get("method"))
        finally:
            del failure
