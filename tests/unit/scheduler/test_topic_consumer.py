"""TopicConsumer without a broker: its wire format, its broker settings, and
the consumer itself on kombu's in-memory transport.

The consumer stands on kombu's and oslo.messaging's public APIs and writes
oslo.messaging's wire format itself. Three things here would break quietly
on a new release of either library, so each has a test that names what
changed:

- the wire format (envelope, replies, remote exceptions, version rules)
  and the queue arguments are compared with oslo.messaging's own code for
  them, on the release installed (the only place this project reads
  oslo.messaging's private modules: to check what it copies);
- the ``[oslo_messaging_rabbit]`` options the consumer reads must still be
  registered by oslo.messaging's rabbit driver;
- an oslo.messaging RPC client (a cast, a call, a remote error, a call
  monitor's heartbeats) must be served by the consumer end to end.

``run_tests.sh`` runs this module with the oldest and the newest releases
of oslo.messaging, kombu and amqp that pyproject.toml allows.
"""

from __future__ import annotations

import collections
import datetime
import importlib
import importlib.metadata
import inspect
import json
import math
import os
import sys
import threading
import time
import uuid

import kombu
import oslo_messaging as messaging
import pytest
from oslo_config import cfg

from nova_sched import exception, rpc
from nova_sched.conf import CONF
from nova_sched.scheduler.wire import topic_consumer
from nova_sched.scheduler.wire.broker import RabbitSettings
from nova_sched.scheduler.wire.rpc_envelope import (pack, pack_text, remote_failure,
                                                    reply_message, unique_ids, unpack,
                                                    version_is_compatible)
from nova_sched.scheduler.wire.topic_consumer import TopicConsumer

MEMORY_URL = "kombu+memory:////"
WAIT = 10
OSLO_MESSAGING = importlib.metadata.version("oslo.messaging")


def _oslo_private(module: str, name: str):
    """``name`` from one of oslo.messaging's private modules, or a failure
    that says which release dropped it and what to check instead."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        pytest.fail(f"oslo.messaging {OSLO_MESSAGING} has no {module}.{name} any "
                    f"more: read what its rabbit driver does now and compare "
                    f"nova_sched/scheduler/wire/broker.py and rpc_envelope.py with it by hand")


def _rabbit_conf(url: str = "rabbit://", **options):
    """A private ConfigOpts with oslo.messaging's rabbit options registered
    (its driver registers them when a transport is made) and set."""
    conf = cfg.ConfigOpts()
    messaging.get_rpc_transport(conf, url=url).cleanup()
    for name, value in options.items():
        conf.set_override(name, value, group="oslo_messaging_rabbit")
    return conf, messaging.TransportURL.parse(conf, url)


# -- the wire format -------------------------------------------------------------
def test_envelope_round_trip_and_older_bodies():
    message = {"method": "echo", "args": {"value": [1, "two"]}, "version": "2.10"}
    packed = pack(message)
    assert packed["oslo.version"] == "2.0"
    assert isinstance(packed["oslo.message"], str)
    assert unpack(packed) == message
    # Senders from before the envelope: the bare dict as it came.
    assert unpack(message) == message
    assert unpack("a reply of old") == "a reply of old"
    with pytest.raises(ValueError, match="envelope version 3.0"):
        unpack({"oslo.version": "3.0", "oslo.message": "{}"})


def test_envelope_text_is_the_envelope_a_serializer_writes():
    # Sent as JSON text, as kombu's json serializer would write pack()'s
    # dict; quotes, non-ASCII text and a datetime (oslo's to_primitive)
    # inside the message included.
    message = {"method": "run_instance", "args": {"name": 'say "hi" \u00e9',
                                                    "when": datetime.datetime(2026, 12, 2, 17)},
               "_context_roles": ["member"]}
    text = pack_text(message)
    assert isinstance(text, str)
    sent, written = json.loads(text), pack(message)
    assert sent.keys() == written.keys() and sent["oslo.version"] == "2.0"
    assert unpack(sent) == unpack(written)
    assert unpack(sent)["args"]["when"] == "2026-12-02T17:00:00.000000"


def test_envelope_text_of_what_orjson_cannot_write():
    # NumPy's numbers (a weight), keys JSON has no type for, an integer
    # beyond 64 bits: the same document as oslo's serializer writes.
    import numpy as np

    for message in ({"weight": np.float64(1.5)},
                    {"by_id": {1: "a", 2.5: "b"}},
                    {"big": 2 ** 70, "nested": [{"when": datetime.datetime(2026, 1, 2)}]}):
        assert unpack(json.loads(pack_text(message))) == unpack(pack(message))
    # Read back as oslo's serializer reads what an older sender wrote.
    written = {"oslo.version": "2.0",
               "oslo.message": '{"load": NaN, "big": 1180591620717411303424}'}
    read = unpack(written)
    assert math.isnan(read["load"]) and read["big"] == 2 ** 70


def test_unique_ids_differ_and_look_like_uuid4():
    texts = {unique_ids.text() for _ in range(5000)}
    hexes = {unique_ids.hex() for _ in range(5000)}
    assert len(texts) == 5000 and len(hexes) == 5000
    for text in list(texts)[:50]:
        assert uuid.UUID(text).version == 4 and str(uuid.UUID(text)) == text
    assert all(len(h) == 32 and int(h, 16) >= 0 for h in hexes)
    # A forked child draws its own ids: two daemons forked from one parent
    # must not send the same ones.
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, unique_ids.hex().encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    os.close(write)
    assert child[:20] != unique_ids.hex()[:20]


def test_reply_and_heartbeat_messages():
    reply = unpack(reply_message("m1", result={"a": 1}))
    assert reply["result"] == {"a": 1} and reply["failure"] is None
    assert reply["ending"] is True and reply["_msg_id"] == "m1"
    assert len(reply["_unique_id"]) == 32
    heartbeat = unpack(reply_message("m1", ending=False))
    assert (heartbeat["result"], heartbeat["failure"], heartbeat["ending"]) == (
        None, None, False)
    assert heartbeat["_unique_id"] != reply["_unique_id"]


class _Refused(Exception):
    def __init__(self, reason):
        super().__init__(f"refused: {reason}")
        self.kwargs = {"reason": reason}


def _exc_info(error):
    try:
        raise error
    except Exception:
        return sys.exc_info()


def test_remote_failure_names_the_exception_and_keeps_its_arguments():
    import json

    failure = json.loads(remote_failure(_exc_info(_Refused("no room"))))
    assert failure["class"] == "_Refused"
    assert failure["module"] == __name__
    assert failure["message"] == "refused: no room"
    assert failure["args"] == ["refused: no room"]
    assert failure["kwargs"] == {"reason": "no room"}
    assert failure["tb"][0].startswith("Traceback")
    # Re-raised from a remote one, it is sent as the original again.
    remote = type("NoValidHost_Remote", (Exception,),
                  {"__module__": "nova.exception_Remote"})
    again = json.loads(remote_failure(_exc_info(remote("gone"))))
    assert (again["class"], again["module"]) == ("NoValidHost", "nova.exception")


def test_version_rules():
    assert version_is_compatible("2.10", "2.9")
    assert version_is_compatible("2.10", "2.10")
    assert not version_is_compatible("2.10", "2.11")
    assert not version_is_compatible("2.10", "3.0")
    assert not version_is_compatible("4.5", "3.9")
    assert version_is_compatible("2.10.1", "2.10")
    assert not version_is_compatible("2.10", "2.10.1")
    assert version_is_compatible(None, "9.9")
    assert not version_is_compatible("2.10", None)


def test_wire_format_is_oslo_messagings_own():
    """What the consumer writes and reads is byte for byte what this
    release of oslo.messaging writes and reads."""
    common = "oslo_messaging._drivers.common"
    serialize_msg = _oslo_private(common, "serialize_msg")
    deserialize_msg = _oslo_private(common, "deserialize_msg")
    serialize_remote_exception = _oslo_private(common, "serialize_remote_exception")
    deserialize_remote_exception = _oslo_private(common, "deserialize_remote_exception")
    oslo_version_is_compatible = _oslo_private("oslo_messaging._utils",
                                               "version_is_compatible")
    message = {"method": "select_destinations", "args": {"spec": {"ram": 512}},
               "version": "4.5", "_msg_id": "m", "_unique_id": "u"}
    assert pack(message) == serialize_msg(message)
    assert unpack(serialize_msg(message)) == deserialize_msg(pack(message)) == message
    info = _exc_info(_Refused("no room"))
    assert remote_failure(info) == serialize_remote_exception(info)
    # oslo's client rebuilds the exception from it (here as a RemoteError:
    # the module is not one it may import).
    rebuilt = deserialize_remote_exception(remote_failure(info), [])
    assert isinstance(rebuilt, messaging.RemoteError)
    assert rebuilt.exc_type == "_Refused" and "no room" in rebuilt.value
    for implemented, requested in [("2.10", "2.9"), ("2.10", "2.11"),
                                   ("2.10", "3.0"), ("2.10.1", "2.10"),
                                   ("2.10", "2.10.1"), ("4.5", "4.0")]:
        assert (version_is_compatible(implemented, requested)
                == oslo_version_is_compatible(implemented, requested)), (
            implemented, requested)


# -- the broker settings -----------------------------------------------------------
def test_kombu_urls_from_the_transport_url():
    conf, url = _rabbit_conf("rabbit://u1:p%40ss@h1:5673,u2:p2@h2/vh")
    urls = RabbitSettings(conf, url)._urls.split(";")
    assert sorted(urls) == ["amqp://u1:p%40ss@h1:5673/vh", "amqp://u2:p2@h2:5672/vh"]
    conf, url = _rabbit_conf("rabbit://")
    assert RabbitSettings(conf, url)._urls == "amqp://guest:guest@localhost:5672/"
    conf, url = _rabbit_conf(MEMORY_URL)
    settings = RabbitSettings(conf, url)
    assert settings._urls == "memory:///" and settings.in_memory


def test_the_options_the_consumer_reads_are_oslo_messagings():
    """Each ``[oslo_messaging_rabbit]`` option read with a default must be
    registered by this release's rabbit driver, unless it is one only
    later releases have."""
    conf, _ = _rabbit_conf()
    registered = set(conf.oslo_messaging_rabbit.keys())
    always = {"rabbit_qos_prefetch_count", "heartbeat_timeout_threshold",
              "heartbeat_rate", "kombu_failover_strategy", "rabbit_login_method",
              "rabbit_retry_interval", "rabbit_retry_backoff", "rabbit_interval_max",
              "kombu_reconnect_delay", "kombu_missing_consumer_retry_timeout",
              "kombu_compression", "rabbit_ha_queues", "rabbit_quorum_queue",
              "rabbit_quorum_delivery_limit", "rabbit_transient_queues_ttl",
              "amqp_durable_queues", "amqp_auto_delete", "enable_cancel_on_failover",
              "ssl", "ssl_version", "ssl_key_file", "ssl_cert_file", "ssl_ca_file"}
    missing = always - registered
    assert not missing, (f"oslo.messaging {OSLO_MESSAGING} no longer registers "
                         f"{sorted(missing)} in [oslo_messaging_rabbit]; "
                         f"RabbitSettings reads them")


def test_queue_arguments_follow_the_options():
    conf, url = _rabbit_conf(rabbit_quorum_queue=True, rabbit_quorum_delivery_limit=5,
                             rabbit_transient_queues_ttl=60)
    settings = RabbitSettings(conf, url)
    queues = settings.topic_queues("nova", "scheduler", "host-a")
    assert [q.name for q in queues[:2]] == ["scheduler", "scheduler.host-a"]
    assert queues[2].name.startswith("scheduler_fanout_")
    for queue in queues[:2]:
        assert queue.durable, "quorum queues are durable"
        assert queue.queue_arguments == {"x-queue-type": "quorum",
                                         "x-delivery-limit": 5}
        assert (queue.exchange.name, queue.exchange.type) == ("nova", "topic")
        assert queue.routing_key == queue.name
    fanout = queues[2]
    assert (fanout.exchange.name, fanout.exchange.type) == (
        "scheduler_fanout", "fanout")
    assert fanout.exchange.auto_delete and not fanout.durable
    assert fanout.queue_arguments == {"x-expires": 60000}
    assert settings.prefetch == 64, "nova-sched's default (conf/opts.py)"

    conf, url = _rabbit_conf(rabbit_quorum_queue=True, rabbit_ha_queues=True)
    with pytest.raises(exception.ConfigurationError, match="not both"):
        RabbitSettings(conf, url)


def test_queue_arguments_are_oslo_messagings_own():
    oslo_arguments = _oslo_private("oslo_messaging._drivers.impl_rabbit",
                                   "_get_queue_arguments")
    quorum_config = _oslo_private("oslo_messaging._drivers.impl_rabbit",
                                  "QuorumMemConfig")
    cases = [dict(), dict(rabbit_ha_queues=True, rabbit_transient_queues_ttl=5),
             dict(rabbit_quorum_queue=True, rabbit_quorum_delivery_limit=3),
             dict(amqp_durable_queues=True, rabbit_transient_queues_ttl=7)]
    for options in cases:
        conf, url = _rabbit_conf(**options)
        settings = RabbitSettings(conf, url)
        group = conf.oslo_messaging_rabbit
        limits = quorum_config(group.rabbit_quorum_delivery_limit, 0, 0)
        # Releases with stream fanout queues take one argument more.
        extra = [False] * (len(inspect.signature(oslo_arguments).parameters) - 4)
        assert settings.topic_queue_arguments == oslo_arguments(
            group.rabbit_ha_queues, 0, group.rabbit_quorum_queue, limits,
            *extra), options
        assert settings.fanout_queue_arguments == oslo_arguments(
            group.rabbit_ha_queues, group.rabbit_transient_queues_ttl,
            getattr(group, "rabbit_transient_quorum_queue", False), limits,
            *extra), options


def test_a_transport_of_another_kind_is_refused():
    transport = messaging.get_rpc_transport(CONF, url="fake:")
    try:
        with pytest.raises(exception.ConfigurationError, match="AMQP transport"):
            TopicConsumer(transport, messaging.Target(topic="t", server="s"),
                          object(), rpc.ContextSerializer(), url="fake:")
    finally:
        transport.cleanup()


def test_defer_ack_outside_a_worker_does_nothing():
    topic_consumer.defer_ack()()


# -- the consumer, on kombu's in-memory transport --------------------------------------
class _Endpoint:
    target = messaging.Target(version="2.10")

    def __init__(self):
        self.reports: list[tuple[dict, str]] = []
        self.report_contexts: list = []
        self.gate = threading.Event()
        self.started = threading.Event()

    @messaging.expose
    def compute_node_update(self, context, compute_node):
        self.report_contexts.append(context)
        self.reports.append((compute_node, threading.current_thread().name))

    @messaging.expose
    def echo(self, context, value):
        return {"value": value, "request_id": context.request_id}

    @messaging.expose
    def refuse(self, context, reason):
        raise _Refused(reason)

    @messaging.expose
    def slow(self, context, seconds):
        self.started.set()
        time.sleep(seconds)
        return seconds

    @messaging.expose
    def held(self, context):
        self.started.set()
        self.gate.wait(WAIT)


def _wait(predicate, what):
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.fixture
def served():
    """A started consumer on the in-memory transport, its endpoint and a client."""
    transport = rpc.get_transport(MEMORY_URL)
    # No heartbeats on the in-memory transport (oslo warns about each).
    CONF.set_override("heartbeat_timeout_threshold", 0, group="oslo_messaging_rabbit")
    topic = f"unit_{uuid.uuid4().hex[:8]}"
    endpoint = _Endpoint()
    consumer = TopicConsumer(transport, messaging.Target(topic=topic, server="unit"),
                             endpoint, rpc.ContextSerializer(),
                             inline=("compute_node_update",), threads=2,
                             url=MEMORY_URL)
    consumer.start()
    client = rpc.get_client(transport, messaging.Target(topic=topic, version="2.10"))
    try:
        assert consumer.ready.wait(WAIT)
        yield consumer, endpoint, client
    finally:
        endpoint.gate.set()
        consumer.stop(timeout=WAIT)
        transport.cleanup()


def test_casts_calls_and_remote_errors_over_the_wire(served):
    consumer, endpoint, client = served
    ctxt = rpc.admin_context()
    client.cast(ctxt, "compute_node_update", compute_node={"host": "h1"})
    _wait(lambda: endpoint.reports, "the inline report")
    assert endpoint.reports == [({"host": "h1"}, "topic-consumer")]

    caller = client.prepare(timeout=WAIT)
    answer = caller.call(ctxt, "echo", value=[1, 2])
    assert answer == {"value": [1, 2], "request_id": ctxt.request_id}
    with pytest.raises(messaging.RemoteError) as info:
        caller.call(ctxt, "refuse", reason="no room")
    assert info.value.exc_type == "_Refused" and "no room" in info.value.value
    with pytest.raises(messaging.RemoteError) as info:
        caller.call(ctxt, "no_such_method")
    assert info.value.exc_type == "NoSuchMethod"
    with pytest.raises(messaging.RemoteError) as info:
        client.prepare(version="3.0", timeout=WAIT).call(ctxt, "echo", value=1)
    assert info.value.exc_type == "UnsupportedVersion"
    _wait(lambda: consumer.acknowledged == 5, "five acknowledgements")
    assert consumer.in_hand() == 0 and consumer.dropped_acks == 0
    assert consumer.problem() is None


def test_reports_are_handled_without_building_a_request_context(served, monkeypatch):
    consumer, endpoint, client = served

    def refuse(values):
        raise AssertionError("a report built a RequestContext")
    monkeypatch.setattr(rpc.RequestContext, "from_wire", classmethod(
        lambda cls, values: refuse(values)))
    ctxt = rpc.RequestContext(request_id="req-report", overwrite=False)
    client.cast(ctxt, "compute_node_update", compute_node={"host": "h2"})
    _wait(lambda: endpoint.reports, "the inline report")
    assert endpoint.reports == [({"host": "h2"}, "topic-consumer")]
    # The caller's context as it travelled.
    assert endpoint.report_contexts[0]["request_id"] == "req-report"


def test_bodies_of_every_encoding_a_sender_may_choose_are_read(served):
    # oslo.messaging's JSON (read by orjson), a body kombu compressed, and
    # JSON orjson refuses (a NaN, as Python's json writes it): the same
    # report each time.
    _consumer, endpoint, client = served
    topic = client.target.topic
    report = {"host": "h1", "load": float("nan")}
    envelope = pack({"method": "compute_node_update", "version": "2.10",
                     "args": {"compute_node": report}})
    with kombu.Connection("memory://") as conn:
        producer = conn.Producer()
        for options in ({"serializer": "json"}, {"serializer": "json", "compression": "zlib"}):
            producer.publish(envelope, exchange=CONF.control_exchange,
                             routing_key=topic, **options)
    _wait(lambda: len(endpoint.reports) == 2, "both reports")
    for got, _thread in endpoint.reports:
        assert got["host"] == "h1" and math.isnan(got["load"])


def test_a_request_is_acknowledged_when_its_handler_returns(served):
    consumer, endpoint, client = served
    client.cast(rpc.admin_context(), "held")
    assert endpoint.started.wait(WAIT)
    time.sleep(0.05)
    assert consumer.in_hand() == 1 and consumer.acknowledged == 0
    endpoint.gate.set()
    _wait(lambda: consumer.acknowledged == 1, "the acknowledgement")
    assert consumer.in_hand() == 0


def test_call_monitor_heartbeats_keep_a_long_call_alive(served):
    """oslo.messaging's call monitor gives up on a call after
    ``call_monitor_timeout`` without a heartbeat; the dispatcher sends one
    every half of it through the consumer's replies."""
    _consumer, _endpoint, client = served
    caller = client.prepare(timeout=WAIT, call_monitor_timeout=2)
    assert caller.call(rpc.admin_context(), "slow", seconds=3) == 3


def test_queue_lag_follows_a_burst_to_its_end():
    """Reports wait in the requests' queue: the lag the consumer reports is
    how old what it takes is, so ComputeFilter does not take a live fleet
    for down at the end of a burst, when the queue is short but what is
    taken waited the whole burst."""
    marks = collections.deque()
    rate = 100.0
    # A burst of 2,000 lands at once: 20 s of work ahead.
    assert topic_consumer.queue_lag(marks, 0.0, 0, 2000, rate) == pytest.approx(20.0)
    # 18 s later, 1,800 taken and 200 left: a new message waits 2 s, but
    # what is taken now has waited 18 s.
    lag = topic_consumer.queue_lag(marks, 18.0, 1800, 200, rate)
    assert lag == pytest.approx(18.0)
    # Queue empty: what is taken now was sent just now.
    assert topic_consumer.queue_lag(marks, 21.0, 2000, 0, rate) == 0.0
    assert not marks


def test_queue_lag_of_a_steady_short_queue_is_short():
    marks = collections.deque()
    delivered = 0
    for second in range(30):
        lag = topic_consumer.queue_lag(marks, float(second), delivered, 50, 100.0)
        delivered += 100
        assert lag <= 1.0
