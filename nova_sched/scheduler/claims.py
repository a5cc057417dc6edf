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


def _claim_statement():
    """The guarded UPDATE, built once: building it per claim cost more than
    running it."""
    n = _NODES.c
    mem, vcpus, disk = (sa.bindparam("req_mem"), sa.bindparam("req_vcpus"),
                        sa.bindparam("req_disk"))
    return (
        sa.update(_NODES)
        .where(
            n.id == sa.bindparam("req_node"),
            n.deleted == sa.false(),
            n.claimed_memory_mb + mem
            <= n.memory_mb * sa.bindparam("ram_ratio") - n.reserved_host_memory_mb,
            n.claimed_vcpus + vcpus
            <= n.vcpus * sa.bindparam("cpu_ratio") - n.reserved_host_cpus,
            n.claimed_disk_mb + disk
            <= n.local_gb * 1024 * sa.bindparam("disk_ratio")
            - n.reserved_host_disk_mb,
        )
        .values(
            claimed_memory_mb=n.claimed_memory_mb + mem,
            claimed_vcpus=n.claimed_vcpus + vcpus,
            claimed_disk_mb=n.claimed_disk_mb + disk,
            claimed_instances=n.claimed_instances + 1,
            changed_at=sa.bindparam("stamp"),
        )
    )


_CLAIM = _claim_statement()
_INSERT_ALLOCATION = sa.insert(_ALLOC)
_ALLOCATIONS_OF_ONE = sa.select(_ALLOC).where(
    _ALLOC.c.instance_uuid == sa.bindparam("uuid"))


@db_api.retry_on_disconnect
def claim(claim: Claim) -> None:
    """Take ``claim`` on its node or raise ClaimFailed.

    An instance holds at most one allocation: a previous one (a request
    delivered twice, or a retry whose release was lost) is replaced in the
    same transaction.
    """
    fs = CONF.filter_scheduler
    with db_api.transaction() as conn:
        previous = conn.execute(_ALLOCATIONS_OF_ONE,
                                {"uuid": claim.instance_uuid}).all()
        if previous:
            _release_rows(conn, previous)
        taken = conn.execute(_CLAIM, {
            "req_node": claim.node_id, "req_mem": claim.memory_mb,
            "req_vcpus": claim.vcpus, "req_disk": claim.disk_mb,
            "ram_ratio": fs.ram_allocation_ratio,
            "cpu_ratio": fs.cpu_allocation_ratio,
            "disk_ratio": fs.disk_allocation_ratio,
            "stamp": db_api.now_us(),
        }).rowcount
        if taken != 1:
            # Leaving the block by an exception rolls the release back too.
            raise exception.ClaimFailed(
                f"claim for {claim.instance_uuid} on compute node "
                f"{claim.node_id} failed: not enough free resources"
            )
        conn.execute(_INSERT_ALLOCATION, {
            "instance_uuid": claim.instance_uuid,
            "compute_node_id": claim.node_id,
            "memory_mb": claim.memory_mb,
            "vcpus": claim.vcpus,
            "disk_mb": claim.disk_mb,
            "created_at": db_api.utcnow(),
        })


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
