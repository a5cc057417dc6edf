"""Compute nodes and their services' heartbeats: reports in, changes out."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from nova_sched.db import api as db_api
from nova_sched.db import models
from nova_sched.db.driver_sql import execute_many

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
                node.changed_by = None
                _beat(session, values["host"], topic, now, stamp)
                session.flush()
                return node.id
        except sa_exc.IntegrityError:
            # Two daemons inserted the same new node at once; the second
            # attempt finds the row and updates it.
            if attempt:
                raise
    raise AssertionError("unreachable")


_NODES = models.ComputeNode.__table__
_SERVICES = models.Service.__table__
# Rows per statement of a batch: bounded so that IN lists and parameter
# sets stay within every backend's limits.
_CHUNK = 500


@db_api.retry_on_disconnect
def store_reports(reports: list[dict[str, Any]], topic: str = "compute",
                  known_ids: dict[tuple[str, str], int] | None = None,
                  read_through_us: int = 0) -> dict[tuple[str, str], int]:
    """Store validated reports and beat their hosts' heartbeats, in one
    transaction; (host, node) -> node id of each.

    The batch form of ``upsert_report`` for a daemon ingesting thousands of
    reports a second: a few executemany statements per batch instead of a
    transaction per report. ``known_ids`` are the ids the caller already
    knows (nodes it has seen stored); only the others are looked up, and
    only their hosts' services are checked for existence. Claimed totals
    are never touched. On a SQLite file the transaction first lets this
    process's writers waiting for the write lock (claims) go.

    A row is marked as this process's (``changed_by``, which its own
    refreshes skip) only if its previous change was too, or is older than
    ``read_through_us`` (the caller has read every change before that):
    otherwise a claim or an operator's change that the caller has not read
    yet would be hidden from it by its own report. Rows this batch inserts
    (a node's or a host's first report) are the caller's from the start:
    nothing else has changed them, and the caller adds the node to its
    table from the report and the id returned here. Marked no one's, they
    would stay so while the caller's refreshes lag its own reports (an
    idle daemon refreshes only with its periodic tasks), and its first
    requests after would read thousands of its own reports back.
    """
    if not reports:
        return {}
    now = db_api.utcnow()
    stamp = db_api.now_us()
    writer = db_api.writer_id()
    known_ids = known_ids or {}
    keys = [(r["host"], r["hypervisor_hostname"]) for r in reports]
    ids = {key: known_ids[key] for key in keys if key in known_ids}
    unknown_hosts = sorted({host for key in keys if key not in ids for host in key[:1]})
    # Reports of nodes with known ids (every one, once a cloud is
    # registered) are made ready before the write lock is taken.
    shapes = None if unknown_hosts else _update_shapes(reports, keys, ids, set())
    shared = {"v_now": now, "v_stamp": stamp, "v_by": writer,
              "v_seen": read_through_us}
    with db_api.transaction(bulk=True) as conn:
        if unknown_hosts:
            ids.update(_node_ids(conn, unknown_hosts))
            new_keys = {key for key in keys if key not in ids}
            if new_keys:
                conn.execute(sa.insert(_NODES), [
                    dict(r, deleted=False, created_at=now, updated_at=now,
                         changed_at=stamp, changed_by=writer,
                         claimed_memory_mb=0, claimed_vcpus=0,
                         claimed_disk_mb=0, claimed_instances=0)
                    for r, key in zip(reports, keys) if key in new_keys])
                ids.update(_node_ids(conn, unknown_hosts))
            shapes = _update_shapes(reports, keys, ids, new_keys)
        for fields, rows in shapes.items():
            execute_many(conn, _update_statement(fields), rows, shared,
                         {f"v_{k}": k for k in (*fields, "id")})
        execute_many(conn, _BEAT, [{"b_host": host} for host in
                                   sorted({host for host, _ in keys})],
                     {"b_now": now, "b_stamp": stamp, "b_by": writer,
                      "b_seen": read_through_us})
        if unknown_hosts:
            _add_missing_services(conn, unknown_hosts, topic, now, stamp, writer)
    return {key: ids[key] for key in keys}


def _update_shapes(reports: list[dict], keys: list[tuple[str, str]],
                   ids: dict[tuple[str, str], int],
                   inserted: set) -> dict[tuple[str, ...], list[dict]]:
    """The UPDATE parameters of the reports of stored nodes, one list per
    shape of report (reports of one kind of compute carry the same fields;
    an absent field keeps its value), each in id order: two daemons
    storing overlapping batches then lock the rows in the same order and
    cannot deadlock. ``inserted``: keys whose rows were just inserted."""
    shapes: dict[tuple[str, ...], list[dict]] = {}
    for report, key in zip(reports, keys):
        if key in inserted:
            continue
        row = dict(report)
        row["id"] = ids[key]
        shapes.setdefault(tuple(sorted(report)), []).append(row)
    for rows in shapes.values():
        rows.sort(key=lambda row: row["id"])
    return shapes


# Statements of the report path, built once (composing and compiling them
# per batch cost more than running them).
def mine_if_seen(table, writer: str, seen: str):
    """``changed_by`` after a write by this process (a report, a claim):
    the writer's, unless the row holds a change by someone else that the
    writer may not have read yet. ``writer`` and ``seen`` name the bind
    parameters carrying ``db_api.writer_id()`` and the read-through stamp."""
    return sa.case(
        (sa.or_(table.c.changed_by == sa.bindparam(writer),
                table.c.changed_at < sa.bindparam(seen)),
         sa.bindparam(writer)),
        else_=sa.null())


# ``changed_by`` is assigned first: MySQL and MariaDB evaluate a SET list
# left to right, so the CASE must read ``changed_at`` before it moves.
_BEAT = (sa.update(_SERVICES)
         .where(_SERVICES.c.host == sa.bindparam("b_host"),
                _SERVICES.c.binary == COMPUTE_BINARY)
         .ordered_values(
             (_SERVICES.c.changed_by, mine_if_seen(_SERVICES, "b_by", "b_seen")),
             (_SERVICES.c.updated_at, sa.bindparam("b_now")),
             (_SERVICES.c.changed_at, sa.bindparam("b_stamp"))))
_UPDATES: dict[tuple[str, ...], Any] = {}


def _update_statement(fields: tuple[str, ...]):
    """The UPDATE of one shape of report (the fields it carries)."""
    statement = _UPDATES.get(fields)
    if statement is None:
        statement = _UPDATES[fields] = (
            sa.update(_NODES).where(_NODES.c.id == sa.bindparam("v_id"))
            .ordered_values(
                (_NODES.c.changed_by, mine_if_seen(_NODES, "v_by", "v_seen")),
                *[(_NODES.c[k], sa.bindparam(f"v_{k}")) for k in fields],
                (_NODES.c.deleted, False),
                (_NODES.c.updated_at, sa.bindparam("v_now")),
                (_NODES.c.changed_at, sa.bindparam("v_stamp"))))
    return statement


def _node_ids(conn, hosts: list[str]) -> dict[tuple[str, str], int]:
    found = {}
    for start in range(0, len(hosts), _CHUNK):
        rows = conn.execute(
            sa.select(_NODES.c.id, _NODES.c.host, _NODES.c.hypervisor_hostname)
            .where(_NODES.c.host.in_(hosts[start:start + _CHUNK]))).all()
        found.update({(host, node): node_id for node_id, host, node in rows})
    return found


def _add_missing_services(conn, hosts: list[str], topic: str, now, stamp: int,
                          writer: str) -> None:
    """Compute services for the hosts that have none yet, marked as ``writer``'s."""
    known: set[str] = set()
    for start in range(0, len(hosts), _CHUNK):
        known.update(conn.execute(
            sa.select(_SERVICES.c.host).where(
                _SERVICES.c.host.in_(hosts[start:start + _CHUNK]),
                _SERVICES.c.binary == COMPUTE_BINARY)).scalars())
    missing = [h for h in hosts if h not in known]
    if missing:
        conn.execute(sa.insert(_SERVICES), [
            {"host": h, "binary": COMPUTE_BINARY, "topic": topic, "disabled": False,
             "created_at": now, "updated_at": now, "changed_at": stamp,
             "changed_by": writer}
            for h in missing])


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
    service.changed_by = None


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
            .values(deleted=True, changed_at=db_api.now_us(), changed_by=None)
        )
        return result.rowcount > 0


@db_api.retry_on_disconnect
def load_changed(since_us: int, skip_writer: str | None = None
                 ) -> tuple[list, list]:
    """Rows of nodes and compute services changed at or after ``since_us``.

    Plain row mappings (no ORM objects): this runs before decisions and
    must stay cheap. ``since_us=0`` loads everything. Rows whose last
    change is a report stored by ``skip_writer`` are left out: that
    process applied the report before storing it.
    """
    nodes_t = models.ComputeNode.__table__
    services_t = models.Service.__table__
    with db_api.read_session() as session:
        nodes = session.execute(
            sa.select(nodes_t).where(nodes_t.c.changed_at >= since_us,
                                     *_not_by(nodes_t, skip_writer))
        ).mappings().all()
        services = session.execute(
            sa.select(services_t).where(
                services_t.c.binary == COMPUTE_BINARY,
                services_t.c.changed_at >= since_us,
                *_not_by(services_t, skip_writer),
            )
        ).mappings().all()
        return list(nodes), list(services)


@db_api.retry_on_disconnect
def load_services() -> list:
    """Every compute service's row, whatever its stamp: read after an
    operator's change, which a stamp written by a clock behind ours would
    hide from ``load_changed``."""
    services_t = models.Service.__table__
    with db_api.read_session() as session:
        return list(session.execute(
            sa.select(services_t).where(services_t.c.binary == COMPUTE_BINARY)
        ).mappings().all())


def _not_by(table, writer: str | None) -> list:
    if writer is None:
        return []
    return [sa.or_(table.c.changed_by.is_(None), table.c.changed_by != writer)]


@db_api.retry_on_disconnect
def load_node(node_id: int):
    """One node's row and its host's compute service row (either may be None)."""
    nodes_t = models.ComputeNode.__table__
    services_t = models.Service.__table__
    with db_api.read_session() as session:
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
