"""Database fixtures: a migrated SQLite database, and empty server databases.

The PostgreSQL and MariaDB databases are created fresh, uniquely named, for
each test that asks for one and dropped after it; a server that does not
answer skips the test with the reason (any other failure fails it).
"""

from __future__ import annotations

from typing import Iterator

import pytest
import sqlalchemy as sa

from nova_sched.db import api as db_api
from tests.db_backends import temporary_database

@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def empty_engine(request, tmp_path) -> Iterator[sa.Engine]:
    """An engine on an empty database of each supported backend."""
    if request.param == "sqlite":
        engine = db_api.create_engine(f"sqlite:///{tmp_path}/empty.sqlite")
        yield engine
        engine.dispose()
        return
    with temporary_database(request.param) as url:
        engine = db_api.create_engine(url)
        try:
            yield engine
        finally:
            engine.dispose()
