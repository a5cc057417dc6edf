"""Throw-away databases on the PostgreSQL and MariaDB servers of the test machine.

Each use creates its own uniquely named database and drops it after, so runs
never see each other's rows. A server that does not answer skips the test
with the reason; any other failure fails it.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

SERVERS = {
    "postgresql": ("postgresql+psycopg2://postgres@127.0.0.1:5432/", "postgres"),
    "mysql": ("mysql+pymysql://root@127.0.0.1:3306/", ""),
}
_UNREACHABLE = ("connect", "refused", "timed out", "timeout", "no route")


@contextlib.contextmanager
def scheduler_database(url: str) -> Iterator[sa.Engine]:
    """The process's database at ``url``, migrated; its engine disposed after."""
    from nova_sched.conf import CONF
    from nova_sched.db import api as db_api
    from nova_sched.db import migration

    CONF.set_override("connection", url, group="database")
    engine = db_api.configure(url)
    try:
        migration.db_sync(engine)
        yield engine
    finally:
        engine.dispose()


@contextlib.contextmanager
def server_scheduler_database(kind: str) -> Iterator[sa.Engine]:
    """``scheduler_database`` on a new database of ``kind``'s server."""
    with temporary_database(kind) as url, scheduler_database(url) as engine:
        yield engine


@contextlib.contextmanager
def temporary_database(kind: str) -> Iterator[str]:
    """Yield the URL of a new empty database on ``kind``'s server; drop it after."""
    base, admin_db = SERVERS[kind]
    admin = sa.create_engine(base + admin_db, isolation_level="AUTOCOMMIT")
    name = f"nova_sched_test_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
    except sa_exc.OperationalError as err:
        admin.dispose()
        text = str(err.orig).lower()
        if any(marker in text for marker in _UNREACHABLE):
            pytest.skip(f"{kind} server at {base} unreachable: {str(err.orig)[:160]}")
        raise
    try:
        yield base + name
    finally:
        with admin.connect() as conn:
            if kind == "postgresql":
                # Pooled connections of the code under test may linger.
                conn.exec_driver_sql(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    f"WHERE datname = '{name}' AND pid <> pg_backend_pid()"
                )
            conn.exec_driver_sql(f"DROP DATABASE {name}")
        admin.dispose()
