"""AMQP 0-9-1 ``basic.publish`` frames for a batch of messages, in one write.

py-amqp's ``basic_publish`` builds each message's three frames through
its generic method and property serializers and writes each message with
a system call of its own: about a fifth of a boot request's CPU, which
publishes four messages (the compute cast and three notifications). The
scheduler's messages all have one shape (a JSON body, the properties
kombu's Producer gives it), so their frames are built here with a few
``struct`` packs, and a batch goes to the socket in one write.

The bytes are those py-amqp writes for the same message (a test compares
them): the method frame (basic.publish: reserved short, exchange and
routing key as short strings, mandatory and immediate off), the content
header (body size; content type, content encoding, an empty headers
table, delivery mode, priority) and the body in frames of at most
``frame_max`` bytes, the broker's negotiated limit.
"""

from __future__ import annotations

import struct

# Frame types and the frame's last octet (AMQP 0-9-1, section 4.2.3).
_METHOD, _HEADER, _BODY = 1, 2, 3
_FRAME_END = b"\xce"
_FRAME_HEAD = struct.Struct(">BHI")
# basic.publish is method 40 of class 60 (basic).
_BASIC = 60
_PUBLISH = struct.pack(">HHH", _BASIC, 40, 0)
# The property flags for content type, content encoding, headers,
# delivery mode and priority: the first five of basic's properties.
_FLAGS = 0b1111_1000_0000_0000
_HEADER_HEAD = struct.Struct(">HHQH")
_EMPTY_TABLE = b"\x00\x00\x00\x00"
# Frame head and end around a payload.
FRAME_OVERHEAD = _FRAME_HEAD.size + 1


def _short_string(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) > 255:
        raise ValueError(f"AMQP short string longer than 255 bytes: {text[:40]!r}...")
    return bytes((len(data),)) + data


class PublishFrames:
    """Frames of ``basic.publish`` messages for one channel, gathered until
    ``take``. Each message's properties are kombu Producer's for a JSON
    body with no headers: ``content_type``, ``content_encoding`` (both
    given), delivery mode ``delivery_mode`` and priority 0."""

    def __init__(self, channel_id: int, frame_max: int, content_type: str,
                 content_encoding: str, delivery_mode: int):
        self._channel = channel_id
        # A body frame's payload at most (frame_max counts head and end).
        self._chunk = frame_max - FRAME_OVERHEAD
        self._properties = (_short_string(content_type)
                            + _short_string(content_encoding) + _EMPTY_TABLE
                            + bytes((delivery_mode, 0)))
        self._parts: list[bytes] = []

    def _frame(self, kind: int, payload: bytes) -> None:
        self._parts += (_FRAME_HEAD.pack(kind, self._channel, len(payload)), payload,
                        _FRAME_END)

    def add(self, exchange: str, routing_key: str, body: bytes) -> None:
        """One message's frames."""
        self._frame(_METHOD, b"".join((_PUBLISH, _short_string(exchange),
                                       _short_string(routing_key), b"\x00")))
        self._frame(_HEADER, _HEADER_HEAD.pack(_BASIC, 0, len(body), _FLAGS)
                    + self._properties)
        chunk = self._chunk
        for start in range(0, len(body), chunk):
            self._frame(_BODY, body[start:start + chunk])

    def take(self) -> bytes:
        """Every frame added since the last ``take``, in order."""
        data = b"".join(self._parts)
        self._parts.clear()
        return data
