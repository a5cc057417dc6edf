"""Throw-away databases on the PostgreSQL and MariaDB servers of the test machine.

Each test run creates its own uniquely named database and drops it after,
so runs never see each other's rows. A backend whose server does not answer
is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Iterator

import pytest
import sqlalchemy as sa

SERVERS = {
    "postgresql": "postgresql+psycopg2://postgres@127.0.0.1:5432/{db}",
    "mysql": "mysql+pymysql://root@127.0.0.1:3306/{db}",
}
_ADMIN_DB = {"postgresql": "postgres", "mysql": ""}


@contextlib.contextmanager
def temporary_database(kind: str) -> Iterator[str]:
    """Yield the URL of a fresh empty database on ``kind``'s server."""
    name = f"nova_sched_test_{uuid.uuid4().hex[:12]}"
    admin_url = SERVERS[kind].format(db=_ADMIN_DB[kind])
    try:
        admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT",
                                 connect_args={"connect_timeout": 3})
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
    except Exception as err:  # server absent or refusing: not our failure
        pytest.skip(f"{kind} server at 127.0.0.1 not usable: {type(err).__name__}: "
                    f"{str(err).splitlines()[0][:120]}")
    try:
        yield SERVERS[kind].format(db=name)
    finally:
        with admin.connect() as conn:
            if kind == "postgresql":
                conn.exec_driver_sql(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    f"WHERE datname = '{name}' AND pid <> pg_backend_pid()")
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
        admin.dispose()
