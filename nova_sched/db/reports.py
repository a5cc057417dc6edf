"""Read-only reports for operators: the hosts' usage and one instance's story.

``host list`` shows the two views of a node's usage side by side: what the
scheduler has claimed on it (which decides placement) and what the node
reported itself using.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from nova_sched import exception
from nova_sched.db import api as db_api
from nova_sched.db import models
from nova_sched.db import services


@db_api.retry_on_disconnect
def host_list() -> list[dict[str, Any]]:
    """Every compute node that is not deleted, by host and node name."""
    node = models.ComputeNode
    service = models.Service
    now = db_api.utcnow()
    with db_api.session_scope() as session:
        rows = session.execute(
            sa.select(node, service)
            .outerjoin(
                service,
                sa.and_(
                    service.host == node.host,
                    service.binary == services.COMPUTE_BINARY,
                ),
            )
            .where(node.deleted == sa.false())
            .order_by(node.host, node.hypervisor_hostname)
        ).all()
        return [_host_row(cn, svc, now) for cn, svc in rows]


def _host_row(cn: models.ComputeNode, svc: models.Service | None, now) -> dict:
    # Without a service row (never expected: a report writes both) the
    # node's own report time stands in for the heartbeat.
    heartbeat = svc.updated_at if svc is not None else cn.updated_at
    return {
        "host": cn.host,
        "node": cn.hypervisor_hostname,
        "up": services.is_up(heartbeat, now),
        "disabled": bool(svc.disabled) if svc is not None else False,
        "disabled_reason": svc.disabled_reason if svc is not None else None,
        "updated_at": heartbeat,
        "memory_mb": cn.memory_mb,
        "claimed_memory_mb": cn.claimed_memory_mb,
        "memory_mb_used": cn.memory_mb_used,
        "reserved_host_memory_mb": cn.reserved_host_memory_mb,
        "vcpus": cn.vcpus,
        "claimed_vcpus": cn.claimed_vcpus,
        "vcpus_used": cn.vcpus_used,
        "reserved_host_cpus": cn.reserved_host_cpus,
        "local_gb": cn.local_gb,
        "claimed_disk_mb": cn.claimed_disk_mb,
        "local_gb_used": cn.local_gb_used,
        "reserved_host_disk_mb": cn.reserved_host_disk_mb,
        "instances": cn.claimed_instances,
        "running_vms": cn.running_vms,
    }


@db_api.retry_on_disconnect
def instance_show(uuid: str) -> dict[str, Any]:
    """An instance's placement, state, faults and actions with their events.

    Faults and actions come oldest first, the order they happened in.
    """
    with db_api.session_scope() as session:
        inst = session.scalar(
            sa.select(models.Instance).where(models.Instance.uuid == uuid)
        )
        if inst is None:
            raise exception.InstanceNotFound(uuid=uuid)
        faults = session.scalars(
            sa.select(models.InstanceFault)
            .where(models.InstanceFault.instance_uuid == uuid)
            .order_by(models.InstanceFault.created_at, models.InstanceFault.id)
        ).all()
        actions = session.scalars(
            sa.select(models.InstanceAction)
            .where(models.InstanceAction.instance_uuid == uuid)
            .order_by(models.InstanceAction.start_time, models.InstanceAction.id)
        ).all()
        events = session.scalars(
            sa.select(models.InstanceActionEvent)
            .where(models.InstanceActionEvent.action_id.in_([a.id for a in actions]))
            .order_by(models.InstanceActionEvent.start_time, models.InstanceActionEvent.id)
        ).all() if actions else []
        by_action: dict[int, list[dict]] = {a.id: [] for a in actions}
        for ev in events:
            by_action[ev.action_id].append(_columns(ev, _EVENT_FIELDS))
        result = _columns(inst, _INSTANCE_FIELDS)
        result["faults"] = [_columns(f, _FAULT_FIELDS) for f in faults]
        result["actions"] = [
            {**_columns(a, _ACTION_FIELDS), "events": by_action[a.id]}
            for a in actions
        ]
        return result


_INSTANCE_FIELDS = (
    "uuid", "host", "node", "vm_state", "task_state", "memory_mb", "vcpus",
    "root_gb", "ephemeral_gb", "swap", "project_id", "user_id",
    "availability_zone", "launch_index", "scheduled_at", "created_at",
    "updated_at",
)
_FAULT_FIELDS = ("code", "message", "details", "host", "created_at")
_ACTION_FIELDS = (
    "id", "action", "request_id", "user_id", "project_id", "start_time",
    "finish_time", "message",
)
_EVENT_FIELDS = ("event", "start_time", "finish_time", "result", "traceback", "host")


def _columns(row: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(row, name) for name in fields}
