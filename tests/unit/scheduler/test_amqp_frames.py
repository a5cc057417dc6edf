"""basic.publish frames built by amqp_frames are the bytes py-amqp writes."""

from __future__ import annotations

import amqp
from amqp import spec
from amqp.method_framing import frame_writer
from amqp.serialization import dumps

from nova_sched.scheduler.wire.amqp_frames import PublishFrames


class _Connection:
    """What py-amqp's frame writer reads of its connection."""

    def __init__(self, frame_max: int):
        self.frame_max = frame_max
        self.bytes_sent = 0


class _Transport:
    def __init__(self):
        self.written = bytearray()

    def write(self, data) -> None:
        self.written += bytes(data)


def _py_amqp(frame_max: int, channel_id: int, messages) -> bytes:
    """The bytes py-amqp's Channel.basic_publish writes for ``messages``,
    with the properties the scheduler's publisher gives them."""
    transport = _Transport()
    write = frame_writer(_Connection(frame_max), transport)
    for exchange, routing_key, body in messages:
        message = amqp.Message(body, priority=0, content_type="application/json",
                               content_encoding="utf-8", application_headers={},
                               delivery_mode=2)
        args = dumps("Bssbb", (0, exchange, routing_key, False, False))
        write(1, channel_id, spec.Basic.Publish, args, message)
    return bytes(transport.written)


def _ours(frame_max: int, channel_id: int, messages) -> bytes:
    frames = PublishFrames(channel_id, frame_max, "application/json", "utf-8", 2)
    for exchange, routing_key, body in messages:
        frames.add(exchange, routing_key, body)
    data = frames.take()
    assert frames.take() == b""  # taken: a second take starts empty
    return data


def test_a_batch_is_the_bytes_py_amqp_writes_message_by_message():
    messages = [
        ("nova", "compute.host-1", b'{"oslo.version": "2.0", "oslo.message": "{}"}'),
        ("nova", "notifications.info", "{\"payload\": \"caf\u00e9\"}".encode()),
        ("", "scheduler", b""),
        ("nova", "compute.h\u00f4te-2", b"x" * 300),
    ]
    assert _ours(131072, 1, messages) == _py_amqp(131072, 1, messages)
    assert _ours(4096, 7, messages[:1]) == _py_amqp(4096, 7, messages[:1])


def test_a_body_longer_than_a_frame_is_split_as_py_amqp_splits_it():
    # 4096 is the smallest frame_max a broker may set; the bodies take one
    # frame exactly, one byte more, and several frames.
    chunk = 4096 - 8
    for size in (chunk - 1, chunk, chunk + 1, 3 * chunk + 17):
        messages = [("nova", "compute.h1", bytes(range(256)) * (size // 256)
                     + b"z" * (size % 256))]
        assert _ours(4096, 1, messages) == _py_amqp(4096, 1, messages)


def test_a_routing_key_too_long_for_amqp_is_refused():
    frames = PublishFrames(1, 131072, "application/json", "utf-8", 2)
    try:
        frames.add("nova", "compute." + "h" * 250, b"{}")
    except ValueError as err:
        assert "255" in str(err)
    else:
        raise AssertionError("a 258-byte routing key was framed")
