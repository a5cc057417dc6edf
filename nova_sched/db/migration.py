"""Schema migrations: bring a database to the current schema (alembic).

Alembic runs from code with its script directory inside the package, so an
installed nova-sched needs no alembic.ini. Every function works on a
connection of the given engine (default: the configured one); an in-memory
SQLite database exists only on its own connection, so the embedded demo
passes its engine here.
"""

from __future__ import annotations

import os

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from nova_sched.db import api

MIGRATIONS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations")


def _config(connection: sa.Connection | None = None) -> Config:
    config = Config()
    # Config values go through ConfigParser interpolation: escape '%'.
    config.set_main_option("script_location", MIGRATIONS_DIR.replace("%", "%%"))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The revision the code expects the database to be at."""
    heads = ScriptDirectory.from_config(_config()).get_heads()
    return heads[0]


def db_sync(engine: sa.Engine | None = None) -> str:
    """Create or upgrade the schema to the newest revision; idempotent.

    Returns the revision the database is at afterwards.
    """
    engine = engine or api.get_engine()
    # One transaction: on PostgreSQL and SQLite a failed upgrade leaves
    # nothing behind (MySQL commits each DDL statement regardless).
    with engine.begin() as conn:
        command.upgrade(_config(conn), "head")
    return db_version(engine)


def db_version(engine: sa.Engine | None = None) -> str | None:
    """The database's current revision; None when it was never synced."""
    engine = engine or api.get_engine()
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def schema_is_current(engine: sa.Engine | None = None) -> bool:
    """Whether the database is at the revision this code needs."""
    engine = engine or api.get_engine()
    with engine.connect() as conn:
        current = set(MigrationContext.configure(conn).get_current_heads())
    expected = set(ScriptDirectory.from_config(_config()).get_heads())
    return current == expected
