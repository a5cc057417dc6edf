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
    real, failures = api._publisher._send, []

    def flaky(waiting):
        if len(failures) < 3:
            failures.append(list(waiting))
            raise ConnectionError("broker away")
        real(waiting)

    monkeypatch.setattr(api._publisher, "_send", flaky)
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
    assert confirms.taken(1) == {1, 2, 4, 8}
    assert confirms.taken(5) == {8}


def test_a_connection_lost_midway_sends_again_only_what_was_not_confirmed(
        memory_transport, monkeypatch):
    """The broker confirmed two of four messages before the connection
    failed: the next connection gets the other two, in order."""
    from nova_sched.scheduler.wire import publisher as publisher_module
    from nova_sched.scheduler.wire.publisher import Outgoing, Publisher, _Confirms

    sent: list[list[str]] = []

    class Channel:
        """py-amqp's channel as the publisher writes frames to it: the
        bodies of the body frames (type 3) written are noted."""

        channel_id = 1

        def __init__(self, confirm_first: int):
            self.events = {"basic_ack": set(), "basic_nack": set()}
            self.confirm_first = confirm_first
            self.bodies: list[str] = []
            sent.append(self.bodies)
            self.connection = self
            self.transport = self
            self.frame_max = 131072
            self.bytes_sent = 0

        def write(self, data: bytes) -> None:
            while data:
                kind, _channel, size = struct.unpack_from(">BHI", data)
                if kind == 3:
                    self.bodies.append(data[7:7 + size].decode())
                data = data[8 + size:]

    class Conn:
        def __init__(self, channel, confirms):
            self.channel, self.confirms = channel, confirms

        def drain_events(self, timeout):
            if self.channel.confirm_first is None:
                self.confirms.ack(self.confirms.published, multiple=True)
                return
            self.confirms.ack(self.channel.confirm_first, multiple=True)
            raise ConnectionError("connection reset by peer")

    url = messaging.TransportURL.parse(memory_transport.conf, "kombu+memory:////")
    publisher = Publisher(memory_transport.conf, url, "test")
    monkeypatch.setattr(publisher.settings, "reconnect_delay", 0.01)
    rounds = iter([2, None])

    def connect(what):
        if publisher._conn is None:
            confirms = _Confirms()
            channel = Channel(next(rounds))
            publisher._conn, publisher._channel = Conn(channel, confirms), channel
            publisher._confirms = confirms

    monkeypatch.setattr(publisher, "_connect", connect)
    monkeypatch.setattr(publisher, "_declare", lambda message: None)
    monkeypatch.setattr(publisher_module, "discard", lambda conn: None)
    try:
        publisher.publish_many([Outgoing("ex", "rk", f"m{n}", f"message {n}")
                                for n in range(4)])
    finally:
        publisher.close()
    assert sent == [["m0", "m1", "m2", "m3"], ["m2", "m3"]]
