"""oslo.messaging's RPC wire format, as documented, written without its privates.

The 2.0 envelope (the message as JSON text under ``oslo.message``, its
format's version under ``oslo.version``), replies (``result``,
``failure``, ``ending``, ``_msg_id``, ``_unique_id``) and remote
exceptions serialized as oslo's ``serialize_remote_exception`` does, so
that oslo.messaging's clients read what this consumer sends.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import traceback
import uuid
from typing import Any

from oslo_serialization import jsonutils

from nova_sched import json_text

# oslo.messaging's RPC envelope (oslo_messaging/_drivers/common.py, "the
# message envelope"): the message as a JSON string under 'oslo.message',
# its format's version under 'oslo.version'.
_ENVELOPE_VERSION = "2.0"
_VERSION_KEY = "oslo.version"
_MESSAGE_KEY = "oslo.message"
# An exception re-raised from a remote one carries this suffix on its
# class and module names; serialized again, it takes the original's.
_REMOTE_POSTFIX = "_Remote"


def version_is_compatible(implemented: str | None, requested: str | None) -> bool:
    """Whether an endpoint of version ``implemented`` serves ``requested``:
    the same major version, a minor (and revision) not above its own."""
    if implemented is None:
        return True
    if requested is None:
        return False
    have = [int(part) for part in implemented.split(".")] + [0, 0]
    want = [int(part) for part in requested.split(".")] + [0, 0]
    return have[0] == want[0] and (want[1], want[2]) <= (have[1], have[2])


def unpack(body: Any) -> Any:
    """The message inside a body: the 2.0 envelope opened; anything else
    (an older sender's bare dict) as it came."""
    if not (isinstance(body, dict) and _VERSION_KEY in body and _MESSAGE_KEY in body):
        return body
    if not version_is_compatible(_ENVELOPE_VERSION, body[_VERSION_KEY]):
        raise ValueError(f"RPC envelope version {body[_VERSION_KEY]} is not "
                         f"supported (this consumer reads {_ENVELOPE_VERSION})")
    return json_text.loads(body[_MESSAGE_KEY])


def pack(message: dict) -> dict:
    """``message`` in the 2.0 envelope, as every oslo.messaging sender sends."""
    return {_VERSION_KEY: _ENVELOPE_VERSION, _MESSAGE_KEY: jsonutils.dumps(message)}


# The envelope's JSON text around the message's own JSON text.
_TEXT_HEAD = json.dumps({_VERSION_KEY: _ENVELOPE_VERSION})[:-1] + ", " + json.dumps(
    _MESSAGE_KEY) + ": "


def message_text(message: dict) -> str:
    """``message`` as JSON text, as oslo's ``jsonutils.dumps`` writes it
    for the envelope's ``oslo.message`` (``nova_sched.json_text``: the same
    document, several times faster)."""
    return json_text.dumps(message, jsonutils.to_primitive)


def pack_text(message: dict) -> str:
    """``pack(message)`` as the JSON text a sender puts on the wire
    (``content_type`` application/json, utf-8): the same document, without
    building the envelope's dict for a serializer to encode again. Values
    JSON has no type for go through oslo's ``to_primitive``, as in
    ``pack``."""
    return _TEXT_HEAD + json_text.quoted(message_text(message)) + "}"


class _UniqueIds:
    """Unique ids for messages, as uuid4 would give them, at a fraction of
    its cost: a random uuid4 per process (drawn again in a forked child)
    whose last 48 bits count up from a random start. Ids only need to
    differ, for oslo.messaging's duplicate detection and the listeners'
    ``message_id``; a boot request takes six of them."""

    def __init__(self):
        self._lock = threading.Lock()
        self._reseed()
        os.register_at_fork(after_in_child=self._reseed)

    def _reseed(self) -> None:
        base = uuid.uuid4().hex
        self._prefix = base[:20]
        self._counter = itertools.count(int(base[20:], 16))

    def hex(self) -> str:
        """32 hex digits, as ``uuid4().hex``."""
        with self._lock:
            n = next(self._counter)
        return f"{self._prefix}{n & 0xFFFFFFFFFFFF:012x}"

    def text(self) -> str:
        """The 8-4-4-4-12 form, as ``str(uuid4())``."""
        h = self.hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


unique_ids = _UniqueIds()


def remote_failure(exc_info) -> str:
    """An exception as a reply's ``failure``: the JSON object oslo.messaging's
    clients turn back into an exception (the class, the module, the message,
    the traceback lines, ``args`` and, when it has them, ``kwargs``)."""
    error = exc_info[1]
    cls_name = type(error).__name__
    mod_name = type(error).__module__
    if cls_name.endswith(_REMOTE_POSTFIX) and mod_name.endswith(_REMOTE_POSTFIX):
        cls_name = cls_name[:-len(_REMOTE_POSTFIX)]
        mod_name = mod_name[:-len(_REMOTE_POSTFIX)]
    return jsonutils.dumps({
        "class": cls_name,
        "module": mod_name,
        "message": str(error),
        "tb": traceback.format_exception(*exc_info),
        "args": error.args,
        "kwargs": getattr(error, "kwargs", {}),
    })


def reply_message(msg_id: str, result: Any = None, failure: str | None = None,
                  ending: bool = True) -> dict:
    """A reply to the call ``msg_id``, in its envelope. ``ending`` False
    with neither result nor failure is a call-monitor heartbeat."""
    return pack({"result": result, "failure": failure, "ending": ending,
                 "_msg_id": msg_id, "_unique_id": unique_ids.hex()})
