"""How many changes operators have made to what decisions read.

Compute reports and claims reach every daemon's host table by their rows'
stamps (``changed_at``), read in the background: a table a little behind
them costs at worst a claim lost and decided again. An operator's change
is different. A host put into a tenant's aggregate, a zone joined, a
service disabled: whoever ran the command and then boots expects the boot
to see it, and tenant isolation that lags is a hole, not a delay.

So every such change (``nova-sched-manage aggregate ...`` and ``service
...``, and nova's aggregate fanout casts, which are stored the same way)
bumps the ``operator_changes`` row of ``change_counters`` in its own
transaction. A daemon's host table knows the count it has read through
(``HostManager.operator_changes``), and a claim's guarded UPDATE compares
the two (``at_most``): a claim decided on a table that has not read the
operators' last change is refused with HostTableBehind (``check`` tells
it from a node without room), and the instance is decided again once the
table has caught up. The database stays off the decision itself; the
claim's UPDATE, which every placement runs anyway, reads one more row.

The count is a plain counter, not a clock: it orders changes whatever the
clocks of the hosts that ran the commands say.
"""

from __future__ import annotations

import sqlalchemy as sa

from nova_sched import exception
from nova_sched.db import api as db_api
from nova_sched.db import driver_sql
from nova_sched.db import models

NAME = "operator_changes"
_COUNTERS = models.ChangeCounter.__table__
_READ = sa.select(_COUNTERS.c.value).where(_COUNTERS.c.name == sa.bindparam("name"))


def bump(conn) -> None:
    """Count one more change, in the caller's transaction (a Session or a
    Connection); its row lock serialises concurrent changes."""
    result = conn.execute(
        sa.update(_COUNTERS).where(_COUNTERS.c.name == NAME)
        .values(value=_COUNTERS.c.value + 1))
    if result.rowcount == 0:
        # A schema made without the migrations (create_all) lacks the row.
        conn.execute(sa.insert(_COUNTERS).values(name=NAME, value=1))


def read(conn) -> int:
    """The count as the caller's transaction sees it (0: no change yet)."""
    value = conn.execute(_READ, {"name": NAME}).scalar()
    return int(value or 0)


def at_most(bound: str):
    """A SQL condition, true while the count is at most the bind parameter
    named ``bound``: a guard for a write decided on what a table that had
    read that many changes said (the claim's UPDATE carries it, so that the
    check costs no round trip of its own)."""
    count = (sa.select(sa.func.coalesce(sa.func.max(_COUNTERS.c.value), 0))
             .where(_COUNTERS.c.name == NAME).scalar_subquery())
    return count <= sa.bindparam(bound)


def check(conn: sa.Connection, seen: int) -> None:
    """Raise HostTableBehind when changes were made after the ``seen``-th;
    in a claim's transaction, so through the driver's own cursor
    (``driver_sql``), as the claim's other statements."""
    current = int(driver_sql.scalar(conn, _READ, {"name": NAME}) or 0)
    if current > seen:
        raise exception.HostTableBehind(seen=seen, current=current)


@db_api.retry_on_disconnect
def current() -> int:
    """The count now."""
    with db_api.read_session() as session:
        return read(session)


@db_api.retry_on_disconnect
def counters() -> dict[str, int]:
    """Every row of ``change_counters`` (this count and the aggregates'
    stamp), in one read."""
    with db_api.read_session() as session:
        return {name: int(value) for name, value in
                session.execute(sa.select(_COUNTERS.c.name, _COUNTERS.c.value))}
