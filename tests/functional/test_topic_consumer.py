"""TopicConsumer on the real RabbitMQ: late acks, prefetch, inline methods.

Unlike the rest of this suite, these tests run the consumer in the pytest
process (one of them also in a subprocess it kills): what they check is
what the broker sees of one consumer (messages ready and unacknowledged,
as ``rabbitmqctl list_queues`` reports them) and the consumer's own
figures (``delivered``, ``acknowledged``, ``in_hand()``).

Every test gets its own topic on a vhost private to this module, and every
consumer, transport and process it starts is stopped at its end.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import uuid

import pytest

import cloudlib

pytestmark = pytest.mark.integration

# A test's every wait is bounded by this; each normally ends in well under
# a second.
WAIT = 10


# -- the endpoint ------------------------------------------------------------
def _endpoint_class():
    import oslo_messaging as messaging

    class Endpoint:
        """Records what it handles; ``slow`` blocks until ``gate`` is set."""

        target = messaging.Target(version="2.10")

        def __init__(self, gate_open: bool = False):
            self.lock = threading.Lock()
            self.gate = threading.Event()
            if gate_open:
                self.gate.set()
            self.reports: list[tuple[dict, str]] = []  # (compute_node, thread)
            self.started: list[tuple[object, str]] = []  # (value, thread)
            self.done: list[object] = []
            self.request_ids: list[str] = []
            self.acks: list = []

        @messaging.expose
        def compute_node_update(self, context, compute_node):
            with self.lock:
                self.reports.append(
                    (compute_node, threading.current_thread().name))

        @messaging.expose
        def echo(self, context, value):
            return value

        @messaging.expose
        def slow(self, context, value):
            with self.lock:
                self.started.append((value, threading.current_thread().name))
                self.request_ids.append(context.request_id)
            # Bounded, so a failed test cannot leave a worker behind for
            # ever; the fixtures open every gate at the end anyway.
            self.gate.wait(60)
            with self.lock:
                self.done.append(value)

        @messaging.expose
        def later(self, context, value):
            """Keeps its message for later, as a request parked during a
            database outage does."""
            from nova_sched.scheduler.wire import topic_consumer

            with self.lock:
                self.acks.append(topic_consumer.defer_ack())
                self.done.append(value)

        def hidden(self, context, **kwargs):  # not @expose: not callable
            return "hidden"

    return Endpoint


# -- fixtures ----------------------------------------------------------------
@pytest.fixture
def topic():
    return f"tc_{uuid.uuid4().hex[:12]}"


class _Harness:
    """Makes transports, clients, endpoints and consumers; cleans them all up."""

    def __init__(self, broker, topic):
        import oslo_messaging as messaging

        from nova_sched import rpc

        self.messaging = messaging
        self.rpc = rpc
        self.broker = broker
        self.topic = topic
        self.transports = []
        self.consumers = []
        self.endpoints = []
        self.Endpoint = _endpoint_class()

    def transport(self):
        transport = self.rpc.get_transport(self.broker.url)
        self.transports.append(transport)
        return transport

    def endpoint(self, gate_open=False):
        ep = self.Endpoint(gate_open)
        self.endpoints.append(ep)
        return ep

    def consumer(self, endpoint, server="daemon-a", inline=(), threads=8,
                 transport=None, guard=None, on_idle=None, idle_grace=0.0):
        from nova_sched.scheduler.wire.topic_consumer import TopicConsumer

        consumer = TopicConsumer(
            transport or self.transport(),
            self.messaging.Target(topic=self.topic, server=server),
            endpoint, self.rpc.ContextSerializer(), inline=inline,
            threads=threads, guard=guard, url=self.broker.url, on_idle=on_idle,
            idle_grace=idle_grace)
        self.consumers.append(consumer)
        consumer.start()
        assert consumer.ready.wait(WAIT), "the consumer thread never polled"
        return consumer

    def client(self, version="2.10"):
        return self.rpc.get_client(
            self.transport(),
            self.messaging.Target(topic=self.topic, version=version))

    def context(self):
        return self.rpc.admin_context()

    def close(self):
        """Open every gate, stop every consumer, clean up every transport."""
        for ep in self.endpoints:
            ep.gate.set()
        consumers, self.consumers = self.consumers, []
        transports, self.transports = self.transports, []
        for consumer in consumers:
            try:
                consumer.stop(timeout=10)
            except Exception:  # the test's own failure matters more
                pass
        for transport in transports:
            try:
                transport.cleanup()
            except Exception:
                pass


@pytest.fixture
def harness(broker, topic):
    h = _Harness(broker, topic)
    try:
        yield h
    finally:
        h.close()


# -- the broker's view ---------------------------------------------------------
def _queue_counts(broker, name):
    """(messages ready, messages unacknowledged) of a queue, per rabbitmqctl.

    None when rabbitmqctl cannot be used (no private vhost): the tests then
    check the consumer's own figures only.
    """
    if broker.vhost is None or not shutil.which("rabbitmqctl"):
        return None
    listed = subprocess.run(
        ["rabbitmqctl", "-q", "-p", broker.vhost, "list_queues", "name",
         "messages_ready", "messages_unacknowledged"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    if listed.returncode != 0:
        raise AssertionError(f"rabbitmqctl list_queues failed: {listed.stderr}")
    for line in listed.stdout.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[0] == name:
            return int(fields[1]), int(fields[2])
    raise AssertionError(f"no queue {name!r} in vhost {broker.vhost}:\n"
                         f"{listed.stdout}")


def _wait_queue(broker, name, predicate, what, timeout=WAIT):
    """Until the queue's (ready, unacked) satisfy ``predicate``; returns them."""
    if _queue_counts(broker, name) is None:
        return None
    last = []

    def _check():
        counts = _queue_counts(broker, name)
        last[:] = [counts]
        return counts if predicate(*counts) else None

    try:
        return cloudlib.wait_until(_check, timeout, 0.2, what)
    except TimeoutError as err:
        raise AssertionError(f"{err}; queue {name} (ready, unacked) = "
                             f"{last[0] if last else None}") from None


def _wait(predicate, what, timeout=WAIT):
    try:
        return cloudlib.wait_until(predicate, timeout, 0.05, what)
    except TimeoutError as err:
        raise AssertionError(str(err)) from None


# -- 1. inline methods -----------------------------------------------------------
def test_inline_casts_run_on_consumer_thread_once_each_and_acked(harness, broker):
    ep = harness.endpoint()
    consumer = harness.consumer(ep, inline=("compute_node_update",))
    client = harness.client()
    ctxt = harness.context()
    total = 200
    for seq in range(total):
        client.cast(ctxt, "compute_node_update",
                    compute_node={"host": f"node-{seq}", "seq": seq})

    _wait(lambda: len(ep.reports) >= total, f"{total} reports")
    _wait(lambda: consumer.acknowledged >= total, f"{total} acknowledgements")
    # Nothing left on the broker: no message ready, none unacknowledged,
    # so none can arrive a second time after this point.
    _wait_queue(broker, harness.topic, lambda ready, unacked: (ready, unacked) == (0, 0),
                "the topic queue to be empty")

    seqs = sorted(report["seq"] for report, _ in ep.reports)
    assert seqs == list(range(total)), "every cast exactly once"
    threads = {name for _, name in ep.reports}
    assert threads == {"topic-consumer"}
    assert consumer._buffered is not None, "py-amqp reads ahead (pyamqp_adapter)"
    assert consumer.delivered == total
    assert consumer.acknowledged == total
    assert consumer.dropped_acks == 0
    assert consumer.in_hand() == 0


def test_reports_are_acknowledged_together_but_never_past_a_held_request(
        harness, broker):
    """Reports are acknowledged in multiple-acks, which cover every earlier
    delivery tag: a request a worker still holds must stay unacknowledged."""
    # The queue exists once a consumer has declared it; the messages then
    # wait in it, so the next consumer gets them in prefetch-sized bursts.
    harness.consumer(harness.endpoint(), inline=("compute_node_update",)).stop()
    client = harness.client()
    ctxt = harness.context()
    for seq in range(100):
        client.cast(ctxt, "compute_node_update", compute_node={"seq": seq})
    client.cast(ctxt, "slow", value="held")
    for seq in range(100, 200):
        client.cast(ctxt, "compute_node_update", compute_node={"seq": seq})
    _wait_queue(broker, harness.topic, lambda ready, unacked: ready == 201,
                "the casts to wait in the queue")

    ep = harness.endpoint()
    consumer = harness.consumer(ep, inline=("compute_node_update",))
    _wait(lambda: consumer.acknowledged >= 200, "200 report acknowledgements")
    _wait(lambda: len(ep.started) == 1, "the request's handler to start")
    # Every report acknowledged, the request (tag 101, between them) not.
    _wait_queue(broker, harness.topic, lambda ready, unacked: (ready, unacked) == (0, 1),
                "only the held request to stay unacknowledged")
    assert sorted(report["seq"] for report, _ in ep.reports) == list(range(200))
    assert consumer.ack_frames < consumer.acknowledged, "some acks were batched"
    assert ep.done == []

    ep.gate.set()
    _wait(lambda: consumer.acknowledged == 201, "the request's acknowledgement")
    _wait_queue(broker, harness.topic, lambda ready, unacked: (ready, unacked) == (0, 0),
                "the request's acknowledgement to reach the broker")
    assert consumer.dropped_acks == 0


# -- 2. late acknowledgement -------------------------------------------------------
def test_worker_cast_is_acknowledged_only_when_its_handler_returns(harness, broker):
    ep = harness.endpoint()
    consumer = harness.consumer(ep, inline=("compute_node_update",))
    client = harness.client()
    client.cast(harness.context(), "slow", value="late")

    _wait(lambda: len(ep.started) == 1, "the handler to start")
    assert ep.started[0][1].startswith("request-worker-")
    # Blocked in its handler: taken, not acknowledged.
    assert consumer.in_hand() == 1
    assert consumer.acknowledged == 0
    _wait_queue(broker, harness.topic, lambda ready, unacked: (ready, unacked) == (0, 1),
                "the message to be held unacknowledged")
    assert ep.done == []

    ep.gate.set()
    _wait(lambda: consumer.acknowledged == 1, "the acknowledgement")
    assert ep.done == ["late"]
    assert consumer.in_hand() == 0
    _wait_queue(broker, harness.topic, lambda ready, unacked: (ready, unacked) == (0, 0),
                "the acknowledgement to reach the broker")


def _letting_go(ep, idle: list[int]):
    """An idle hook that lets go every message ``ep`` holds, noting how many."""
    def on_idle():
        with ep.lock:
            held, ep.acks[:] = list(ep.acks), []
        idle.append(len(held))
        for ack in held:
            ack()
    return on_idle


def test_a_worker_with_nothing_waiting_runs_the_idle_hook(harness, broker):
    """What handlers held for later is let go by the idle hook, which a
    worker runs when it finds no message waiting, and once more as the
    consumer stops."""
    ep = harness.endpoint()
    idle: list[int] = []
    on_idle = _letting_go(ep, idle)

    consumer = harness.consumer(ep, threads=1, on_idle=on_idle)
    client = harness.client()
    for value in range(3):
        client.cast(harness.context(), "later", value=value)

    _wait(lambda: consumer.acknowledged == 3, "the held messages to be let go")
    assert ep.done == [0, 1, 2] and sum(idle) == 3
    _wait_queue(broker, harness.topic, lambda ready, unacked: (ready, unacked) == (0, 0),
                "the acknowledgements to reach the broker")
    calls = len(idle)
    consumer.stop()
    assert len(idle) == calls + 1


def test_a_message_within_the_idle_grace_comes_before_the_idle_hook(harness, broker):
    """With ``idle_grace`` a worker that finds nothing waiting waits that
    long for the next message before running the idle hook: messages
    arriving one at a time have what was held for later let go together."""
    ep = harness.endpoint()
    idle: list[int] = []
    on_idle = _letting_go(ep, idle)

    consumer = harness.consumer(ep, threads=1, on_idle=on_idle, idle_grace=3.0)
    client = harness.client()
    client.cast(harness.context(), "later", value=0)
    _wait(lambda: ep.done == [0], "the first message's handler")
    assert idle == [] and consumer.acknowledged == 0, "still within the grace"
    client.cast(harness.context(), "later", value=1)
    _wait(lambda: consumer.acknowledged == 2, "both messages to be let go")
    assert ep.done == [0, 1] and idle == [2]


def test_a_deferred_message_is_acknowledged_when_its_handler_says(harness, broker):
    ep = harness.endpoint()
    consumer = harness.consumer(ep, inline=("compute_node_update",))
    client = harness.client()
    client.cast(harness.context(), "later", value="parked")

    _wait(lambda: ep.done == ["parked"], "the handler to return")
    # The handler returned but kept the acknowledgement: still held.
    _wait_queue(broker, harness.topic, lambda ready, unacked: (ready, unacked) == (0, 1),
                "the message to stay held after its handler returned")
    assert consumer.acknowledged == 0 and consumer.in_hand() == 1

    ep.acks[0]()
    ep.acks[0]()  # a second call acknowledges nothing more
    _wait(lambda: consumer.acknowledged == 1, "the deferred acknowledgement")
    assert consumer.in_hand() == 0
    _wait_queue(broker, harness.topic, lambda ready, unacked: (ready, unacked) == (0, 0),
                "the acknowledgement to reach the broker")
    assert consumer.dropped_acks == 0


# -- 3. redelivery after a daemon dies ------------------------------------------------
_DAEMON_A = textwrap.dedent("""
    import json, os, sys, threading

    import nova_sched  # selects oslo.service's threading backend
    import oslo_messaging as messaging
    from nova_sched import rpc
    from nova_sched.scheduler.wire.topic_consumer import TopicConsumer

    url, topic, marker = sys.argv[1:4]

    def write(path, data):
        with open(path + ".tmp", "w") as f:
            json.dump(data, f)
        os.replace(path + ".tmp", path)

    class Endpoint:
        target = messaging.Target(version="2.10")

        @messaging.expose
        def slow(self, context, value):
            write(marker, {"value": value, "request_id": context.request_id})
            threading.Event().wait()  # never returns: killed holding it

    consumer = TopicConsumer(rpc.get_transport(url),
                             messaging.Target(topic=topic, server="daemon-a"),
                             Endpoint(), rpc.ContextSerializer(), threads=2,
                             url=url)
    consumer.start()
    consumer.ready.wait(30)
    write(marker + ".ready", {"pid": os.getpid()})
    threading.Event().wait()
""")


def test_message_held_by_a_killed_daemon_is_redelivered(harness, broker, tmp_path):
    marker = tmp_path / "held.json"
    ready = tmp_path / "held.json.ready"
    log = open(tmp_path / "daemon-a.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-c", _DAEMON_A, broker.url, harness.topic, str(marker)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env=cloudlib.subprocess_env(), cwd=str(tmp_path))
    log.close()

    def _log():
        return (tmp_path / "daemon-a.log").read_text(errors="replace")[-3000:]

    try:
        def _alive(path):
            if proc.poll() is not None:
                raise AssertionError(f"daemon A exited ({proc.returncode}):\n{_log()}")
            return path.exists()

        _wait(lambda: _alive(ready), "daemon A to consume", timeout=30)
        client = harness.client()
        value = {"request": str(uuid.uuid4()), "n": 7}
        client.cast(harness.context(), "slow", value=value)
        _wait(lambda: _alive(marker), "daemon A to take the message")
        held = json.loads(marker.read_text())
        assert held["value"] == value
        _wait_queue(broker, harness.topic,
                    lambda ready_, unacked: (ready_, unacked) == (0, 1),
                    "daemon A to hold the message unacknowledged")

        # Daemon B consumes the same topic; the message is A's until A dies.
        ep_b = harness.endpoint(gate_open=True)
        consumer_b = harness.consumer(ep_b, server="daemon-b")
        proc.send_signal(signal.SIGKILL)
        proc.wait(WAIT)

        _wait(lambda: ep_b.done, "daemon B to handle the redelivered message")
        assert ep_b.done == [value]
        assert ep_b.request_ids == [held["request_id"]], "the same message"
        _wait(lambda: consumer_b.acknowledged == 1, "daemon B's acknowledgement")
        _wait_queue(broker, harness.topic,
                    lambda ready_, unacked: (ready_, unacked) == (0, 0),
                    "the topic queue to be empty")
        assert consumer_b.delivered == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT)


# -- 4. bounded prefetch --------------------------------------------------------------
def test_prefetch_bounds_the_messages_held(harness, broker):
    from nova_sched.conf import CONF

    # oslo.messaging's rabbit driver registers its options on CONF when a
    # transport is made: this test may run first.
    harness.transport()
    CONF.set_override("rabbit_qos_prefetch_count", 5, group="oslo_messaging_rabbit")
    try:
        ep = harness.endpoint()
        consumer = harness.consumer(ep, threads=2)
        client = harness.client()
        total = 30
        ctxt = harness.context()
        for n in range(total):
            client.cast(ctxt, "slow", value=n)

        _wait(lambda: consumer.in_hand() == 5, "the consumer to hold 5")
        _wait(lambda: len(ep.started) == 2, "both workers to be busy")
        counts = _wait_queue(broker, harness.topic,
                             lambda ready, unacked: ready + unacked == total,
                             f"all {total} casts to reach the queue")
        if counts is not None:
            ready, unacked = counts
            assert unacked <= 5
            assert ready >= total - 5
        assert consumer.in_hand() <= 5
        assert consumer.delivered <= 5
        assert consumer.acknowledged == 0

        ep.gate.set()
        _wait(lambda: len(ep.done) == total, f"all {total} handled")
        _wait(lambda: consumer.acknowledged == total, f"{total} acknowledgements")
        assert sorted(ep.done) == list(range(total))
        assert consumer.delivered == total
        assert consumer.in_hand() == 0
        _wait_queue(broker, harness.topic,
                    lambda ready, unacked: (ready, unacked) == (0, 0),
                    "the topic queue to be empty")
    finally:
        harness.close()  # its connection was made with the override
        CONF.clear_override("rabbit_qos_prefetch_count", group="oslo_messaging_rabbit")


# -- 5. calls: replies and remote errors ---------------------------------------------
def test_calls_get_replies_and_remote_errors(harness, broker):
    messaging = harness.messaging
    ep = harness.endpoint()
    consumer = harness.consumer(ep, inline=("compute_node_update",))
    client = harness.client().prepare(timeout=10)
    ctxt = harness.context()

    assert client.call(ctxt, "echo", value=3) == 3
    assert client.call(ctxt, "echo", value={"a": [1, 2]}) == {"a": [1, 2]}

    # Not @expose: the dispatcher's NoSuchMethod, sent back as a remote
    # error (oslo.messaging's own exceptions are not in the transport's
    # allowed_remote_exmods, so the client sees RemoteError naming it).
    with pytest.raises(messaging.RemoteError) as info:
        client.call(ctxt, "hidden", value=1)
    assert info.value.exc_type == "NoSuchMethod"
    assert "hidden" in info.value.value
    with pytest.raises(messaging.RemoteError) as info:
        client.call(ctxt, "no_such_method")
    assert info.value.exc_type == "NoSuchMethod"
    assert client.call(ctxt, "echo", value=4) == 4, "still serving"

    # A major version the endpoint (2.10) does not implement.
    newer = harness.client(version="3.0").prepare(timeout=10)
    with pytest.raises(messaging.RemoteError) as info:
        newer.call(ctxt, "echo", value=5)
    assert info.value.exc_type == "UnsupportedVersion"
    assert client.call(ctxt, "echo", value=6) == 6, "still serving"

    _wait(lambda: consumer.acknowledged == 7, "every call acknowledged")
    assert consumer.delivered == 7
    assert consumer.in_hand() == 0
    _wait_queue(broker, harness.topic, lambda ready, unacked: (ready, unacked) == (0, 0),
                "the topic queue to be empty")


# -- 6. malformed inline casts ------------------------------------------------------
def test_malformed_inline_cast_is_logged_dropped_and_acknowledged(harness, broker, caplog):
    caplog.set_level("ERROR", logger="nova_sched.scheduler.wire.topic_consumer")
    ep = harness.endpoint()
    consumer = harness.consumer(ep, inline=("compute_node_update",))
    client = harness.client()
    ctxt = harness.context()

    client.cast(ctxt, "compute_node_update", node={"host": "bad"})
    client.cast(ctxt, "compute_node_update", compute_node={"host": "good"})

    _wait(lambda: ep.reports, "the good report")
    _wait(lambda: consumer.acknowledged == 2, "both casts acknowledged")
    assert [report for report, _ in ep.reports] == [{"host": "good"}]
    assert consumer.delivered == 2
    assert consumer.in_hand() == 0
    failures = [r for r in caplog.records
                if r.name == "nova_sched.scheduler.wire.topic_consumer"
                and "compute_node_update cast failed" in r.getMessage()]
    assert len(failures) == 1
    assert failures[0].exc_info and failures[0].exc_info[0] is TypeError
    _wait_queue(broker, harness.topic, lambda ready, unacked: (ready, unacked) == (0, 0),
                "the topic queue to be empty")


# -- 7. stop() ------------------------------------------------------------------------
def test_stop_finishes_running_handler_and_returns_the_rest(harness, broker):
    ep_a = harness.endpoint()
    consumer_a = harness.consumer(ep_a, server="daemon-a", threads=1)
    client = harness.client()
    ctxt = harness.context()
    for n in (1, 2, 3):
        client.cast(ctxt, "slow", value=n)

    # 1 runs on the only worker; 2 and 3 are taken, waiting for it.
    _wait(lambda: [v for v, _ in ep_a.started] == [1], "the first handler to start")
    _wait(lambda: consumer_a.delivered == 3 and consumer_a.in_hand() == 3,
          "all three taken")

    stopper = threading.Thread(target=consumer_a.stop, kwargs={"timeout": 20},
                               name="test-stopper", daemon=True)
    stopper.start()
    # stop() sets this first thing; no public sign of it before it returns.
    _wait(consumer_a._stopping.is_set, "stop() to begin")
    ep_a.gate.set()
    stopper.join(30)
    assert not stopper.is_alive(), "stop() did not return"

    assert ep_a.done == [1]
    assert [v for v, _ in ep_a.started] == [1], "2 and 3 must not start"
    assert consumer_a.acknowledged == 1
    assert consumer_a.in_hand() == 0
    assert consumer_a.connection is None
    _wait_queue(broker, harness.topic, lambda ready, unacked: (ready, unacked) == (2, 0),
                "2 and 3 back in the queue")

    ep_b = harness.endpoint(gate_open=True)
    consumer_b = harness.consumer(ep_b, server="daemon-b")
    _wait(lambda: len(ep_b.done) == 2, "daemon B to handle 2 and 3")
    _wait(lambda: consumer_b.acknowledged == 2, "daemon B's acknowledgements")
    _wait_queue(broker, harness.topic, lambda ready, unacked: (ready, unacked) == (0, 0),
                "the topic queue to be empty")
    assert sorted(ep_b.done) == [2, 3]
    assert consumer_b.delivered == 2, "1 was acknowledged: never redelivered"


# -- 8. redelivered requests: counted, alone, given up past the limit ----------------
class _ScriptedGuard:
    """A RedeliveryGuard whose start counts come from a script: the n-th
    redelivered request started is told it has been begun ``counts[n]``
    times (as if earlier daemons had died handling it)."""

    def __init__(self, limit, counts, endpoint):
        self._limit = limit
        self._counts = list(counts)
        self.endpoint = endpoint
        self.started = []
        self.given_up = []
        self.forgotten = []

    def limit(self):
        return self._limit

    def starts(self, message_id, method):
        # Alone: no other handler is running while this one starts.
        with self.endpoint.lock:
            running = len(self.endpoint.started) - len(self.endpoint.done)
        self.started.append((message_id, method, running))
        return self._counts.pop(0)

    def handled(self, message_id):
        self.forgotten.append(message_id)

    def give_up(self, ctxt, method, args, starts, broker_count):
        self.given_up.append((method, args, starts))


def _stop_before_it_starts_the_rest(consumer, ep) -> None:
    """Stop ``consumer`` while ``ep`` holds its ``slow`` request in hand,
    then let that one finish: what it took and had not started goes back
    to the queue, delivered again to the next consumer (as if it died)."""
    stopper = threading.Thread(target=consumer.stop, kwargs={"timeout": 20},
                               daemon=True)
    stopper.start()
    _wait(consumer._stopping.is_set, "stop() to begin")
    ep.gate.set()
    stopper.join(30)


def test_redelivered_requests_are_counted_run_alone_and_given_up_past_the_limit(
        harness, broker):
    """Daemon A takes two requests and stops before starting them (as if it
    had died): daemon B gets both back, redelivered. Each is counted by the
    guard and starts with no other handler running; the one whose count is
    past the limit is given up, not handled; both are acknowledged. A
    redelivered compute report is dropped: the node's next supersedes it."""
    ep_a = harness.endpoint()
    consumer_a = harness.consumer(ep_a, server="daemon-a", threads=1)
    client = harness.client()
    ctxt = harness.context()
    client.cast(ctxt, "slow", value="first")
    _wait(lambda: [v for v, _ in ep_a.started] == ["first"], "A to start the first")
    for value in ("second", "third"):
        client.cast(ctxt, "slow", value=value)
    client.cast(ctxt, "compute_node_update", compute_node={"host": "h1"})
    _wait(lambda: consumer_a.delivered == 4, "A to take all four")
    _stop_before_it_starts_the_rest(consumer_a, ep_a)
    _wait_queue(broker, harness.topic, lambda ready, unacked: (ready, unacked) == (3, 0),
                "two requests and the report back in the queue")

    ep_b = harness.endpoint(gate_open=True)
    guard = _ScriptedGuard(limit=2, counts=[3, 1], endpoint=ep_b)
    consumer_b = harness.consumer(ep_b, server="daemon-b", guard=guard,
                                  inline=("compute_node_update",))
    _wait(lambda: len(guard.given_up) + len(ep_b.done) == 2,
          "B to give up one request and handle the other")
    _wait(lambda: consumer_b.acknowledged == 3, "B's acknowledgements")
    _wait_queue(broker, harness.topic, lambda ready, unacked: (ready, unacked) == (0, 0),
                "the topic queue to be empty")
    assert [(m, running) for _, m, running in guard.started] == [("slow", 0)] * 2
    (method, args, count), = guard.given_up
    assert (method, count) == ("slow", 3)
    assert ep_b.done == [v for v in ("second", "third") if v != args["value"]]
    assert ep_b.reports == [], "a redelivered report is not applied"
    assert consumer_b.redelivered == 3 and consumer_b.given_up == 1
    assert len(guard.forgotten) == 2, "both counts forgotten once done"


def test_what_handlers_left_for_later_is_finished_before_a_request_delivered_again(
        harness, broker):
    """A request delivered again may be a poison that kills the daemon
    handling it: the idle hook finishes what earlier handlers held for
    later (a boot's cast record and its message) before it starts, so that
    their requests are not handled a second time if it does."""
    order: list[str] = []

    class Guard(_ScriptedGuard):
        def starts(self, message_id, method):
            order.append(f"redelivered {method}")
            return super().starts(message_id, method)

    ep_a = harness.endpoint()
    consumer_a = harness.consumer(ep_a, server="daemon-a", threads=1)
    client = harness.client()
    for value in ("first", "second"):
        client.cast(harness.context(), "slow", value=value)
    _wait(lambda: consumer_a.delivered == 2, "A to take both")

    ep_b = harness.endpoint(gate_open=True)
    idle: list[int] = []
    letting_go = _letting_go(ep_b, idle)

    def on_idle():
        order.append("idle")
        letting_go()

    consumer_b = harness.consumer(ep_b, server="daemon-b", threads=1,
                                  guard=Guard(limit=2, counts=[1], endpoint=ep_b),
                                  on_idle=on_idle, idle_grace=30.0)
    client.prepare(server="daemon-b").cast(harness.context(), "later", value="held")
    _wait(lambda: ep_b.done == ["held"], "B to hold a message for later")
    assert order == [] and consumer_b.acknowledged == 0, "within the idle grace"

    _stop_before_it_starts_the_rest(consumer_a, ep_a)
    _wait(lambda: "second" in ep_b.done, "B to handle A's second request, delivered again")
    assert order == ["idle", "redelivered slow"]
    assert idle == [1]
    _wait(lambda: consumer_b.acknowledged == 2, "both of B's messages acknowledged")


# -- 7. failing over ---------------------------------------------------------------
def test_a_topic_queue_the_broker_cannot_find_while_failing_over_keeps_its_requests(
        harness, broker, monkeypatch):
    """A daemon whose broker node dies consumes again through another, and
    declares its queues again there. RabbitMQ answers 404 to the declare of
    a durable queue it cannot reach ("home node ... is down or
    inaccessible", "failed to perform operation on queue ... due to
    timeout"). The topic's queue then still holds every request waiting
    and every one the dead connection held: the consumer must declare it
    again later, never delete it.

    The window is forced: the connection is cut with requests held and
    waiting, and the first declare of the topic's queue after it answers
    404 as RabbitMQ would."""
    import amqp
    import kombu

    from nova_sched.conf import CONF

    harness.transport()  # registers the rabbit driver's options on CONF
    for name, value in (("rabbit_quorum_queue", True), ("rabbit_qos_prefetch_count", 5),
                        ("kombu_reconnect_delay", 0.2)):
        CONF.set_override(name, value, group="oslo_messaging_rabbit")
    # Quorum queues want a durable exchange; the module's other tests made
    # the default one transient on this vhost.
    CONF.set_override("control_exchange", f"ex_{harness.topic}")
    refused: list[str] = []
    armed = threading.Event()
    declare = kombu.Queue.declare

    def declare_once_refused(queue, *args, **kwargs):
        if queue.name == harness.topic and armed.is_set():
            armed.clear()
            refused.append(queue.name)
            raise amqp.exceptions.NotFound(
                f"NOT_FOUND - failed to perform operation on queue '{queue.name}' "
                "due to timeout", (50, 10), reply_code=404)
        return declare(queue, *args, **kwargs)

    monkeypatch.setattr(kombu.Queue, "declare", declare_once_refused)
    try:
        ep = harness.endpoint()
        consumer = harness.consumer(ep, threads=2)
        client = harness.client()
        total = 30
        for n in range(total):
            client.cast(harness.context(), "slow", value=n)
        _wait(lambda: consumer.in_hand() == 5 and len(ep.started) == 2,
              "the consumer to hold 5, two of them started")
        _wait_queue(broker, harness.topic, lambda ready, unacked: ready == total - 5,
                    "the other 25 to wait in the queue")

        # The node dies under the consumer: its socket goes, and with it
        # the 5 it held return to the queue.
        armed.set()
        consumer.connection.connection.sock.shutdown(socket.SHUT_RDWR)
        _wait(lambda: refused, "the declare after the failover to be refused")
        _wait(lambda: consumer.reconnects >= 1 and consumer.problem() is None,
              "the consumer to consume again")

        ep.gate.set()
        # The two started on the lost connection finish as well; each of the
        # 30 is handled at least once, whatever was delivered again.
        _wait(lambda: set(ep.done) == set(range(total)),
              f"all {total} requests handled", timeout=30)
        _wait_queue(broker, harness.topic,
                    lambda ready, unacked: (ready, unacked) == (0, 0),
                    "the topic queue to be empty")
    finally:
        harness.close()  # its connections were made with the overrides
        for name in ("rabbit_quorum_queue", "rabbit_qos_prefetch_count",
                     "kombu_reconnect_delay"):
            CONF.clear_override(name, group="oslo_messaging_rabbit")
        CONF.clear_override("control_exchange")
