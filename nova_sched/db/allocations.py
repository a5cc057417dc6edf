"""Allocations: every statement that reads or changes a claim.

A claim is one conditional UPDATE of the node's running totals, guarded by
``nova_sched.capacity``'s fit (``claimed + requested <= total x ratio -
reserved``) for RAM, vCPUs and disk with the ratios the decision used,
plus the allocation row and, for an instance being placed, its host and
node, all in one transaction. The database evaluates the guard under its
row lock, so any number of scheduler daemons sharing the database can never
push a node past its limits, and a claim is never without its placement
(nor a placement without its claim).

The reads that go through claims live here too: where instances are
(``hosts_of``: their claims first, then their placed rows), which the
affinity filters and server groups follow, and each node's summed claims
(``usage_by_node``), which the demo's report shows.
"""

from __future__ import annotations

import uuid as uuid_lib
from typing import Any, Iterable, Mapping

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from nova_sched import capacity, exception
from nova_sched.capacity import DISK, RAM, RESOURCES, VCPU
from nova_sched.db import api as db_api
from nova_sched.db import compute_nodes as db_nodes
from nova_sched.db import instances as db_instances
from nova_sched.db import models
from nova_sched.db import operator_changes as db_operator_changes
from nova_sched.db.driver_sql import execute

_ALLOC = models.Allocation.__table__
_NODES = models.ComputeNode.__table__
_INSTANCES = models.Instance.__table__


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
                changed_by=None,
            )
        )
        released.append(alloc.compute_node_id)
    return released


def _guarded_claim():
    """The guarded UPDATE, built once: building it per claim cost more than
    running it."""
    n = _NODES.c
    figures = (
        # resource, total, reserved, claimed, requested
        (RAM, n.memory_mb, n.reserved_host_memory_mb, n.claimed_memory_mb, "req_mem"),
        (VCPU, n.vcpus, n.reserved_host_cpus, n.claimed_vcpus, "req_vcpus"),
        (DISK, n.local_gb * 1024, n.reserved_host_disk_mb, n.claimed_disk_mb,
         "req_disk"),
    )
    guards = []
    for resource, total, reserved, claimed, requested in figures:
        # A double on every backend, as the decision's NumPy arithmetic is
        # (PostgreSQL would otherwise read the ratio as an exact numeric).
        ratio = sa.cast(sa.bindparam(f"{resource.name}_ratio"), sa.Double)
        guards.append(capacity.fits(claimed, sa.bindparam(requested),
                                    capacity.limit(total, ratio, reserved)))
    # ``changed_by`` first: MySQL evaluates a SET list left to right, and
    # the CASE must read ``changed_at`` before it moves. A claim the
    # claimer counted in its own host table is marked as the claimer's,
    # as its reports are, so that its refreshes do not read the row back.
    # A decision no operator's command has overtaken (db.operator_changes).
    guards.append(db_operator_changes.at_most("req_changes"))
    return (
        sa.update(_NODES)
        .where(n.id == sa.bindparam("req_node"), n.deleted == sa.false(), *guards)
        .ordered_values(
            (n.changed_by, db_nodes.mine_if_seen(_NODES, "req_by", "req_seen")),
            (n.claimed_memory_mb, n.claimed_memory_mb + sa.bindparam("req_mem")),
            (n.claimed_vcpus, n.claimed_vcpus + sa.bindparam("req_vcpus")),
            (n.claimed_disk_mb, n.claimed_disk_mb + sa.bindparam("req_disk")),
            (n.claimed_instances, n.claimed_instances + 1),
            (n.changed_at, sa.bindparam("stamp")),
        )
    )


# A count no decision's table will reach: a claim whose decision names no
# count passes the operators' guard.
_UNCHECKED = 2 ** 62
_CLAIM = _guarded_claim()
_INSERT_ALLOCATION = sa.insert(_ALLOC)
_ALLOCATIONS_OF_ONE = sa.select(_ALLOC).where(
    _ALLOC.c.instance_uuid == sa.bindparam("uuid"))
_SET_PLACEMENT = (
    sa.update(_INSTANCES).where(_INSTANCES.c.uuid == sa.bindparam("b_uuid"))
    .values(host=sa.bindparam("b_host"), node=sa.bindparam("b_node"),
            scheduled_at=sa.bindparam("b_now"), updated_at=sa.bindparam("b_now"),
            launch_index=sa.bindparam("b_index")))
# The record changes only if it still names the host the decision started
# from: the database's row lock makes one of two concurrent handlers of the
# same instance (a request published twice) lose.
_SET_FIRST_PLACEMENT = _SET_PLACEMENT.where(_INSTANCES.c.host.is_(None))
_SET_PLACEMENT_FROM = _SET_PLACEMENT.where(_INSTANCES.c.host == sa.bindparam("b_prev"))


def claim(instance_uuid: str, node_id: int, memory_mb: int, vcpus: int,
          disk_mb: int, ratios: Mapping[str, float],
          placement: tuple[str, str, int, str | None] | None = None,
          new: db_instances.NewRequest | None = None,
          counted_through_us: int | None = None,
          casts: list[db_instances.Cast] | None = None,
          operator_changes: int | None = None) -> None:
    """Take the resources on the node or raise ClaimFailed.

    ``ratios`` maps each resource's name to the allocation ratio the
    decision judged the node by. With ``placement`` (host, node,
    launch_index, previous host) the instance row records where it goes
    in the same transaction, if it still names the previous host (None:
    none); AlreadyPlaced if another handler placed it meanwhile. An
    instance holds at most one allocation: a previous one (a request
    delivered twice, or a retry whose release was lost) is replaced in the
    same transaction.

    With ``new`` as well (a request seen for the first time, whose
    instance has no row yet) the request's rows are written, already
    placed, in this same transaction (``db.instances.record_placed``), and
    AlreadyRecorded is raised, with nothing written, when the instance has
    a row after all.

    ``counted_through_us``: the caller counted the claim in its host table
    already, a table that has read every change stamped before this; the
    node's row is then marked as the caller's (``changed_by``) if its last
    change was read, so that the caller's refreshes skip it. None: the
    claim is not counted anywhere yet, and every refresh reads the row.

    ``casts``: casts made since the last claim, recorded in this same
    transaction (``db.instances.record_casts``), so that a boot costs one
    write transaction, not two; a failure writes none of them.

    ``operator_changes``: how many operators' changes the decision's host
    table had read (``db.operator_changes``); HostTableBehind, with nothing
    written, when the database has more. None: no check (a claim made
    outside a decision, or taken again where it was).

    Safe to run again when its COMMIT's outcome was lost (a database node
    died under it): the second run finds the row the first one wrote and
    does nothing more (with ``new``: finds the instance's row, and raises
    AlreadyRecorded for the caller to take the request's general way).
    """
    _claim(uuid_lib.uuid4().hex, instance_uuid, node_id, memory_mb, vcpus,
           disk_mb, ratios, placement, new, counted_through_us, casts,
           operator_changes)


@db_api.retry_on_disconnect
def _claim(token: str, instance_uuid: str, node_id: int, memory_mb: int,
           vcpus: int, disk_mb: int, ratios: Mapping[str, float],
           placement: tuple[str, str, int, str | None] | None,
           new: db_instances.NewRequest | None = None,
           counted_through_us: int | None = None,
           casts: list[db_instances.Cast] | None = None,
           operator_changes: int | None = None) -> None:
    now = db_api.utcnow()
    event_id = None
    with db_api.transaction() as conn:
        if new is not None and placement is not None:
            try:
                # First, so that a request recorded before costs nothing
                # more; leaving the block by the exception rolls back all.
                event_id = db_instances.record_placed(
                    conn, new, placement[0], placement[1], placement[2], now)
            except sa_exc.IntegrityError:
                raise exception.AlreadyRecorded(uuid=instance_uuid) from None
        # A new request's instance had no row until the statement above, so
        # it holds no claim, and a run after a lost COMMIT stops there.
        previous = [] if event_id is not None else conn.execute(
            _ALLOCATIONS_OF_ONE, {"uuid": instance_uuid}).all()
        if any(row.claim_token == token for row in previous):
            return  # this very call committed before its answer was lost
        if previous:
            _release_rows(conn, previous)
        params = {
            "req_node": node_id, "req_mem": memory_mb, "req_vcpus": vcpus,
            "req_disk": disk_mb, "stamp": db_api.now_us(),
            # A NULL writer never matches: the row is marked as no one's.
            "req_by": None if counted_through_us is None else db_api.writer_id(),
            "req_seen": counted_through_us or 0,
            "req_changes": _UNCHECKED if operator_changes is None else operator_changes,
        }
        params.update({f"{name}_ratio": float(value) for name, value in ratios.items()})
        if execute(conn, _CLAIM, params) != 1:
            # Leaving the block by an exception rolls the release back too.
            if operator_changes is not None:
                db_operator_changes.check(conn, operator_changes)
            raise exception.ClaimFailed(
                f"claim for {instance_uuid} on compute node {node_id} failed: "
                "not enough free resources")
        execute(conn, _INSERT_ALLOCATION, {
            "instance_uuid": instance_uuid, "compute_node_id": node_id,
            "memory_mb": memory_mb, "vcpus": vcpus, "disk_mb": disk_mb,
            "created_at": now, "claim_token": token,
        })
        if placement is not None and new is None:
            host, node, launch_index, previous = placement
            values = {"b_uuid": instance_uuid, "b_host": host, "b_node": node,
                      "b_now": now, "b_index": launch_index}
            if previous is None:
                placed = execute(conn, _SET_FIRST_PLACEMENT, values)
            else:
                placed = execute(conn, _SET_PLACEMENT_FROM,
                                 dict(values, b_prev=previous))
            if placed != 1:
                # Leaving by an exception rolls the claim back.
                raise exception.AlreadyPlaced(uuid=instance_uuid)
        if casts:
            db_instances.record_casts(conn, casts, now)
    if new is not None:
        # Committed: the request's rows exist now (a lost claim wrote none).
        new.event_id = event_id


@db_api.retry_on_disconnect
def release(instance_uuids: Iterable[str]) -> list[int]:
    """Release the instances' claims; returns the ids of the nodes freed."""
    uuids = list(instance_uuids)
    if not uuids:
        return []
    with db_api.transaction() as conn:
        held = conn.execute(
            sa.select(_ALLOC).where(_ALLOC.c.instance_uuid.in_(uuids))).all()
        return _release_rows(conn, held)


@db_api.retry_on_disconnect
def held_on_host(host: str) -> dict[str, int]:
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
        return list(session.execute(
            sa.select(_ALLOC.c.instance_uuid).where(
                _ALLOC.c.instance_uuid.in_(instance_uuids),
                _ALLOC.c.created_at < cutoff)
        ).scalars())


@db_api.retry_on_disconnect
def hosts_of(uuids: Iterable[str]) -> dict[str, str]:
    """uuid -> host of the given instances that have one (claimed or placed).

    A claim counts before the instance row has its host, so instances being
    placed right now are found too; an instance without a claim counts where
    its row places it unless it is in ERROR or deleted.
    """
    uuids = [u for u in uuids if isinstance(u, str)]
    if not uuids:
        return {}
    with db_api.session_scope() as session:
        found = dict(session.execute(
            sa.select(_ALLOC.c.instance_uuid, _NODES.c.host)
            .join(_NODES, _NODES.c.id == _ALLOC.c.compute_node_id)
            .where(_ALLOC.c.instance_uuid.in_(uuids))).all())
        rest = [u for u in uuids if u not in found]
        if rest:
            found.update(session.execute(
                sa.select(_INSTANCES.c.uuid, _INSTANCES.c.host).where(
                    _INSTANCES.c.uuid.in_(rest),
                    _INSTANCES.c.host.is_not(None),
                    _INSTANCES.c.vm_state.not_in(("error", "deleted")))).all())
        return found


@db_api.retry_on_disconnect
def unclaimed_by_host() -> dict[str, int]:
    """host -> instances recorded there without a claim (those nova reports
    on a host that this scheduler did not place), neither in ERROR nor
    deleted: NumInstancesFilter counts them with the claims."""
    with db_api.read_session() as session:
        return dict(session.execute(
            sa.select(_INSTANCES.c.host, sa.func.count())
            .where(_INSTANCES.c.host.is_not(None),
                   _INSTANCES.c.vm_state.not_in(("error", "deleted")),
                   ~sa.exists().where(_ALLOC.c.instance_uuid == _INSTANCES.c.uuid))
            .group_by(_INSTANCES.c.host)).all())


@db_api.retry_on_disconnect
def usage_by_node() -> list[dict[str, Any]]:
    """Every live node's figures and the sums of the claims held on it.

    One dict per node, by host and node name: ``host``, ``node``,
    ``instances`` (claims held) and, each keyed by resource name
    (``nova_sched.capacity.RESOURCES``), ``total`` (disk in MB),
    ``reserved``, ``node_ratio`` (the node's own reported ratio, None when
    it sends none) and ``claimed`` (summed from the allocation rows).
    """
    claims = (
        sa.select(_ALLOC.c.compute_node_id.label("node_id"),
                  sa.func.sum(_ALLOC.c.memory_mb).label("memory_mb"),
                  sa.func.sum(_ALLOC.c.vcpus).label("vcpus"),
                  sa.func.sum(_ALLOC.c.disk_mb).label("disk_mb"),
                  sa.func.count().label("instances"))
        .group_by(_ALLOC.c.compute_node_id)
        .subquery()
    )
    n = _NODES.c
    with db_api.session_scope() as session:
        rows = session.execute(
            sa.select(n.host, n.hypervisor_hostname, n.memory_mb, n.vcpus, n.local_gb,
                      n.reserved_host_memory_mb, n.reserved_host_cpus,
                      n.reserved_host_disk_mb, n.ram_allocation_ratio,
                      n.cpu_allocation_ratio, n.disk_allocation_ratio,
                      claims.c.memory_mb.label("claimed_memory_mb"),
                      claims.c.vcpus.label("claimed_vcpus"),
                      claims.c.disk_mb.label("claimed_disk_mb"),
                      claims.c.instances)
            .outerjoin(claims, claims.c.node_id == n.id)
            .where(n.deleted == sa.false())
            .order_by(n.host, n.hypervisor_hostname)
        ).mappings().all()
    return [
        {
            "host": row["host"],
            "node": row["hypervisor_hostname"],
            "instances": int(row["instances"] or 0),
            "total": {RAM.name: row["memory_mb"] or 0, VCPU.name: row["vcpus"] or 0,
                      DISK.name: (row["local_gb"] or 0) * 1024},
            "reserved": {RAM.name: row["reserved_host_memory_mb"] or 0,
                         VCPU.name: row["reserved_host_cpus"] or 0,
                         DISK.name: row["reserved_host_disk_mb"] or 0},
            "node_ratio": {res.name: row[res.ratio_option] for res in RESOURCES},
            "claimed": {RAM.name: int(row["claimed_memory_mb"] or 0),
                        VCPU.name: int(row["claimed_vcpus"] or 0),
                        DISK.name: int(row["claimed_disk_mb"] or 0)},
        }
        for row in rows
    ]
