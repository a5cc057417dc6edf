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

_CN = models.ComputeNode


@dataclasses.dataclass(frozen=True)
class Claim:
    """Resources one instance holds on one node."""

    instance_uuid: str
    node_id: int
    memory_mb: int
    vcpus: int
    disk_mb: int


def _release_rows(session, allocations) -> list[int]:
    """Delete allocations and take them off their nodes' totals."""
    stamp = db_api.now_us()
    released = []
    for alloc in allocations:
        # Delete first and count: a concurrent release of the same row
        # must not decrement the totals twice.
        gone = session.execute(
            sa.delete(models.Allocation).where(models.Allocation.id == alloc.id)
        ).rowcount
        if not gone:
            continue
        session.execute(
            sa.update(_CN)
            .where(_CN.id == alloc.compute_node_id)
            .values(
                claimed_memory_mb=_CN.claimed_memory_mb - alloc.memory_mb,
                claimed_vcpus=_CN.claimed_vcpus - alloc.vcpus,
                claimed_disk_mb=_CN.claimed_disk_mb - alloc.disk_mb,
                claimed_instances=_CN.claimed_instances - 1,
                changed_at=stamp,
            )
        )
        released.append(alloc.compute_node_id)
    return released


@db_api.retry_on_disconnect
def claim(claim: Claim) -> None:
    """Take ``claim`` on its node or raise ClaimFailed.

    An instance holds at most one allocation: a previous one (a request
    delivered twice, or a retry whose release was lost) is replaced in the
    same transaction.
    """
    fs = CONF.filter_scheduler
    with db_api.session_scope() as session:
        previous = session.execute(
            sa.select(models.Allocation).where(
                models.Allocation.instance_uuid == claim.instance_uuid
            )
        ).scalars().all()
        _release_rows(session, previous)
        taken = session.execute(
            sa.update(_CN)
            .where(
                _CN.id == claim.node_id,
                _CN.deleted == sa.false(),
                _CN.claimed_memory_mb + claim.memory_mb
                <= _CN.memory_mb * fs.ram_allocation_ratio - _CN.reserved_host_memory_mb,
                _CN.claimed_vcpus + claim.vcpus
                <= _CN.vcpus * fs.cpu_allocation_ratio - _CN.reserved_host_cpus,
                _CN.claimed_disk_mb + claim.disk_mb
                <= _CN.local_gb * 1024 * fs.disk_allocation_ratio
                - _CN.reserved_host_disk_mb,
            )
            .values(
                claimed_memory_mb=_CN.claimed_memory_mb + claim.memory_mb,
                claimed_vcpus=_CN.claimed_vcpus + claim.vcpus,
                claimed_disk_mb=_CN.claimed_disk_mb + claim.disk_mb,
                claimed_instances=_CN.claimed_instances + 1,
                changed_at=db_api.now_us(),
            )
        ).rowcount
        if taken != 1:
            session.rollback()
            raise exception.ClaimFailed(
                f"claim for {claim.instance_uuid} on compute node "
                f"{claim.node_id} failed: not enough free resources"
            )
        session.add(
            models.Allocation(
                instance_uuid=claim.instance_uuid,
                compute_node_id=claim.node_id,
                memory_mb=claim.memory_mb,
                vcpus=claim.vcpus,
                disk_mb=claim.disk_mb,
                created_at=db_api.utcnow(),
            )
        )


@db_api.retry_on_disconnect
def release(instance_uuids: list[str]) -> list[int]:
    """Release the instances' claims; returns the ids of the nodes freed."""
    if not instance_uuids:
        return []
    with db_api.session_scope() as session:
        allocations = session.execute(
            sa.select(models.Allocation).where(
                models.Allocation.instance_uuid.in_(instance_uuids)
            )
        ).scalars().all()
        return _release_rows(session, allocations)


@db_api.retry_on_disconnect
def allocations_on_host(host: str) -> dict[str, int]:
    """instance uuid -> node id of every claim held on ``host``'s nodes."""
    with db_api.session_scope() as session:
        rows = session.execute(
            sa.select(models.Allocation.instance_uuid, models.Allocation.compute_node_id)
            .join(_CN, _CN.id == models.Allocation.compute_node_id)
            .where(_CN.host == host)
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
