"""Starts of redelivered requests (``request_deliveries``).

Only requests the broker delivered again are counted (a daemon died
holding them, or they killed it): the first delivery costs nothing here.
"""

from __future__ import annotations

import datetime as dt
import uuid as uuid_lib

import sqlalchemy as sa

from nova_sched.db import api as db_api
from nova_sched.db import models

_DELIVERIES = models.RequestDelivery.__table__


def start(message_id: str, method: str | None, host: str) -> int:
    """Count one more start of a redelivered request; the count now.

    Safe to run again after a COMMIT whose outcome was lost: the start's
    token makes the second run count nothing.
    """
    return _start(message_id, (method or "")[:64], host[:255],
                  f"{db_api.writer_id()}:{uuid_lib.uuid4().hex}")


@db_api.retry_on_disconnect
def _start(message_id: str, method: str, host: str, token: str) -> int:
    now = db_api.utcnow()
    with db_api.transaction() as conn:
        row = conn.execute(
            sa.select(_DELIVERIES.c.starts, _DELIVERIES.c.last_token)
            .where(_DELIVERIES.c.message_id == message_id)).first()
        if row is None:
            conn.execute(sa.insert(_DELIVERIES).values(
                message_id=message_id, method=method, starts=1, last_token=token,
                last_host=host, first_started_at=now, last_started_at=now))
            return 1
        if row.last_token == token:
            return row.starts
        conn.execute(
            sa.update(_DELIVERIES).where(_DELIVERIES.c.message_id == message_id)
            .values(starts=_DELIVERIES.c.starts + 1, last_token=token,
                    last_host=host, last_started_at=now))
        return row.starts + 1


@db_api.retry_on_disconnect
def finish(message_id: str) -> None:
    """The request was handled (or given up): forget it."""
    with db_api.transaction() as conn:
        conn.execute(sa.delete(_DELIVERIES).where(
            _DELIVERIES.c.message_id == message_id))


@db_api.retry_on_disconnect
def purge(older_than: dt.datetime) -> int:
    """Forget requests last started before ``older_than`` (a daemon that
    died for good while holding one never finished it); how many."""
    with db_api.transaction() as conn:
        return conn.execute(sa.delete(_DELIVERIES).where(
            _DELIVERIES.c.last_started_at < older_than)).rowcount
