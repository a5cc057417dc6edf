"""Node uuids derived from names: the same as uuid5 gives, for any name."""

from __future__ import annotations

import uuid

from nova_sched.db import node_uuids


def test_derived_uuid_is_uuid5_of_the_names():
    # A different value would rename every node that reports no uuid.
    namespace = uuid.UUID("8f5b5b7e-3c38-4f38-9a55-6d1d0e8c7a10")
    for host, node in (("c1", "c1"), ("compute-00042", "compute-00042.example"),
                       ("h\u00f4te", "n\u0153ud/2"), ("", "")):
        derived = node_uuids.for_node(host, node)
        assert derived == str(uuid.uuid5(namespace, f"{host}/{node}"))
        assert uuid.UUID(derived).version == 5


def test_known_node_keeps_its_uuid():
    # Stored in rows already: the derivation must never change.
    assert node_uuids.for_node("c1", "c1") == "5dfd8b10-ea01-5de0-b8ca-c7b155fd9851"
