"""The daemon's own publishes: what oslo.messaging's servers read."""

from __future__ import annotations

import struct
import threading
import time

import oslo_messaging as messaging

from nova_sched import rpc
from nova_sched.compute.rpcapi import ComputeAPI
from nova_sched.conf import CONF

WAIT = 10


class _Compute:
    target = messaging.Target(version="2.37")

    def __init__(self):
        self.calls: list[tuple] = []
        self.arrived = threading.Event()

    @messaging.expose
    def run_instance(self, ctxt, **kwargs):
        self.calls.append((ctxt, kwargs))
        self.arrived.set()


def _serve(transport, compute: _Compute, host: str):
    server = rpc.get_server(transport,
                            messaging.Target(topic=CONF.compute_topic, server=host),
                            [compute])
    server.start()
    return server


def test_the_compute_cast_is_read_by_an_oslo_messaging_server(memory_transport):
    """The cast a compute node's oslo.messaging server receives: method,
    version 2.37, every argument, the caller's context."""
    compute = _Compute()
    server = _serve(memory_transport, compute, "node-1")
    api = ComputeAPI(memory_transport)
    assert api._publisher is not None, "RabbitMQ and kombu's memory broker: own publisher"
    ctxt = rpc.RequestContext.from_wire({"request_id": "req-c1", "project_id": "p1"})
    try:
        api.run_instance(ctxt, instance={"uuid": "u-1", "host": "node-1"}, host="node-1",
                         request_spec={"instance_uuids": ["u-1"]},
                         filter_properties={"retry": {"num_attempts": 1}},
                         requested_networks=None, injected_files=[["/etc/x", "data"]],
                         admin_password="pw", is_first_time=True, node="node-1")
        assert compute.arrived.wait(WAIT)
    finally:
        server.stop()
        server.wait()
        api.close()
    (got_ctxt, kwargs), = compute.calls
    assert got_ctxt.request_id == "req-c1" and got_ctxt.project_id == "p1"
    assert kwargs == {
        "instance": {"uuid": "u-1", "host": "node-1"},
        "request_spec": {"instance_uuids": ["u-1"]},
        "filter_properties": {"retry": {"num_attempts": 1}},
        "requested_networks": None, "injected_files": [["/etc/x", "data"]],
        "admin_password": "pw", "is_first_time": True, "node": "node-1",
        "legacy_bdm_in_spec": True}


def test_a_failed_publish_is_tried_again_until_it_goes(memory_transport, monkeypatch):
    compute = _Compute()
    server = _serve(memory_transport, compute, "node-2")
    api = ComputeAPI(memory_transport)
    monkeypatch.setattr(api._publisher.settings, "reconnect_delay", 0.01)
    real, failures = api._publisher._write, []

    def flaky(waiting):
        if len(failures) < 3:
            failures.append(list(waiting))
            raise ConnectionError("broker away")
        return real(waiting)

    monkeypatch.setattr(api._publisher, "_write", flaky)
    started = time.monotonic()
    try:
        api.run_instance(rpc.admin_context(), instance={"uuid": "u-2"}, host="node-2",
                         request_spec={}, filter_properties={}, requested_networks=None,
                         injected_files=[], admin_password="", is_first_time=True)
        assert compute.arrived.wait(WAIT)
    finally:
        server.stop()
        server.wait()
        api.close()
    assert len(failures) == 3
    assert time.monotonic() - started < WAIT
    assert len(compute.calls) == 1


def test_confirms_count_what_the_broker_took():
    """Acks of one or many messages, in order or not, and nacks: what was
    taken is known message by message."""
    from nova_sched.scheduler.wire.publisher import _Confirms

    confirms = _Confirms()
    confirms.published = 8
    confirms.ack(2, multiple=True)          # 1-2
    confirms.ack(4, multiple=False)         # 4 before 3
    assert confirms.settled == 2
    confirms.nack(3, multiple=False)        # 3 refused
    assert confirms.settled == 4
    confirms.nack(6, multiple=True)         # 5-6 refused
    confirms.ack(8, multiple=False)         # 8 taken, 7 not heard of
    assert confirms.settled == 6
    assert confirms.taken(1, 8) == {1, 2, 4, 8}
    assert confirms.taken(5, 8) == {8}
    assert confirms.taken(1, 4) == {1, 2, 4}
    assert confirms.taken(7, 7) == set()


class _FakeRabbit:
    """A publisher on a stand-in for py-amqp's connection: each connection
    made notes the bodies written to it (``sent``, one list a connection)
    and, when its events are drained, confirms every message
    (``confirm_first`` None) or the first ``confirm_first`` of them before
    failing as a reset connection does."""

    def __init__(self, memory_transport, monkeypatch, rounds):
        from nova_sched.scheduler.wire import publisher as publisher_module
        from nova_sched.scheduler.wire.publisher import Publisher, _Confirms

        self.sent: list[list[str]] = []
        self.drains = 0
        fake = self

        class Channel:
            channel_id = 1

            def __init__(self, confirm_first):
                self.events = {"basic_ack": set(), "basic_nack": set()}
                self.confirm_first = confirm_first
                self.bodies: list[str] = []
                fake.sent.append(self.bodies)
                self.connection = self
                self.transport = self
                self.frame_max = 131072
                self.bytes_sent = 0

            def write(self, data: bytes) -> None:
                # The bodies of the body frames (type 3) written.
                while data:
                    kind, _channel, size = struct.unpack_from(">BHI", data)
                    if kind == 3:
                        self.bodies.append(data[7:7 + size].decode())
                    data = data[8 + size:]

        class Conn:
            def __init__(self, channel, confirms):
                self.channel, self.confirms = channel, confirms

            def drain_events(self, timeout):
                fake.drains += 1
                if self.channel.confirm_first is None:
                    self.confirms.ack(self.confirms.published, multiple=True)
                    return
                self.confirms.ack(self.channel.confirm_first, multiple=True)
                raise ConnectionError("connection reset by peer")

        url = messaging.TransportURL.parse(memory_transport.conf, "kombu+memory:////")
        self.publisher = publisher = Publisher(memory_transport.conf, url, "test")
        monkeypatch.setattr(publisher.settings, "reconnect_delay", 0.01)
        rounds = iter(rounds)

        def connect(what):
            if publisher._conn is None:
                confirms = _Confirms()
                channel = Channel(next(rounds))
                publisher._conn, publisher._channel = Conn(channel, confirms), channel
                publisher._confirms = confirms

        monkeypatch.setattr(publisher, "_connect", connect)
        monkeypatch.setattr(publisher, "_declare", lambda message: None)
        monkeypatch.setattr(publisher_module, "discard", lambda conn: None)


def _messages(count):
    from nova_sched.scheduler.wire.publisher import Outgoing

    return [Outgoing("ex", "rk", f"m{n}", f"message {n}") for n in range(count)]


def test_a_connection_lost_midway_sends_again_only_what_was_not_confirmed(
        memory_transport, monkeypatch):
    """The broker confirmed two of four messages before the connection
    failed: the next connection gets the other two, in order."""
    fake = _FakeRabbit(memory_transport, monkeypatch, [2, None])
    try:
        fake.publisher.publish_many(_messages(4))
    finally:
        fake.publisher.close()
    assert fake.sent == [["m0", "m1", "m2", "m3"], ["m2", "m3"]]


def test_a_send_returns_before_the_confirms_which_its_wait_reads(
        memory_transport, monkeypatch):
    """The compute cast's confirm is read after the next decision: sending
    writes the messages and reads nothing; ``wait`` reads the confirms, and
    another send meanwhile does not disturb either's."""
    fake = _FakeRabbit(memory_transport, monkeypatch, [None])
    done: list[str] = []
    try:
        first = fake.publisher.send(_messages(2), done=lambda: done.append("first"))
        second = fake.publisher.send(_messages(1), done=lambda: done.append("second"))
        assert fake.sent == [["m0", "m1", "m0"]]
        assert fake.drains == 0 and done == []
        second.wait()
        first.wait()   # the drain for the second read the first's confirms too
        first.wait()   # once through, a wait is nothing
        assert fake.drains == 1 and done == ["second", "first"]
    finally:
        fake.publisher.close()
    assert fake.sent == [["m0", "m1", "m0"]]


def test_messages_sent_on_a_connection_lost_before_their_wait_go_again(
        memory_transport, monkeypatch):
    """Another thread's failure (or the heartbeat's) replaced the
    connection while a cast waited for its confirm to be read: the wait
    sends it again on the new connection, not lost, the new one kept."""
    fake = _FakeRabbit(memory_transport, monkeypatch, [None, None])
    try:
        pending = fake.publisher.send(_messages(2))
        with fake.publisher._lock:
            fake.publisher._drop()
        pending.wait()
        fake.publisher.publish_many(_messages(1))
    finally:
        fake.publisher.close()
    assert fake.sent == [["m0", "m1"], ["m0", "m1", "m0"]]


def test_a_send_after_close_is_refused_and_its_watch_let_go(memory_transport):
    from nova_sched.scheduler.wire.publisher import Publisher

    url = messaging.TransportURL.parse(memory_transport.conf, "kombu+memory:////")
    publisher = Publisher(memory_transport.conf, url, "test")
    publisher.close()
    done: list[bool] = []
    try:
        publisher.send(_messages(1), done=lambda: done.append(True))
    except messaging.MessageDeliveryFailure as err:
        assert "the publisher is closed" in str(err)
    else:
        raise AssertionError("a closed publisher sent a message")
    assert done == [True]
