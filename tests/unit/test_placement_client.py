"""PlacementClient: nova's [placement] section works as it is, microversions
are sent, an unreachable Placement is waited for then reported."""

from __future__ import annotations

import http.server
import json
import socket
import threading

import pytest

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.placement import PlacementClient


class _Placement(http.server.BaseHTTPRequestHandler):
    seen: list = []

    def log_message(self, *args):
        pass

    def _answer(self, status, body=None):
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.seen.append((self.command, self.path, self.headers.get("X-Auth-Token"),
                          self.headers.get("OpenStack-API-Version")))
        if self.path.startswith("/allocation_candidates"):
            self._answer(200, {"allocation_requests": [], "provider_summaries": {
                "rp1": {"resources": {"VCPU": {"capacity": 8, "used": 3}}}}})
        else:
            self._answer(200, {"allocations": {}, "consumer_generation": None})

    def do_PUT(self):
        length = int(self.headers.get("Content-Length", 0))
        self.seen.append((self.command, self.path, json.loads(self.rfile.read(length)),
                          self.headers.get("OpenStack-API-Version")))
        self._answer(409, {"errors": [{"code": "placement.undefined_code",
                                       "detail": "Unable to allocate inventory"}]})


@pytest.fixture
def server():
    _Placement.seen = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Placement)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()


def _nova_section(port):
    """nova's own [placement] section with keystoneauth's admin_token plugin."""
    from keystoneauth1 import loading as ks_loading

    CONF.set_override("auth_type", "admin_token", "placement")
    # What keystoneauth registers once it has read auth_type.
    CONF.register_opts(ks_loading.get_auth_plugin_conf_options("admin_token"),
                       group="placement")
    CONF.set_override("endpoint", f"http://127.0.0.1:{port}", "placement")
    CONF.set_override("token", "admin", "placement")


def test_nova_placement_section_and_microversions(server):
    _nova_section(server.server_address[1])
    client = PlacementClient()
    summaries = client.provider_summaries("VCPU:1,MEMORY_MB:1")
    assert summaries == {"rp1": {"VCPU": {"capacity": 8, "used": 3}}}
    resp = client.put_allocations("i1", {"allocations": {}})
    assert resp.status == 409 and "Unable to allocate" in resp.error_detail()
    get, put = _Placement.seen
    assert get[1] == "/allocation_candidates?resources=VCPU:1,MEMORY_MB:1"
    assert get[2] == "admin" and get[3] == "placement 1.36"
    assert put[1] == "/allocations/i1" and put[3] == "placement 1.28"
    assert client.reachable() is None


def test_unreachable_placement_is_waited_for_then_reported():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    _nova_section(port)
    client = PlacementClient(outage_wait=1.5)
    with pytest.raises(exception.PlacementUnavailable, match="ConnectFailure"):
        client.allocations_of("i1")
    assert "ConnectFailure" in client.reachable()


def test_a_placement_that_never_answers_is_unreachable():
    """Accepts the connection, never replies (a hung or paused Placement)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        _nova_section(listener.getsockname()[1])
        CONF.set_override("timeout", 1, "placement")
        client = PlacementClient(outage_wait=1.5)
        with pytest.raises(exception.PlacementUnavailable):
            client.allocations_of("i1")
        assert client.reachable() is not None
