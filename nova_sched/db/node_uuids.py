"""Compute node uuids: the one a node reports, else one derived from its names.

Today's nova gives every compute node a uuid of its own and reports it;
Havana's computes (and the fake ones) report none. A node without one gets
``uuid5`` of its host and node names: the same in every daemon and after
every restart, with nothing to coordinate, and kept in the row.
"""

from __future__ import annotations

import uuid

# Fixed for this project: changing it would rename every node.
_NAMESPACE = uuid.UUID("8f5b5b7e-3c38-4f38-9a55-6d1d0e8c7a10")


def for_node(host: str, nodename: str) -> str:
    """The uuid of a node that reports none."""
    return str(uuid.uuid5(_NAMESPACE, f"{host}/{nodename}"))
