"""Database fixtures: a migrated SQLite database, and empty server databases.

The PostgreSQL and MariaDB databases are created fresh, uniquely named, for
each test that asks for one and dropped after it; a server that does not
answer skips the test with the reason (any other failure fails it).
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.db import migration

SERVERS = {
    "postgresql": ("postgresql+psycopg2://postgres@127.0.0.1:5432/", "postgres"),
    "mysql": ("mysql+pymysql://root@127.0.0.1:3306/", ""),
}
_UNREACHABLE = ("connect", "refused", "timed out", "timeout", "no route")


@pytest.fixture
def db() -> Iterator[sa.Engine]:
    """The process's engine on a fresh, migrated in-memory SQLite database."""
    CONF.set_override("connection", "sqlite://", group="database")
    engine = db_api.configure("sqlite://")
    migration.db_sync(engine)
    yield engine
    engine.dispose()


@contextlib.contextmanager
def server_database(kind: str) -> Iterator[str]:
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


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def empty_engine(request, tmp_path) -> Iterator[sa.Engine]:
    """An engine on an empty database of each supported backend."""
    if request.param == "sqlite":
        engine = db_api.create_engine(f"sqlite:///{tmp_path}/empty.sqlite")
        yield engine
        engine.dispose()
        return
    with server_database(request.param) as url:
        engine = db_api.create_engine(url)
        try:
            yield engine
        finally:
            engine.dispose()
