"""pyamqp_adapter on the py-amqp installed: the private attributes it
relies on are still there and still mean what it takes them to mean.

A py-amqp TCP transport is connected to a socket of the test's, which
sends it AMQP frames; the test counts the transport's socket reads.
Should a release change ``TCPTransport._quick_recv`` or
``TCPTransport._read_buffer``, these fail naming it
(``run_tests.sh`` runs them with the oldest and the newest amqp allowed).
"""

from __future__ import annotations

import importlib.metadata
import socket
import struct
import threading

import amqp
import amqp.transport
import kombu
import pytest

from nova_sched.scheduler.wire import pyamqp_adapter

AMQP = importlib.metadata.version("amqp")
CHANGED = (f"py-amqp {AMQP} changed what nova_sched/scheduler/wire/pyamqp_adapter.py "
           f"relies on (TCPTransport._quick_recv, TCPTransport._read_buffer)")


def _frame(payload: bytes, channel: int = 1) -> bytes:
    # A method frame: type 1, channel, size, payload, end marker 0xCE.
    return struct.pack(">BHI", 1, channel, len(payload)) + payload + b"\xce"


@pytest.fixture
def broker_socket():
    """A listening socket and a way to send bytes to what connects to it."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    ready = threading.Event()

    def accept():
        peer, _ = listener.accept()
        peer.recv(8)  # py-amqp's protocol header
        accepted.append(peer)
        ready.set()

    threading.Thread(target=accept, daemon=True).start()

    def send(data: bytes) -> None:
        assert ready.wait(5), "the transport never connected"
        accepted[0].sendall(data)

    try:
        yield listener.getsockname()[1], send
    finally:
        for peer in accepted:
            peer.close()
        listener.close()


def _connected_transport(port: int, counted: list[int]):
    transport = amqp.transport.TCPTransport(f"127.0.0.1:{port}", connect_timeout=5)
    transport.connect()
    recv = getattr(transport, "_quick_recv", None)
    assert recv is not None, CHANGED

    def counting(n):
        counted.append(n)
        return recv(n)

    transport._quick_recv = counting
    return transport


def _read_all(transport, count: int) -> list[bytes]:
    frames = []
    with transport.having_timeout(5):
        for _ in range(count):
            frame_type, channel, payload = transport.read_frame()
            frames.append(bytes(payload))
    return frames


def test_frames_read_exactly_without_the_adapter(broker_socket):
    """The baseline the adapter changes: three socket reads a frame."""
    port, send = broker_socket
    reads: list[int] = []
    transport = _connected_transport(port, reads)
    payloads = [f"message {n}".encode() * 10 for n in range(20)]
    send(b"".join(_frame(p) for p in payloads))
    assert _read_all(transport, 20) == payloads
    assert len(reads) == 60, f"{CHANGED}: {len(reads)} reads for 20 frames"
    transport.close()


def test_reading_ahead_takes_many_frames_per_socket_read(broker_socket):
    port, send = broker_socket
    reads: list[int] = []
    transport = _connected_transport(port, reads)
    assert pyamqp_adapter.install(transport), CHANGED
    assert pyamqp_adapter.install(transport), "installing twice changes nothing"
    payloads = [f"message {n}".encode() * 10 for n in range(20)]
    send(b"".join(_frame(p) for p in payloads))
    assert _read_all(transport, 20) == payloads, CHANGED
    assert len(reads) <= 3, f"{CHANGED}: {len(reads)} reads for 20 frames"
    assert max(reads) >= pyamqp_adapter.READ_AHEAD
    transport.close()


class _Connection:
    """What BufferedFrames needs of py-amqp's Connection: its transport and
    ``blocking_read(timeout)``, which reads one frame and handles it."""

    def __init__(self, transport):
        self.transport = transport
        self.frames: list[bytes] = []

    def blocking_read(self, timeout=None):
        with self.transport.having_timeout(timeout):
            self.frames.append(bytes(self.transport.read_frame()[2]))


def test_buffered_frames_are_handled_without_reading_the_socket(broker_socket):
    port, send = broker_socket
    reads: list[int] = []
    transport = _connected_transport(port, reads)
    assert pyamqp_adapter.install(transport), CHANGED
    whole = b"".join(_frame(f"m{n}".encode() * 50) for n in range(5))
    half = _frame(b"the last one" * 50)[:300]
    send(whole + half)
    connection = _Connection(transport)
    connection.blocking_read(5)  # the first, waited for: reads ahead
    buffered = pyamqp_adapter.BufferedFrames(connection)
    reads_before = len(reads)
    handled = 0
    while buffered.handle_one():
        handled += 1
    assert handled == 4, f"{CHANGED}: {handled} of 4 buffered frames handled"
    assert len(reads) == reads_before, "a buffered frame read the socket"
    assert connection.frames == [f"m{n}".encode() * 50 for n in range(5)]
    assert not buffered.handle_one(), "half a frame is not handled"
    transport.close()


def test_py_amqp_connections_still_read_one_frame_with_blocking_read():
    assert "timeout" in amqp.Connection.blocking_read.__code__.co_varnames, CHANGED


def test_other_transports_are_left_as_they_are():
    with kombu.Connection("memory:///") as conn:
        conn.connect()
        assert pyamqp_adapter.read_ahead(conn) is None
