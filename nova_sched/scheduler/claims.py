"""Claims: reserving a node's resources for an instance, atomically.

A claim is one conditional UPDATE of the node's running totals, guarded by
``claimed + requested <= total * ratio - reserved`` for RAM, vCPUs and disk,
plus the allocation row, in one transaction. The database evaluates the
guard under its row lock, so any number of scheduler daemons sharing the
database can never push a node past its limits; a daemon whose in-memory
view was stale simply sees the UPDATE match no row and moves on.
"""

from __future__ import annotations

import dataclasses

import sqlalchemy as sa

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.db import models


@dataclasses.dataclass(frozen=True)
class Claim:
    """Resources one instance holds on one node."""

    instance_uuid: str
    node_id: int
    memory_mb: int
    vcpus: int
    disk_mb: int


_ALLOC = models.Allocation.__table__
_NODES = models.ComputeNode.__table__


def _release_rows(conn, allocations) -> list[int]:
    """Delete allocations and take them off their nodes' totals."""
    stamp = db_api.now_us()
    released = []
    for alloc in allocations:
        # Delete first and count: a concurrent release of the same row
        # must not decrement the totals twice.
        gone = conn.execute(
            sa.delete(_ALLOC).where(_ALLOC.c.id == alloc.id)).rowcount
        if not gone:
            continue
        conn.execute(
            sa.update(_NODES)
            .where(_NODES.c.id == alloc.compute_node_id)
            .values(
                claimed_memory_mb=_NODES.c.claimed_memory_mb - alloc.memory_mb,
                claimed_vcpus=_NODES.c.claimed_vcpus - alloc.vcpus,
                claimed_disk_mb=_NODES.c.claimed_disk_mb - alloc.disk_mb,
                claimed_instances=_NODES.c.claimed_instances - 1,
                changed_at=stamp,
            )
        )
        released.append(alloc.compute_node_id)
    return released


def _allocations_of(conn, instance_uuids: list[str]):
    return conn.execute(
        sa.select(_ALLOC).where(_ALLOC.c.instance_uuid.in_(instance_uuids))).all()


@db_api.retry_on_disconnect
def claim(claim: Claim) -> None:
    """Take ``claim`` on its node or raise ClaimFailed.

    An instance holds at most one allocation: a previous one (a request
    delivered twice, or a retry whose release was lost) is replaced in the
    same transaction.
    """
    fs = CONF.filter_scheduler
    n = _NODES.c
    with db_api.transaction() as conn:
        _release_rows(conn, _allocations_of(conn, [claim.instance_uuid]))
        taken = conn.execute(
            sa.update(_NODES)
            .where(
                n.id == claim.node_id,
                n.deleted == sa.false(),
                n.claimed_memory_mb + claim.memory_mb
                <= n.memory_mb * fs.ram_allocation_ratio - n.reserved_host_memory_mb,
                n.claimed_vcpus + claim.vcpus
                <= n.vcpus * fs.cpu_allocation_ratio - n.reserved_host_cpus,
                n.claimed_disk_mb + claim.disk_mb
                <= n.local_gb * 1024 * fs.disk_allocation_ratio
                - n.reserved_host_disk_mb,
            )
            .values(
                claimed_memory_mb=n.claimed_memory_mb + claim.memory_mb,
                claimed_vcpus=n.claimed_vcpus + claim.vcpus,
                claimed_disk_mb=n.claimed_disk_mb + claim.disk_mb,
                claimed_instances=n.claimed_instances + 1,
                changed_at=db_api.now_us(),
            )
        ).rowcount
        if taken != 1:
            # Leaving the block by an exception rolls the release back too.
            raise exception.ClaimFailed(
                f"claim for {claim.instance_uuid} on compute node "
                f"{claim.node_id} failed: not enough free resources"
            )
        conn.execute(sa.insert(_ALLOC).values(
            instance_uuid=claim.instance_uuid,
            compute_node_id=claim.node_id,
            memory_mb=claim.memory_mb,
            vcpus=claim.vcpus,
            disk_mb=claim.disk_mb,
            created_at=db_api.utcnow(),
        ))


@db_api.retry_on_disconnect
def release(instance_uuids: list[str]) -> list[int]:
    """Release the instances' claims; returns the ids of the nodes freed."""
    if not instance_uuids:
        return []
    with db_api.transaction() as conn:
        return _release_rows(conn, _allocations_of(conn, list(instance_uuids)))


@db_api.retry_on_disconnect
def allocations_on_host(host: str) -> dict[str, int]:
    """instance uuid -> node id of every claim held on ``host``'s nodes."""
    with db_api.session_scope() as session:
        rows = session.execute(
            sa.select(_ALLOC.c.instance_uuid, _ALLOC.c.compute_node_id)
            .join(_NODES, _NODES.c.id == _ALLOC.c.compute_node_id)
            .where(_NODES.c.host == host)
        ).all()
        return {uuid: node_id for uuid, node_id in rows}


@db_api.retry_on_disconnect
def older_than(instance_uuids: list[str], cutoff) -> list[str]:
    """Those of the instances whose claim was made before ``cutoff``."""
    if not instance_uuids:
        return []
    with db_api.session_scope() as session:
        return list(
            session.execute(
                sa.select(models.Allocation.instance_uuid).where(
                    models.Allocation.instance_uuid.in_(instance_uuids),
                    models.Allocation.created_at < cutoff,
                )
            ).scalars()
        )
