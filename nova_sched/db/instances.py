"""Instance records: rows, faults, actions and their events.

These are the tables operators read to learn what happened to a boot
request (CONTRACT section 4). Nothing here ever stores a request's
admin_password or injected files: only sizes, placement and outcome.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any, Iterable

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from nova_sched import json_text
from nova_sched.db import api as db_api
from nova_sched.db import models
from nova_sched.db.driver_sql import execute, execute_many, insert_id

# Fault messages and event tracebacks are Text; keep them bounded so a
# pathological exception cannot bloat the database.
_MAX_TEXT = 65000
# Instances per IN list of the bulk reads.
_IN_CHUNK = 500


def _size(props: dict, key: str) -> int | None:
    value = props.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_INSTANCES = models.Instance.__table__
_REQUESTS = models.InstanceRequest.__table__
_REQUESTS_PRESENT = sa.select(_REQUESTS.c.instance_uuid).where(
    _REQUESTS.c.instance_uuid.in_(sa.bindparam("uuids", expanding=True)))
_FAULTS = models.InstanceFault.__table__
_ACTIONS = models.InstanceAction.__table__
_EVENTS = models.InstanceActionEvent.__table__

# Statements of the per-instance hot path, built once: composing them per
# call cost more than running them; the writes run as the driver's SQL
# (``driver_sql``).
_UUIDS_PRESENT = sa.select(_INSTANCES.c.uuid).where(
    _INSTANCES.c.uuid.in_(sa.bindparam("uuids", expanding=True)))
_ACTIONS_OF = (
    sa.select(_ACTIONS.c.id, _ACTIONS.c.instance_uuid, _ACTIONS.c.request_id)
    .where(_ACTIONS.c.instance_uuid.in_(sa.bindparam("uuids", expanding=True)),
           _ACTIONS.c.action == sa.bindparam("b_action"))
    .order_by(_ACTIONS.c.id))
_OPEN_EVENTS = (
    sa.select(_EVENTS.c.action_id, sa.func.max(_EVENTS.c.id))
    .where(_EVENTS.c.action_id.in_(sa.bindparam("ids", expanding=True)),
           _EVENTS.c.event == sa.bindparam("b_event"),
           _EVENTS.c.finish_time.is_(None))
    .group_by(_EVENTS.c.action_id))
_FINISH_EVENT = (
    sa.update(_EVENTS).where(_EVENTS.c.id == sa.bindparam("b_id"))
    .values(finish_time=sa.bindparam("b_now"), result=sa.bindparam("b_result"),
            traceback=sa.bindparam("b_trace")))
# The action of an event, finished with it: one statement per event, no
# read of the events' actions first.
_FINISH_ACTION_OF_EVENT = (
    sa.update(_ACTIONS).where(_ACTIONS.c.id == sa.select(_EVENTS.c.action_id).where(
        _EVENTS.c.id == sa.bindparam("b_event")).scalar_subquery())
    .values(finish_time=sa.bindparam("b_now"), message=sa.bindparam("b_message")))
_MARK_CAST = (
    sa.update(_INSTANCES).where(_INSTANCES.c.uuid == sa.bindparam("b_uuid"))
    .values(cast_at=sa.bindparam("b_now"), updated_at=sa.bindparam("b_now")))
_INSERT_INSTANCE = _INSTANCES.insert()
_INSERT_REQUEST = _REQUESTS.insert()
_INSERT_ACTION = _ACTIONS.insert()
_INSERT_EVENT = _EVENTS.insert()
_STANDING = (
    sa.select(_INSTANCES.c.uuid, _INSTANCES.c.host, _INSTANCES.c.node,
              _INSTANCES.c.vm_state, _INSTANCES.c.cast_at)
    .where(_INSTANCES.c.uuid.in_(sa.bindparam("uuids", expanding=True))))


@dataclasses.dataclass(frozen=True)
class StoredRequest:
    """What rescheduling an instance needs of its request, secrets left out.

    ``needs_secrets``: the request carried an admin password or injected
    files, which are never stored; such an instance cannot be rescheduled
    from here.
    """

    request_spec: Any
    filter_properties: Any
    requested_networks: Any
    is_first_time: bool
    legacy_bdm_in_spec: bool
    needs_secrets: bool

    def to_row(self) -> dict:
        return {"request_spec": _json(self.request_spec),
                "filter_properties": _json(self.filter_properties),
                "requested_networks": _json(self.requested_networks),
                "is_first_time": bool(self.is_first_time),
                "legacy_bdm_in_spec": bool(self.legacy_bdm_in_spec),
                "needs_secrets": bool(self.needs_secrets)}


def _json(value: Any) -> str:
    # Requests arrive as JSON from the broker; default=str covers a stray
    # non-JSON value rather than failing the request over its copy.
    return json_text.dumps(value, str)


@db_api.retry_on_disconnect
def stored_request(uuid: str) -> StoredRequest | None:
    """The request ``uuid`` was scheduled by, if one was stored."""
    with db_api.read_session() as session:
        row = session.execute(sa.select(_REQUESTS).where(
            _REQUESTS.c.instance_uuid == uuid)).mappings().one_or_none()
    if row is None:
        return None
    return StoredRequest(
        json.loads(row["request_spec"]), json.loads(row["filter_properties"]),
        json.loads(row["requested_networks"] or "null"), row["is_first_time"],
        row["legacy_bdm_in_spec"], row["needs_secrets"])


@db_api.retry_on_disconnect
def ensure_instances(
    uuids: Iterable[str], props: dict, sizes: dict[str, int] | None = None,
    request: StoredRequest | None = None,
) -> None:
    """Record the instances a request names if the database lacks them.

    Existing rows are left alone (the caller's nova may have created them).
    New rows start in vm_state 'building', task_state 'scheduling'. With
    ``request``, it is stored for each instance that has none yet, in the
    same transaction (``stored_request``).
    """
    uuids = list(uuids)
    if not uuids:
        return
    try:
        with db_api.transaction() as conn:
            _ensure(conn, uuids, props, sizes, request, db_api.utcnow())
    except sa_exc.IntegrityError:
        # A concurrent daemon recorded the same instance: theirs stands.
        pass


def _ensure(conn, uuids: list[str], props: dict, sizes: dict[str, int] | None,
            request: StoredRequest | None, now,
            existing: set[str] | None = None) -> None:
    """``existing``: those of ``uuids`` known to have rows (read when None)."""
    if existing is None:
        existing = set(conn.execute(_UUIDS_PRESENT, {"uuids": uuids}).scalars())
    _insert_instances(conn, [u for u in uuids if u not in existing], uuids, props,
                      sizes, now)
    if request is not None:
        stored = (set(conn.execute(_REQUESTS_PRESENT, {"uuids": uuids}).scalars())
                  if existing else set())
        _insert_requests(conn, [u for u in uuids if u not in stored], request, now)


def _insert_instances(conn, new: list[str], uuids: list[str], props: dict,
                      sizes: dict[str, int] | None, now) -> None:
    """Rows for the instances ``new`` of the request naming ``uuids``."""
    if not new:
        return
    common = _new_row(props, sizes, now)
    wanted = set(new)
    execute_many(conn, _INSERT_INSTANCE, [dict(common, uuid=uuid, launch_index=index)
                                          for index, uuid in enumerate(uuids)
                                          if uuid in wanted])


def _new_row(props: dict, sizes: dict[str, int] | None, now) -> dict:
    """An instance's row as a request first records it, less its uuid and
    launch index: building, scheduling, nowhere yet."""
    sizes = sizes or {}
    row = {
        "vm_state": "building",
        "task_state": "scheduling",
        "project_id": _str(props.get("project_id")),
        "user_id": _str(props.get("user_id")),
        "availability_zone": _str(props.get("availability_zone")),
        "created_at": now,
        "updated_at": now,
    }
    for key in ("memory_mb", "vcpus", "root_gb", "ephemeral_gb", "swap"):
        row[key] = sizes.get(key, _size(props, key))
    return row


def _insert_requests(conn, uuids: list[str], request: StoredRequest, now) -> None:
    if uuids:
        execute_many(conn, _INSERT_REQUEST, [
            dict(request.to_row(), instance_uuid=u, created_at=now) for u in uuids])


@dataclasses.dataclass
class NewRequest:
    """A boot request of one instance seen for the first time, recorded by
    the transaction that claims the instance's node (``db.allocations.claim``)
    instead of one of its own: the instance's row, already placed, its
    stored request, its action and its event started as of ``began``.
    ``event_id`` is set once they are committed."""

    uuid: str
    props: dict
    sizes: dict[str, int]
    request: StoredRequest
    start: "EventStart"
    began: dt.datetime
    event_id: int | None = None


def record_placed(conn, new: NewRequest, host: str, node: str, launch_index: int,
                  now: dt.datetime) -> int:
    """Write ``new``'s rows, placed on ``host``/``node``, in the caller's
    transaction; the id of its event, for the caller to set in ``new`` once
    the transaction commits. IntegrityError when the instance has a row
    already (the request was recorded before: delivered again, or published
    twice); the caller's transaction then rolls back whole."""
    row = _new_row(new.props, new.sizes, new.began)
    row.update(uuid=new.uuid, launch_index=launch_index, host=host, node=node,
               scheduled_at=now, updated_at=now)
    execute(conn, _INSERT_INSTANCE, row)
    _insert_requests(conn, [new.uuid], new.request, new.began)
    return _start_new_events(conn, [new.uuid], new.start, new.began)[new.uuid]


@db_api.retry_on_disconnect
def begin_request(uuids: list[str], props: dict, sizes: dict[str, int],
                  request: StoredRequest, start: EventStart,
                  ) -> tuple[dict[str, Standing], dict[str, int]]:
    """A new request's first transaction: ``ensure_instances``, where the
    instances stand, and ``start_events`` for those not handled already
    (neither settled nor cast); returns (standing, uuid -> event id)."""
    for attempt in range(2):
        try:
            with db_api.transaction() as conn:
                now = db_api.utcnow()
                standing = _standing(conn, uuids)
                if not standing:
                    # Seen for the first time: an instance's row, stored
                    # request, action and event are written together, so
                    # none of them exists yet and there is nothing more to
                    # read (four writes where the general way takes nine
                    # statements).
                    _ensure(conn, uuids, props, sizes, request, now, existing=set())
                    return {}, _start_new_events(conn, uuids, start, now)
                _ensure(conn, uuids, props, sizes, request, now, existing=set(standing))
                standing = _standing(conn, uuids)
                pending = to_place(uuids, standing)
                event_ids = _start_events(conn, pending, start, now) if pending else {}
                return standing, event_ids
        except sa_exc.IntegrityError:
            # A concurrent daemon recorded the same instance: read it again.
            if attempt:
                raise
    raise AssertionError("unreachable")


def _str(value: Any) -> str | None:
    return value[:255] if isinstance(value, str) else None


@db_api.retry_on_disconnect
def set_scheduling(uuid: str) -> None:
    """Back to task_state 'scheduling' without a host (a retry starts)."""
    _update(uuid, host=None, node=None, cast_at=None, vm_state="building",
            task_state="scheduling")


# A cast to record: the instance's uuid, and the events (event id ->
# result, traceback, as ``finish_events``) finished with it.
Cast = tuple[str, dict[int, tuple[str, str | None]]]


def mark_cast(uuid: str, finished: dict[int, tuple[str, str | None]] | None = None
              ) -> None:
    """The instance was cast to the compute node it is placed on.

    ``finished`` (event id -> result, traceback, as ``finish_events``) are
    finished in the same transaction: the instance's ``schedule`` event.
    """
    mark_casts([(uuid, finished or {})])


@db_api.retry_on_disconnect
def mark_casts(casts: list[Cast]) -> None:
    """``mark_cast`` of several instances, in one transaction."""
    with db_api.transaction() as conn:
        record_casts(conn, casts, db_api.utcnow())


def record_casts(conn, casts: list[Cast], now: dt.datetime) -> None:
    """Record ``casts`` in the caller's transaction (running it again, as
    after a COMMIT whose answer was lost, changes nothing that matters)."""
    if not casts:
        return
    execute_many(conn, _MARK_CAST, [{"b_uuid": uuid, "b_now": now} for uuid, _ in casts])
    finished = {event: result for _, events in casts for event, result in events.items()}
    if finished:
        _finish_events(conn, finished, now)


@dataclasses.dataclass(frozen=True)
class Standing:
    """Where an instance stands, as a request delivered again must know it."""

    host: str | None
    node: str | None
    vm_state: str | None
    cast: bool

    @property
    def settled(self) -> bool:
        """Built, failed or deleted: no scheduler has anything left to do."""
        return self.vm_state not in (None, "building")

    @property
    def handled(self) -> bool:
        """Settled, or cast to its node: a request delivered again leaves it."""
        return self.settled or self.cast


def to_place(uuids: list[str], standing: dict[str, Standing]) -> list[str]:
    """Those of ``uuids`` a request (delivered again or not) still places."""
    return [u for u in uuids if u not in standing or not standing[u].handled]


@db_api.retry_on_disconnect
def standing(uuids: list[str]) -> dict[str, Standing]:
    """uuid -> Standing, for those of ``uuids`` that are recorded."""
    with db_api.read_session() as conn:
        return _standing(conn, uuids)


def _standing(conn, uuids: list[str]) -> dict[str, Standing]:
    found: dict[str, Standing] = {}
    for chunk in _chunks(uuids):
        for uuid, host, node, vm_state, cast_at in conn.execute(
                _STANDING, {"uuids": chunk}):
            found[uuid] = Standing(host, node, vm_state, cast_at is not None)
    return found


@db_api.retry_on_disconnect
def mark_active(uuid: str, host: str, node: str) -> None:
    """A compute node finished building the instance."""
    _update(uuid, host=host, node=node, vm_state="active", task_state=None)


@db_api.retry_on_disconnect
def mark_error(uuid: str, message: str, code: int = 500, details: str | None = None,
               host: str | None = None) -> None:
    """ERROR state plus a fault row saying why, in one transaction."""
    now = db_api.utcnow()
    with db_api.transaction() as conn:
        conn.execute(sa.update(_INSTANCES).where(_INSTANCES.c.uuid == uuid).values(
            vm_state="error", task_state=None, updated_at=now))
        conn.execute(sa.insert(_FAULTS).values(
            instance_uuid=uuid, code=code, message=message[:_MAX_TEXT],
            details=(details or "")[:_MAX_TEXT], host=host, created_at=now))


def _stuck(cutoff: dt.datetime):
    """Still being scheduled since before ``cutoff``: no host yet, or a
    host it was never cast to."""
    return sa.and_(models.Instance.task_state == "scheduling",
                   models.Instance.vm_state == "building",
                   sa.or_(models.Instance.host.is_(None),
                          models.Instance.cast_at.is_(None)),
                   models.Instance.updated_at < cutoff)


@db_api.retry_on_disconnect
def take_over_stuck(uuid: str, cutoff: dt.datetime) -> bool:
    """Claim a stuck instance for rescheduling (one daemon wins): its
    ``updated_at`` moves, so it is no longer stuck for the others."""
    with db_api.transaction() as conn:
        return conn.execute(
            sa.update(_INSTANCES).where(_INSTANCES.c.uuid == uuid, _stuck(cutoff))
            .values(updated_at=db_api.utcnow())).rowcount == 1


@db_api.retry_on_disconnect
def fail_if_stuck(uuid: str, message: str, cutoff: dt.datetime) -> bool:
    """ERROR plus fault, only if the instance is still stuck (one winner).

    Several daemons may run the recovery at once; the guarded UPDATE lets
    exactly one of them record the fault.
    """
    now = db_api.utcnow()
    with db_api.session_scope() as session:
        changed = session.execute(
            sa.update(models.Instance)
            .where(models.Instance.uuid == uuid, _stuck(cutoff))
            .values(vm_state="error", task_state=None, updated_at=now)
        ).rowcount
        if changed:
            session.add(models.InstanceFault(instance_uuid=uuid, code=500,
                                             message=message, created_at=now))
        return bool(changed)


@db_api.retry_on_disconnect
def mark_deleted(uuid: str) -> None:
    _update(uuid, vm_state="deleted", task_state=None)


@db_api.retry_on_disconnect
def record_unknown(uuids: list[str], host: str) -> None:
    """Instances a compute host runs that the scheduler never placed."""
    now = db_api.utcnow()
    with db_api.session_scope() as session:
        known = set(
            session.execute(
                sa.select(models.Instance.uuid).where(models.Instance.uuid.in_(uuids))
            ).scalars()
        )
        for uuid in uuids:
            if uuid not in known:
                session.add(models.Instance(uuid=uuid, host=host, vm_state="active",
                                            created_at=now, updated_at=now))


def _update(uuid: str, **values) -> None:
    values["updated_at"] = db_api.utcnow()
    with db_api.transaction() as conn:
        conn.execute(sa.update(_INSTANCES).where(_INSTANCES.c.uuid == uuid)
                     .values(**values))


@db_api.retry_on_disconnect
def get(uuid: str) -> models.Instance | None:
    with db_api.session_scope() as session:
        return session.execute(
            sa.select(models.Instance).where(models.Instance.uuid == uuid)
        ).scalar_one_or_none()


@db_api.retry_on_disconnect
def find_stuck(older_than: dt.datetime, limit: int = 100) -> list[str]:
    """Instances still being scheduled since before ``older_than`` (``_stuck``)."""
    with db_api.session_scope() as session:
        return list(
            session.execute(
                sa.select(models.Instance.uuid)
                .where(_stuck(older_than))
                .limit(limit)
            ).scalars()
        )


@db_api.retry_on_disconnect
def in_error(uuids: list[str]) -> list[str]:
    """Those of ``uuids`` in vm_state ERROR."""
    found: list[str] = []
    if not uuids:
        return found
    with db_api.session_scope() as session:
        for chunk in _chunks(uuids):
            found.extend(session.execute(
                sa.select(_INSTANCES.c.uuid).where(
                    _INSTANCES.c.uuid.in_(chunk),
                    _INSTANCES.c.vm_state == "error")).scalars())
    return found


@db_api.retry_on_disconnect
def where_they_stand(uuids: list[str]) -> dict[str, int]:
    """How many of ``uuids`` are unrecorded, waiting for a host, placed, in ERROR."""
    counts = {"not recorded": 0, "waiting for a host": 0, "placed": 0, "error": 0}
    seen = 0
    with db_api.session_scope() as session:
        for chunk in _chunks(uuids):
            for vm_state, host in session.execute(
                    sa.select(_INSTANCES.c.vm_state, _INSTANCES.c.host)
                    .where(_INSTANCES.c.uuid.in_(chunk))):
                seen += 1
                if vm_state == "error":
                    counts["error"] += 1
                elif host is None:
                    counts["waiting for a host"] += 1
                else:
                    counts["placed"] += 1
    counts["not recorded"] = len(uuids) - seen
    return counts


@db_api.retry_on_disconnect
def latest_fault_messages(uuids: list[str]) -> dict[str, str]:
    """uuid -> message of the instance's latest fault, for those that have one."""
    messages: dict[str, str] = {}
    if not uuids:
        return messages
    with db_api.session_scope() as session:
        for chunk in _chunks(uuids):
            for uuid, message in session.execute(
                    sa.select(_FAULTS.c.instance_uuid, _FAULTS.c.message)
                    .where(_FAULTS.c.instance_uuid.in_(chunk))
                    .order_by(_FAULTS.c.id)):
                messages[uuid] = message  # oldest first: the latest wins
    return messages


def _chunks(uuids: list[str]):
    # Bounded IN lists: some backends limit a statement's parameters.
    for start in range(0, len(uuids), _IN_CHUNK):
        yield uuids[start:start + _IN_CHUNK]


# -- instance actions -----------------------------------------------------

@dataclasses.dataclass(frozen=True)
class EventStart:
    """An event to start under each instance's action: the action's and the
    event's names, the request and its caller, the scheduler's host."""

    action: str
    event: str
    request_id: str
    user_id: str | None
    project_id: str | None
    host: str


@db_api.retry_on_disconnect
def start_events(uuids: list[str], start: EventStart) -> dict[str, int]:
    """Start ``start.event`` under each instance's action: uuid -> event id.

    The action row is the instance's (action, request) one, else its latest
    action of that name (a retry comes back under a new request id), and is
    created when missing, as nova records 'create' for a boot. An event of
    that name still open under the action (the request delivered again
    after its daemon died) is taken over rather than started twice.
    """
    with db_api.transaction() as conn:
        return _start_events(conn, uuids, start, db_api.utcnow())


def _start_events(conn, uuids: list[str], start: EventStart, now) -> dict[str, int]:
    event_ids: dict[str, int] = {}
    rows = conn.execute(_ACTIONS_OF, {"uuids": uuids, "b_action": start.action}).all()
    action_ids: dict[str, int] = {}
    exact: dict[str, int] = {}
    for action_id, uuid, rid in rows:  # oldest first: the latest wins
        action_ids[uuid] = action_id
        if rid == start.request_id:
            exact[uuid] = action_id
    action_ids.update(exact)
    open_events = dict(conn.execute(_OPEN_EVENTS, {
        "ids": list(exact.values()) or [-1], "b_event": start.event}).all())
    event_ids.update(_start_new_events(
        conn, [u for u in uuids if u not in action_ids], start, now))
    for uuid, action_id in action_ids.items():
        event_id = open_events.get(action_id)
        if event_id is None:
            event_id = insert_id(conn, _INSERT_EVENT, {
                "action_id": action_id, "event": start.event,
                "start_time": now, "host": start.host})
        event_ids[uuid] = event_id
    return event_ids


def _start_new_events(conn, uuids: list[str], start: EventStart, now) -> dict[str, int]:
    """``_start_events`` for instances that have no action yet."""
    event_ids: dict[str, int] = {}
    for uuid in uuids:
        action_id = insert_id(conn, _INSERT_ACTION, {
            "action": start.action, "instance_uuid": uuid,
            "request_id": start.request_id, "user_id": _str(start.user_id),
            "project_id": _str(start.project_id), "start_time": now,
        })
        event_ids[uuid] = insert_id(conn, _INSERT_EVENT, {
            "action_id": action_id, "event": start.event, "start_time": now,
            "host": start.host})
    return event_ids


@db_api.retry_on_disconnect
def finish_events(results: dict[int, tuple[str, str | None]]) -> None:
    """Finish events: event id -> (result, traceback); their actions too."""
    if not results:
        return
    with db_api.transaction() as conn:
        _finish_events(conn, results, db_api.utcnow())


def _finish_events(conn, results: dict[int, tuple[str, str | None]], now) -> None:
    execute_many(conn, _FINISH_EVENT, [
        {"b_id": event_id, "b_now": now, "b_result": result,
         "b_trace": trace[:_MAX_TEXT] if trace else None}
        for event_id, (result, trace) in results.items()])
    execute_many(conn, _FINISH_ACTION_OF_EVENT, [
        {"b_event": event_id, "b_now": now,
         "b_message": result if result == "Error" else None}
        for event_id, (result, _trace) in results.items()])
