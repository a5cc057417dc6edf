"""Instance records: rows, faults, actions and their events.

These are the tables operators read to learn what happened to a boot
request (CONTRACT section 4). Nothing here ever stores a request's
admin_password or injected files: only sizes, placement and outcome.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Iterable

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from nova_sched.db import api as db_api
from nova_sched.db import models

# Fault messages and event tracebacks are Text; keep them bounded so a
# pathological exception cannot bloat the database.
_MAX_TEXT = 65000


def _size(props: dict, key: str) -> int | None:
    value = props.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@db_api.retry_on_disconnect
def ensure_instances(
    uuids: Iterable[str], props: dict, sizes: dict[str, int] | None = None
) -> None:
    """Record the instances a request names if the database lacks them.

    Existing rows are left alone (the caller's nova may have created them).
    New rows start in vm_state 'building', task_state 'scheduling'.
    """
    uuids = list(uuids)
    if not uuids:
        return
    now = db_api.utcnow()
    sizes = sizes or {}
    with db_api.session_scope() as session:
        existing = set(
            session.execute(
                sa.select(models.Instance.uuid).where(models.Instance.uuid.in_(uuids))
            ).scalars()
        )
        for index, uuid in enumerate(uuids):
            if uuid in existing:
                continue
            session.add(
                models.Instance(
                    uuid=uuid,
                    vm_state="building",
                    task_state="scheduling",
                    memory_mb=sizes.get("memory_mb", _size(props, "memory_mb")),
                    vcpus=sizes.get("vcpus", _size(props, "vcpus")),
                    root_gb=sizes.get("root_gb", _size(props, "root_gb")),
                    ephemeral_gb=sizes.get("ephemeral_gb", _size(props, "ephemeral_gb")),
                    swap=sizes.get("swap", _size(props, "swap")),
                    project_id=_str(props.get("project_id")),
                    user_id=_str(props.get("user_id")),
                    availability_zone=_str(props.get("availability_zone")),
                    launch_index=index,
                    created_at=now,
                    updated_at=now,
                )
            )
        try:
            session.flush()
        except sa_exc.IntegrityError:
            # A concurrent daemon recorded the same instance: theirs stands.
            session.rollback()


def _str(value: Any) -> str | None:
    return value[:255] if isinstance(value, str) else None


@db_api.retry_on_disconnect
def set_scheduling(uuid: str) -> None:
    """Back to task_state 'scheduling' without a host (a retry starts)."""
    _update(uuid, host=None, node=None, vm_state="building", task_state="scheduling")


@db_api.retry_on_disconnect
def set_placement(uuid: str, host: str, node: str, launch_index: int) -> None:
    _update(
        uuid,
        host=host,
        node=node,
        scheduled_at=db_api.utcnow(),
        launch_index=launch_index,
    )


@db_api.retry_on_disconnect
def mark_active(uuid: str, host: str, node: str) -> None:
    """A compute node finished building the instance."""
    _update(uuid, host=host, node=node, vm_state="active", task_state=None)


@db_api.retry_on_disconnect
def mark_error(uuid: str, message: str, code: int = 500, details: str | None = None,
               host: str | None = None) -> None:
    """ERROR state plus a fault row saying why, in one transaction."""
    now = db_api.utcnow()
    with db_api.session_scope() as session:
        session.execute(
            sa.update(models.Instance)
            .where(models.Instance.uuid == uuid)
            .values(vm_state="error", task_state=None, updated_at=now)
        )
        session.add(
            models.InstanceFault(
                instance_uuid=uuid,
                code=code,
                message=message[:_MAX_TEXT],
                details=(details or "")[:_MAX_TEXT],
                host=host,
                created_at=now,
            )
        )


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
            .where(
                models.Instance.uuid == uuid,
                models.Instance.task_state == "scheduling",
                models.Instance.host.is_(None),
                models.Instance.updated_at < cutoff,
            )
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
    with db_api.session_scope() as session:
        session.execute(
            sa.update(models.Instance).where(models.Instance.uuid == uuid).values(**values)
        )


@db_api.retry_on_disconnect
def get(uuid: str) -> models.Instance | None:
    with db_api.session_scope() as session:
        return session.execute(
            sa.select(models.Instance).where(models.Instance.uuid == uuid)
        ).scalar_one_or_none()


@db_api.retry_on_disconnect
def find_stuck(older_than: dt.datetime, limit: int = 100) -> list[str]:
    """Instances still 'scheduling' without a host since before ``older_than``."""
    with db_api.session_scope() as session:
        return list(
            session.execute(
                sa.select(models.Instance.uuid)
                .where(
                    models.Instance.task_state == "scheduling",
                    models.Instance.host.is_(None),
                    models.Instance.vm_state == "building",
                    models.Instance.updated_at < older_than,
                )
                .limit(limit)
            ).scalars()
        )


# -- instance actions -----------------------------------------------------

@db_api.retry_on_disconnect
def action_start(uuid: str, action: str, request_id: str, user_id: str | None,
                 project_id: str | None) -> int:
    """The action row for (instance, request), created when missing."""
    now = db_api.utcnow()
    with db_api.session_scope() as session:
        row = session.execute(
            sa.select(models.InstanceAction).where(
                models.InstanceAction.instance_uuid == uuid,
                models.InstanceAction.action == action,
                models.InstanceAction.request_id == request_id,
            )
        ).scalar_one_or_none()
        if row is None:
            row = session.execute(
                sa.select(models.InstanceAction)
                .where(
                    models.InstanceAction.instance_uuid == uuid,
                    models.InstanceAction.action == action,
                )
                .order_by(models.InstanceAction.id.desc())
                .limit(1)
            ).scalar_one_or_none()
        if row is None:
            row = models.InstanceAction(
                action=action,
                instance_uuid=uuid,
                request_id=request_id,
                user_id=_str(user_id),
                project_id=_str(project_id),
                start_time=now,
            )
            session.add(row)
            session.flush()
        return row.id


@db_api.retry_on_disconnect
def event_start(action_id: int, event: str, host: str) -> int:
    with db_api.session_scope() as session:
        row = models.InstanceActionEvent(
            action_id=action_id, event=event, start_time=db_api.utcnow(), host=host
        )
        session.add(row)
        session.flush()
        return row.id


@db_api.retry_on_disconnect
def event_finish(event_id: int, result: str, traceback: str | None = None) -> None:
    now = db_api.utcnow()
    with db_api.session_scope() as session:
        session.execute(
            sa.update(models.InstanceActionEvent)
            .where(models.InstanceActionEvent.id == event_id)
            .values(
                finish_time=now,
                result=result,
                traceback=traceback[:_MAX_TEXT] if traceback else None,
            )
        )
        action_id = session.execute(
            sa.select(models.InstanceActionEvent.action_id).where(
                models.InstanceActionEvent.id == event_id
            )
        ).scalar_one()
        session.execute(
            sa.update(models.InstanceAction)
            .where(models.InstanceAction.id == action_id)
            .values(finish_time=now, message=result if result == "Error" else None)
        )


@db_api.retry_on_disconnect
def hosts_of(uuids: Iterable[str]) -> dict[str, str]:
    """uuid -> host of the given instances that have one (claimed or placed).

    A claim counts before the instance row has its host, so instances being
    placed right now are found too.
    """
    uuids = [u for u in uuids if isinstance(u, str)]
    if not uuids:
        return {}
    with db_api.session_scope() as session:
        found = dict(session.execute(
            sa.select(models.Allocation.instance_uuid, models.ComputeNode.host)
            .join(models.ComputeNode,
                  models.ComputeNode.id == models.Allocation.compute_node_id)
            .where(models.Allocation.instance_uuid.in_(uuids))).all())
        rest = [u for u in uuids if u not in found]
        if rest:
            found.update(session.execute(
                sa.select(models.Instance.uuid, models.Instance.host).where(
                    models.Instance.uuid.in_(rest),
                    models.Instance.host.is_not(None),
                    models.Instance.vm_state.not_in(("error", "deleted")))).all())
        return found
