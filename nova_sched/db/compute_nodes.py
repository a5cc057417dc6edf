"""Compute nodes and their services' heartbeats: reports in, changes out."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from nova_sched.db import api as db_api
from nova_sched.db import models

COMPUTE_BINARY = "nova-compute"


@db_api.retry_on_disconnect
def upsert_report(values: dict[str, Any], topic: str = "compute") -> int:
    """Store a validated report and beat the host's service heartbeat.

    Returns the node id. Claimed totals are never touched here: a node's
    usage is the sum of the scheduler's claims, not what it reports. The
    node's own allocation ratios (``cpu_allocation_ratio`` and friends) are
    stored as given, None for a node that sends none.
    """
    now = db_api.utcnow()
    stamp = db_api.now_us()
    for attempt in range(2):
        try:
            with db_api.session_scope() as session:
                node = session.execute(
                    sa.select(models.ComputeNode).where(
                        models.ComputeNode.host == values["host"],
                        models.ComputeNode.hypervisor_hostname
                        == values["hypervisor_hostname"],
                    )
                ).scalar_one_or_none()
                if node is None:
                    node = models.ComputeNode(created_at=now)
                    session.add(node)
                for key, value in values.items():
                    setattr(node, key, value)
                node.deleted = False
                node.updated_at = now
                node.changed_at = stamp
                _beat(session, values["host"], topic, now, stamp)
                session.flush()
                return node.id
        except sa_exc.IntegrityError:
            # Two daemons inserted the same new node at once; the second
            # attempt finds the row and updates it.
            if attempt:
                raise
    raise AssertionError("unreachable")


def _beat(session, host: str, topic: str, now, stamp: int) -> None:
    service = session.execute(
        sa.select(models.Service).where(
            models.Service.host == host, models.Service.binary == COMPUTE_BINARY
        )
    ).scalar_one_or_none()
    if service is None:
        service = models.Service(
            host=host, binary=COMPUTE_BINARY, topic=topic, disabled=False,
            created_at=now,
        )
        session.add(service)
    service.updated_at = now
    service.changed_at = stamp


@db_api.retry_on_disconnect
def mark_deleted(host: str, nodename: str) -> bool:
    """Soft-delete a node so every daemon's refresh sees it go."""
    with db_api.session_scope() as session:
        result = session.execute(
            sa.update(models.ComputeNode)
            .where(
                models.ComputeNode.host == host,
                models.ComputeNode.hypervisor_hostname == nodename,
                models.ComputeNode.deleted == sa.false(),
            )
            .values(deleted=True, changed_at=db_api.now_us())
        )
        return result.rowcount > 0


@db_api.retry_on_disconnect
def load_changed(since_us: int) -> tuple[list, list]:
    """Rows of nodes and compute services changed at or after ``since_us``.

    Plain row mappings (no ORM objects): this runs before decisions and
    must stay cheap. ``since_us=0`` loads everything.
    """
    nodes_t = models.ComputeNode.__table__
    services_t = models.Service.__table__
    with db_api.session_scope() as session:
        nodes = session.execute(
            sa.select(nodes_t).where(nodes_t.c.changed_at >= since_us)
        ).mappings().all()
        services = session.execute(
            sa.select(services_t).where(
                services_t.c.binary == COMPUTE_BINARY,
                services_t.c.changed_at >= since_us,
            )
        ).mappings().all()
        return list(nodes), list(services)


@db_api.retry_on_disconnect
def load_node(node_id: int):
    """One node's row and its host's compute service row (either may be None)."""
    nodes_t = models.ComputeNode.__table__
    services_t = models.Service.__table__
    with db_api.session_scope() as session:
        node = session.execute(
            sa.select(nodes_t).where(nodes_t.c.id == node_id)
        ).mappings().one_or_none()
        if node is None:
            return None, None
        service = session.execute(
            sa.select(services_t).where(services_t.c.host == node["host"],
                                        services_t.c.binary == COMPUTE_BINARY)
        ).mappings().one_or_none()
        return node, service
