"""One statement, many rows, without SQLAlchemy's cost per row.

For an executemany SQLAlchemy builds a parameter dictionary per row and
passes every value of it through its type's bind processor, in Python. On
the compute-report path (a thousand rows a second at 10,000 hosts) that
was a third of the daemon's CPU, several times what the database itself
spent. Here a statement is compiled once per dialect; the values every row
shares are processed once; each row becomes the tuple (positional
paramstyles: SQLite) or dictionary (named ones: psycopg2, PyMySQL) the
driver reads, and the driver gets them in one ``executemany``. The SQL is
SQLAlchemy's own compilation of the statement, so it is the same statement
``conn.execute(statement, rows)`` would run.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping, Sequence

import sqlalchemy as sa


class _Plan:
    """A statement compiled for one dialect, and how to fill it."""

    __slots__ = ("statement", "sql", "names", "positional", "processors", "defaults")

    def __init__(self, statement, dialect):
        compiled = statement.compile(dialect=dialect)
        self.statement = statement  # held, so its id() is never reused
        self.sql: str = compiled.string
        self.positional: bool = compiled.positional
        # Every bind name in the order the driver wants them (a name used
        # twice appears twice in positional styles).
        self.names: list[str] = (list(compiled.positiontup) if compiled.positional
                                 else list(compiled.bind_names.values()))
        self.processors: dict[str, Callable] = dict(compiled._bind_processors)
        # Literal values of the statement itself (``deleted = false``).
        self.defaults: dict[str, Any] = {
            name: value for name, value in compiled.construct_params(_check=False).items()
            if value is not None}


_plans: dict[tuple[int, str], _Plan] = {}
_plans_lock = threading.Lock()


def _plan(statement, dialect) -> _Plan:
    key = (id(statement), dialect.name)
    plan = _plans.get(key)
    if plan is None:
        with _plans_lock:
            plan = _plans.get(key)
            if plan is None:
                plan = _plans[key] = _Plan(statement, dialect)
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
    plan = _plan(statement, conn.dialect)
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
        params = [tuple(convert(row)) for row in rows]
    else:
        names = plan.names
        params = [dict(zip(names, convert(row))) for row in rows]
    conn.exec_driver_sql(plan.sql, params)
