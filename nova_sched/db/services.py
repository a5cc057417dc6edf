"""Compute services: operators take hosts out of scheduling and back.

A service's ``updated_at`` is its heartbeat (written by compute reports), so
an operator's change leaves it alone and moves only ``changed_at``, which
tells every daemon to re-read the row, and counts itself among the
operators' changes (``db.operator_changes``), which no claim decided
before it can pass.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.db import models
from nova_sched.db import operator_changes

COMPUTE_BINARY = "nova-compute"
_MAX_REASON = 255


@db_api.retry_on_disconnect
def disable(host: str, reason: str | None = None) -> dict[str, Any]:
    """Take ``host``'s compute service out of scheduling."""
    if reason is not None and len(reason) > _MAX_REASON:
        raise exception.InvalidInput(
            reason=f"disabled reason is longer than {_MAX_REASON} characters"
        )
    return _set(host, disabled=True, disabled_reason=reason or None)


@db_api.retry_on_disconnect
def enable(host: str) -> dict[str, Any]:
    """Put ``host``'s compute service back into scheduling."""
    return _set(host, disabled=False, disabled_reason=None)


@db_api.retry_on_disconnect
def list_all() -> list[dict[str, Any]]:
    """Every service row, by host and binary, with whether it is up."""
    now = db_api.utcnow()
    with db_api.session_scope() as session:
        rows = session.scalars(
            sa.select(models.Service).order_by(
                models.Service.host, models.Service.binary
            )
        ).all()
        return [_as_dict(row, now) for row in rows]


def is_up(updated_at: dt.datetime | None, now: dt.datetime | None = None) -> bool:
    """Whether a heartbeat at ``updated_at`` is recent enough.

    Within ``[DEFAULT] service_down_time`` either way, as ComputeFilter
    decides (a clock slightly ahead does not make a host look down).
    """
    if updated_at is None:
        return False
    now = now or db_api.utcnow()
    return abs((now - updated_at).total_seconds()) <= CONF.service_down_time


def _set(host: str, **values: Any) -> dict[str, Any]:
    with db_api.session_scope() as session:
        service = session.scalar(
            sa.select(models.Service).where(
                models.Service.host == host,
                models.Service.binary == COMPUTE_BINARY,
            )
        )
        if service is None:
            raise exception.ServiceNotFound(host=host, binary=COMPUTE_BINARY)
        for key, value in values.items():
            setattr(service, key, value)
        service.changed_at = db_api.now_us()
        service.changed_by = None
        # Every decision that starts after this commits must see it
        # (db.operator_changes).
        operator_changes.bump(session)
        session.flush()
        return _as_dict(service, db_api.utcnow())


def _as_dict(service: models.Service, now: dt.datetime) -> dict[str, Any]:
    return {
        "id": service.id,
        "host": service.host,
        "binary": service.binary,
        "topic": service.topic,
        "disabled": bool(service.disabled),
        "disabled_reason": service.disabled_reason,
        "up": is_up(service.updated_at, now),
        "updated_at": service.updated_at,
    }
