"""Compute node uuids: the one a node reports, else one derived from its names.

Today's nova gives every compute node a uuid of its own and reports it;
Havana's computes (and the fake ones) report none. A node without one gets
``uuid5`` of its host and node names: the same in every daemon and after
every restart, with nothing to coordinate, and kept in the row.
"""

from __future__ import annotations

import hashlib
import uuid

# Fixed for this project: changing it would rename every node.
_NAMESPACE = uuid.UUID("8f5b5b7e-3c38-4f38-9a55-6d1d0e8c7a10")
_PREFIX = _NAMESPACE.bytes


def for_node(host: str, nodename: str) -> str:
    """The uuid of a node that reports none: ``str(uuid.uuid5(namespace,
    "host/node"))``, computed without the UUID object, a third of the time
    (every report of such a node asks for it)."""
    name = bytearray(hashlib.sha1(_PREFIX + f"{host}/{nodename}".encode()).digest()[:16])
    name[6] = name[6] & 0x0F | 0x50  # version 5
    name[8] = name[8] & 0x3F | 0x80  # RFC 4122's variant
    text = name.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
