"""Hot-path statements run as the driver's own SQL, compiled once per dialect.

SQLAlchemy's ``conn.execute`` of even a prebuilt statement costs about a
tenth of a millisecond on these machines before the database sees it (its
cache key, execution context, parameter dictionary and bind processors, in
Python): on a boot request's ten statements more than the database spends,
and for an executemany it does that per row (on the compute-report path a
third of the daemon's CPU). Here a statement is compiled once per dialect
and kept; its binds' values are passed through their types' bind
processors as SQLAlchemy would (only where a type has one); the values
every row shares are processed once; each row becomes the tuple
(positional paramstyles: SQLite) or dictionary (named ones: psycopg2,
PyMySQL) the driver reads, and the driver's own cursor of the connection
runs it (``run``): ``exec_driver_sql`` still cost a boot request's dozen
statements a tenth of its CPU in execution contexts and result objects.
Errors are made SQLAlchemy's as ``Connection.execute`` makes them (the
same exception classes, a lost connection invalidated and marked so), for
``db.api.retry_on_disconnect`` and the callers to judge. The SQL is
SQLAlchemy's own compilation of the statement: the same statement
``conn.execute`` would run. Nothing here fires SQLAlchemy's per-statement
events; the engine listens to none.
"""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any, Callable, Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc


class _Plan:
    """A statement compiled for one dialect, and how to fill it."""

    __slots__ = ("statement", "sql", "names", "positional", "processors", "defaults",
                 "plain_fill")

    def __init__(self, statement, dialect, column_keys: tuple[str, ...] | None = None):
        compiled = statement.compile(dialect=dialect, column_keys=column_keys)
        self.statement = statement  # held, so its id() is never reused
        self.sql: str = compiled.string
        self.positional: bool = compiled.positional
        # Every bind name in the order the driver wants them (a name used
        # twice appears twice in positional styles).
        self.names: list[str] = (list(compiled.positiontup) if compiled.positional
                                 else list(compiled.bind_names.values()))
        self.processors: dict[str, Callable] = {}
        # Literal values of the statement itself (``deleted = false``).
        self.defaults: dict[str, Any] = {}
        for name, bind in compiled.binds.items():
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if process is not None and isinstance(bind.type, sa.DateTime):
                process = _as_datetime_text(process)
            if process is not None:
                self.processors[name] = process
            if not bind.required:
                self.defaults[name] = bind.effective_value
        # How to fill it when nothing is shared (one row): made on first use.
        self.plain_fill: Callable | None = None


# Datetimes with and without microseconds, to learn what a processor writes.
_PROBES = (dt.datetime(2001, 2, 3, 4, 5, 6, 7), dt.datetime(2001, 2, 3, 4, 5, 6))


def _as_datetime_text(process: Callable) -> Callable:
    """``process``, a DateTime bind processor, or the same text in a
    quarter of its time when it writes a naive datetime as ISO text with
    microseconds (SQLite's, by SQLAlchemy's default storage format: about
    ten datetimes a boot request, 2 % of its CPU); learned from what it
    writes, not from its settings."""
    try:
        same = all(process(p) == p.isoformat(" ", "microseconds") for p in _PROBES)
    except Exception:
        return process
    if not same:
        return process

    def as_text(value):
        if type(value) is dt.datetime and value.tzinfo is None:
            return value.isoformat(" ", "microseconds")
        return process(value)

    return as_text


_plans: dict[tuple[int, str], _Plan] = {}
_plans_lock = threading.Lock()


def _plan(statement, dialect, returning: bool = False,
          row: Mapping[str, Any] | None = None) -> _Plan:
    # An INSERT names the columns its row gives, as SQLAlchemy compiles it
    # for each execution: a plan per set of them.
    columns = tuple(sorted(row)) if row is not None and statement.is_insert else None
    key = (id(statement), dialect.name, returning, columns)
    plan = _plans.get(key)
    if plan is None:
        with _plans_lock:
            plan = _plans.get(key)
            if plan is None:
                compiled = (statement.returning(*statement.table.primary_key.columns)
                            if returning else statement)
                plan = _plans[key] = _Plan(compiled, dialect, columns)
    return plan


def execute_many(conn: sa.Connection, statement, rows: Sequence[Mapping[str, Any]],
                 shared: Mapping[str, Any] | None = None,
                 row_keys: Mapping[str, str] | None = None) -> None:
    """Run ``statement`` once per row of ``rows``, in one driver executemany.

    ``shared`` gives bind values common to every row (processed once);
    a bind named in ``row_keys`` takes the row's value under that key,
    any other from the row under its own name. Meant for statements built
    once and kept (a module constant): plans are cached by the statement's
    identity.
    """
    if not rows:
        return
    plan = _plan(statement, conn.dialect, row=None if shared or row_keys else rows[0])
    run(conn, plan.sql, _parameters(plan, rows, shared, row_keys), many=True).close()


def execute(conn: sa.Connection, statement, params: Mapping[str, Any]) -> int:
    """Run ``statement`` once with ``params`` (bind name -> value, or column
    name -> value for an INSERT); the rows it matched (an UPDATE's
    ``rowcount``). Same caching as ``execute_many``."""
    plan = _plan(statement, conn.dialect, row=params)
    cursor = run(conn, plan.sql, _parameters(plan, [params])[0])
    try:
        return cursor.rowcount
    finally:
        cursor.close()


def scalar(conn: sa.Connection, statement, params: Mapping[str, Any]) -> Any:
    """Run the SELECT ``statement`` once with ``params``; the first column
    of its first row (None: no row). Same caching as ``execute_many``."""
    plan = _plan(statement, conn.dialect, row=params)
    cursor = run(conn, plan.sql, _parameters(plan, [params])[0])
    try:
        row = cursor.fetchone()
        return None if row is None else row[0]
    finally:
        cursor.close()


def insert_id(conn: sa.Connection, statement, params: Mapping[str, Any]) -> int:
    """Run the INSERT ``statement`` of one row; the row's primary key (a
    single integer column): RETURNING where the dialect has it, else the
    driver's last row id."""
    returning = conn.dialect.insert_returning
    plan = _plan(statement, conn.dialect, returning=returning, row=params)
    cursor = run(conn, plan.sql, _parameters(plan, [params])[0])
    try:
        return cursor.fetchone()[0] if returning else cursor.lastrowid
    finally:
        cursor.close()


def run(conn: sa.Connection, sql: str, parameters: Any = (), many: bool = False):
    """Run ``sql`` (in the driver's paramstyle) on a cursor of ``conn``'s
    driver connection, in its transaction; the cursor, for the caller to
    read and close. A driver error is raised as the SQLAlchemy error
    ``conn.exec_driver_sql`` would raise; one that lost the connection
    invalidates ``conn`` first (``connection_invalidated``)."""
    dialect = conn.dialect
    driver_conn = conn.connection.dbapi_connection
    cursor = driver_conn.cursor()
    try:
        if many:
            cursor.executemany(sql, parameters)
        else:
            cursor.execute(sql, parameters)
    except dialect.loaded_dbapi.Error as err:
        lost = bool(dialect.is_disconnect(err, driver_conn, cursor))
        try:
            cursor.close()
        except Exception:  # the connection is in trouble already
            pass
        if lost:
            conn.invalidate(err)
        raise sa_exc.DBAPIError.instance(
            sql, parameters, err, dialect.loaded_dbapi.Error,
            hide_parameters=conn.engine.hide_parameters,
            connection_invalidated=lost, dialect=dialect, ismulti=many) from err
    return cursor


def _parameters(plan: _Plan, rows: Sequence[Mapping[str, Any]],
                shared: Mapping[str, Any] | None = None,
                row_keys: Mapping[str, str] | None = None) -> list:
    """The rows as the driver takes them for ``plan``."""
    if shared or row_keys:
        fill = _filler(plan, shared, row_keys)
    else:
        fill = plan.plain_fill
        if fill is None:
            fill = plan.plain_fill = _filler(plan, None, None)
    return [fill(row) for row in rows]


def _filler(plan: _Plan, shared: Mapping[str, Any] | None,
            row_keys: Mapping[str, str] | None) -> Callable:
    """A function turning one row into what the driver takes for ``plan``."""
    processors = plan.processors
    constants: dict[str, Any] = dict(plan.defaults)
    constants.update(shared or {})
    for name, value in list(constants.items()):
        process = processors.get(name)
        if process is not None and value is not None:
            constants[name] = process(value)
    row_keys = row_keys or {}
    # Per bind name: (key in the row, its processor), or a constant.
    spec: list[tuple[str | None, Any]] = []
    for name in plan.names:
        if name in constants:
            spec.append((None, constants[name]))
        else:
            spec.append((row_keys.get(name, name), processors.get(name)))
    plain = all(key is None or process is None for key, process in spec)

    if plain:
        def convert(row):
            return [value if key is None else row[key] for key, value in spec]
    else:
        def convert(row):
            out = []
            for key, value in spec:
                if key is None:
                    out.append(value)
                else:
                    item = row[key]
                    out.append(value(item) if value is not None and item is not None
                               else item)
            return out

    if plan.positional:
        return lambda row: tuple(convert(row))
    names = plan.names
    return lambda row: dict(zip(names, convert(row)))
