"""py-amqp's plain TCP transport, made to read ahead: the one place nova-sched
uses another library's private API.

Why. py-amqp reads each frame with three exact-size ``recv`` calls
(header, payload, end byte), behind a socket timeout set and reset for
each frame: about twenty system calls per message, each giving up the GIL
and, when the request threads are busy deciding, waiting up to
``sys.getswitchinterval()`` to get it back. Measured on this project's
2-core machines (``bench/README.md``, "The topic consumer on public
APIs"): with two busy threads beside it, a consumer reading through
kombu's public ``drain_events`` alone fell 3.5-4.5 s behind 10 s of 1,000
compute reports a second, where reading ahead kept up. Neither kombu nor
py-amqp has a public way to read more than one frame per system call.

What it touches, in py-amqp 5.1-5.4 (pyproject.toml bounds amqp to the
releases tested): ``TCPTransport._quick_recv`` (the socket's ``recv``,
called by ``TCPTransport._read`` with the bytes still missing; whatever it
returns beyond them ``_read`` keeps in ``_read_buffer`` for the next
frame) and ``TCPTransport._read_buffer`` (bytes read, not yet parsed).
``tests/unit/scheduler/test_pyamqp_adapter.py`` checks both on the
installed py-amqp and names the release if they changed; here a transport
not shaped as expected is left as it is, slower, and said so once.
"""

from __future__ import annotations

import importlib.metadata
import logging

import amqp.transport

LOG = logging.getLogger(__name__)

# Bytes one socket read may take (a compute report is about 2 KB).
READ_AHEAD = 16384

_warned = False


class BufferedFrames:
    """Frames already read from the socket, handled without a system call."""

    def __init__(self, amqp_connection):
        self._connection = amqp_connection
        self._transport = amqp_connection.transport

    def handle_one(self) -> bool:
        """Handle the next frame if it is whole in the read buffer (its
        callbacks run: a message's consumer when it completes one); False,
        having done nothing, when it is not."""
        buffered = self._transport._read_buffer
        # A frame: type (1 byte), channel (2), size (4), payload, end (1).
        if len(buffered) < 8 or len(buffered) < int.from_bytes(buffered[3:7], "big") + 8:
            return False
        # No timeout: the socket is not touched, the frame is all here.
        self._connection.blocking_read(None)
        return True


def read_ahead(kombu_connection) -> BufferedFrames | None:
    """Make the py-amqp TCP transport under an open kombu connection read
    up to READ_AHEAD bytes per ``recv``, and give what that buffers.

    None for other transports (TLS, kombu's in-memory one), which read as
    they do, and for a py-amqp whose transport is not shaped as expected.
    """
    if kombu_connection.transport.driver_type != "amqp":
        return None
    amqp_connection = kombu_connection.connection
    transport = getattr(amqp_connection, "transport", None)
    if type(transport) is not amqp.transport.TCPTransport:
        return None
    if not install(transport):
        return None
    return BufferedFrames(amqp_connection)


def install(transport) -> bool:
    """Make one connected TCPTransport read ahead; False if it cannot be."""
    recv = getattr(transport, "_quick_recv", None)
    if recv is None or not isinstance(getattr(transport, "_read_buffer", None), bytes):
        _warn_once()
        return False
    if getattr(recv, "reads_ahead", False):
        return True

    def recv_ahead(wanted: int) -> bytes:
        return recv(max(wanted, READ_AHEAD))

    recv_ahead.reads_ahead = True
    transport._quick_recv = recv_ahead
    return True


def _warn_once() -> None:
    global _warned
    if not _warned:
        _warned = True
        LOG.warning("py-amqp %s's TCP transport is not shaped as %s expects: "
                    "reading each frame on its own (slower under load)",
                    importlib.metadata.version("amqp"), __name__)
