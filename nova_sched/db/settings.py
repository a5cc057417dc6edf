"""Deployment-wide values kept in the database (``settings``)."""

from __future__ import annotations

import sqlalchemy as sa

from nova_sched.db import api as db_api
from nova_sched.db import models


def get(key: str) -> str | None:
    """The value stored under ``key``, None if there is none."""
    with db_api.read_session() as session:
        return session.execute(sa.select(models.Setting.value).where(
            models.Setting.key == key)).scalar_one_or_none()


def cell_uuid() -> str | None:
    """The cell uuid ``db sync`` generated (used unless the option sets one)."""
    return get("cell_uuid")
