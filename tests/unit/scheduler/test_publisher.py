"""The daemon's own publishes: what oslo.messaging's servers read."""

from __future__ import annotations

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
