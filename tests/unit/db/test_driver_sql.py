"""The driver's SQL writes what SQLAlchemy's own execution writes, on every backend."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from nova_sched.db import api as db_api
from nova_sched.db.driver_sql import execute, execute_many, insert_id

_META = sa.MetaData()
_TABLE = sa.Table(
    "em_rows", _META,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(64)),
    sa.Column("size", sa.Integer),
    sa.Column("flag", sa.Boolean),
    sa.Column("seen", sa.DateTime),
    sa.Column("owner", sa.String(32)),
)
# Built once, as the report path builds its statements: a bind used twice,
# a literal, a shared datetime (SQLite's needs a bind processor) and a CASE
# reading the row's old value.
_UPDATE = (
    sa.update(_TABLE).where(_TABLE.c.id == sa.bindparam("v_id"))
    .ordered_values(
        (_TABLE.c.owner, sa.case((_TABLE.c.owner == sa.bindparam("who"),
                                  sa.bindparam("who")), else_=sa.null())),
        (_TABLE.c.size, sa.bindparam("v_size")),
        (_TABLE.c.flag, True),
        (_TABLE.c.seen, sa.bindparam("when"))))


def _rows(conn):
    return [tuple(row) for row in conn.execute(
        sa.select(_TABLE).order_by(_TABLE.c.id))]


def _fill(conn):
    conn.execute(sa.insert(_TABLE), [
        {"id": n, "name": f"r{n}", "size": 0, "flag": False, "owner": "a" if n % 2 else "b"}
        for n in range(1, 7)])


def test_same_rows_as_sqlalchemys_executemany(empty_engine):
    when = dt.datetime(2026, 12, 1, 18, 30, 5, 123456)
    changes = [{"id": n, "size": n * 10} for n in (2, 3, 5)]
    _META.create_all(empty_engine)
    try:
        with empty_engine.begin() as conn:
            _fill(conn)
            execute_many(conn, _UPDATE, changes, {"who": "a", "when": when},
                         {"v_id": "id", "v_size": "size"})
            ours = _rows(conn)
            conn.execute(sa.delete(_TABLE))
            _fill(conn)
            conn.execute(_UPDATE, [{"v_id": c["id"], "v_size": c["size"],
                                    "who": "a", "when": when} for c in changes])
            theirs = _rows(conn)
    finally:
        _META.drop_all(empty_engine)
    assert ours == theirs
    by_id = {row[0]: row for row in ours}
    # MySQL's DATETIME keeps whole seconds.
    assert by_id[3][4] in (when, when.replace(microsecond=0))
    assert by_id[3][2:4] + by_id[3][5:] == (30, True, "a")    # owner was "a": kept
    assert by_id[2][2:4] + by_id[2][5:] == (20, True, None)   # owner was "b": cleared
    assert by_id[1][2:4] == (0, False)               # not in the batch


def test_a_missing_value_is_an_error_not_a_null(empty_engine):
    _META.create_all(empty_engine)
    try:
        with empty_engine.begin() as conn:
            _fill(conn)
            with pytest.raises(KeyError):
                execute_many(conn, _UPDATE, [{"id": 1}], {"who": "a"},
                             {"v_id": "id", "v_size": "size"})
    finally:
        _META.drop_all(empty_engine)


_SERIAL = sa.Table(
    "em_serial", _META,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(64)),
    sa.Column("seen", sa.DateTime),
)
_INSERT_SERIAL = sa.insert(_SERIAL)


def test_one_row_as_sqlalchemy_writes_it_and_its_id(empty_engine):
    when = dt.datetime(2026, 12, 2, 17, 40, 1, 250000)
    _META.create_all(empty_engine)
    try:
        with empty_engine.begin() as conn:
            _fill(conn)
            # An UPDATE's rowcount counts the rows it matched, as SQLAlchemy's.
            changed = execute(conn, _UPDATE, {"v_id": 3, "v_size": 7, "who": "a",
                                              "when": when})
            assert changed == 1
            assert execute(conn, _UPDATE, {"v_id": 99, "v_size": 7, "who": "a",
                                           "when": when}) == 0
            ours = _rows(conn)[2]
            conn.execute(_UPDATE, {"v_id": 3, "v_size": 7, "who": "a", "when": when})
            assert _rows(conn)[2] == ours
            # Ids as the database gives them, one after the other.
            first = insert_id(conn, _INSERT_SERIAL, {"name": "one", "seen": when})
            second = insert_id(conn, _INSERT_SERIAL, {"name": "two", "seen": when})
            byid = {row.id: row for row in conn.execute(sa.select(_SERIAL))}
            assert second > first and byid[first].name == "one" and byid[second].name == "two"
            assert byid[first].seen in (when, when.replace(microsecond=0))
            # A duplicate key is SQLAlchemy's IntegrityError, as callers expect.
            with pytest.raises(sa.exc.IntegrityError):
                execute(conn, sa.insert(_TABLE), {"id": 3, "name": "again", "size": 0,
                                                  "flag": False, "seen": when,
                                                  "owner": "a"})
    finally:
        _META.drop_all(empty_engine)


def test_datetimes_stored_as_the_very_text_sqlalchemy_stores(empty_engine):
    """SQLite keeps datetimes as text, which the driver's SQL writes itself
    (faster than SQLAlchemy's processor): the same characters whatever
    the microseconds, a timezone or a plain date."""
    values = [dt.datetime(2026, 12, 6, 7, 18, 28, 123456), dt.datetime(2026, 12, 6, 7, 18, 28),
              dt.datetime(2026, 12, 6, 7, 18, 28, 5), dt.date(2026, 12, 6)]
    if empty_engine.dialect.name == "sqlite":
        values.append(dt.datetime(2026, 12, 6, 7, 18, 28, 9, tzinfo=dt.timezone.utc))
    _META.create_all(empty_engine)
    try:
        with empty_engine.begin() as conn:
            _fill(conn)
            for n, when in enumerate(values, 1):
                execute(conn, _UPDATE, {"v_id": n, "v_size": 1, "who": "a", "when": when})
            texts = "SELECT CAST(seen AS CHAR(40)) FROM em_rows ORDER BY id"
            ours = conn.exec_driver_sql(texts).scalars().all()
            for n, when in enumerate(values, 1):
                conn.execute(_UPDATE, {"v_id": n, "v_size": 1, "who": "a", "when": when})
            assert conn.exec_driver_sql(texts).scalars().all() == ours
            assert ours[0].startswith("2026-12-06 07:18:28")
    finally:
        _META.drop_all(empty_engine)


_OWN_ID = {"postgresql": "SELECT pg_backend_pid()", "mysql": "SELECT CONNECTION_ID()"}
_KILL = {"postgresql": "SELECT pg_terminate_backend({})", "mysql": "KILL {}"}


def test_a_connection_lost_under_a_statement_is_sqlalchemys_and_invalidated(empty_engine):
    """As ``conn.execute`` raises it: an OperationalError marked
    ``connection_invalidated``, which the retries take for a lost
    connection, and the connection is not handed out again."""
    backend = empty_engine.dialect.name
    if backend not in _OWN_ID:
        pytest.skip("SQLite's connection is a file: nothing to lose")
    _META.create_all(empty_engine)
    try:
        with pytest.raises(sa.exc.DBAPIError) as caught:
            with empty_engine.begin() as conn:
                _fill(conn)
                own = conn.exec_driver_sql(_OWN_ID[backend]).scalar_one()
                with empty_engine.connect() as killer:
                    killer.exec_driver_sql(_KILL[backend].format(int(own)))
                    killer.commit()
                execute(conn, _UPDATE, {"v_id": 3, "v_size": 7, "who": "a",
                                        "when": dt.datetime(2026, 12, 4)})
        assert caught.value.connection_invalidated
        assert db_api.transient_reason(caught.value) == "connection lost"
        assert "em_rows" in str(caught.value)
        with empty_engine.connect() as conn:  # the pool gives a live one
            assert conn.exec_driver_sql("SELECT 1").scalar_one() == 1
    finally:
        _META.drop_all(empty_engine)
