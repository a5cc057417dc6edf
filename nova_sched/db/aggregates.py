"""Host aggregates and availability zones: operators' changes, daemons' view.

Aggregates are few and change rarely, so daemons reload them whole when the
``aggregates`` row of ``change_counters`` moves. Every change bumps that
stamp first, in its own transaction: the stamp's row lock then also
serialises concurrent changes, which keeps the availability-zone check
below free of races.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Iterable

import sqlalchemy as sa
from sqlalchemy.orm import aliased

from nova_sched import exception
from nova_sched.db import api as db_api
from nova_sched.db import models
from nova_sched.db import operator_changes

AZ_KEY = "availability_zone"
STAMP_NAME = "aggregates"
_MAX_LEN = 255


@dataclasses.dataclass(frozen=True)
class AggregateInfo:
    """A host aggregate as the scheduler's host-state store holds it."""

    id: int
    name: str
    hosts: frozenset[str]
    metadata: dict[str, str]
    # nova's aggregate uuid, which is its Placement aggregate's (the
    # request filters ask Placement's model by it); None where unknown.
    uuid: str | None = None


@db_api.retry_on_disconnect
def create(name: str, zone: str | None = None) -> dict[str, Any]:
    """Create an aggregate, in availability zone ``zone`` when given."""
    _check_text("aggregate name", name)
    if zone is not None:
        _check_text("availability zone", zone)
    with db_api.session_scope() as session:
        _bump_stamp(session)
        if _find(session, name) is not None:
            raise exception.AggregateExists(name=name)
        now = db_api.utcnow()
        agg = models.Aggregate(name=name, created_at=now, updated_at=now)
        session.add(agg)
        session.flush()
        if zone:
            session.add(
                models.AggregateMetadata(aggregate_id=agg.id, key=AZ_KEY, value=zone)
            )
        session.flush()
        return _describe(session, [agg])[0]


@db_api.retry_on_disconnect
def add_host(name: str, host: str) -> dict[str, Any]:
    """Put ``host`` into aggregate ``name``.

    Refused when the host is already a member, or when the aggregate's zone
    differs from one another aggregate already gives the host.
    """
    _check_text("host name", host)
    with db_api.session_scope() as session:
        _bump_stamp(session)
        agg = _get(session, name)
        if _membership(session, agg.id, host) is not None:
            raise exception.AggregateHostExists(name=name, host=host)
        zone = _metadata(session, agg.id).get(AZ_KEY)
        if zone:
            _check_zone(session, agg, zone, [host])
        session.add(models.AggregateHost(aggregate_id=agg.id, host=host))
        agg.updated_at = db_api.utcnow()
        session.flush()
        return _describe(session, [agg])[0]


@db_api.retry_on_disconnect
def remove_host(name: str, host: str) -> dict[str, Any]:
    """Take ``host`` out of aggregate ``name``."""
    with db_api.session_scope() as session:
        _bump_stamp(session)
        agg = _get(session, name)
        member = _membership(session, agg.id, host)
        if member is None:
            raise exception.AggregateHostNotFound(name=name, host=host)
        session.delete(member)
        agg.updated_at = db_api.utcnow()
        session.flush()
        return _describe(session, [agg])[0]


@db_api.retry_on_disconnect
def set_metadata(name: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """Set keys of an aggregate's metadata; a value of None or '' deletes.

    Setting ``availability_zone`` is refused when one of the aggregate's
    hosts is in another aggregate with a different zone (as nova does).
    """
    for key, value in metadata.items():
        _check_text("metadata key", key)
        if value not in (None, ""):
            _check_text(f"value of {key}", str(value))
    with db_api.session_scope() as session:
        _bump_stamp(session)
        agg = _get(session, name)
        new_zone = metadata.get(AZ_KEY)
        if new_zone not in (None, ""):
            members = sa.select(models.AggregateHost.host).where(
                models.AggregateHost.aggregate_id == agg.id
            )
            _check_zone(session, agg, str(new_zone), members)
        rows = {
            row.key: row
            for row in session.scalars(
                sa.select(models.AggregateMetadata).where(
                    models.AggregateMetadata.aggregate_id == agg.id
                )
            )
        }
        for key, value in metadata.items():
            row = rows.get(key)
            if value in (None, ""):
                # Deleting a key that is not there is not an error (nova).
                if row is not None:
                    session.delete(row)
            elif row is None:
                session.add(
                    models.AggregateMetadata(
                        aggregate_id=agg.id, key=key, value=str(value)
                    )
                )
            else:
                row.value = str(value)
        agg.updated_at = db_api.utcnow()
        session.flush()
        return _describe(session, [agg])[0]


@db_api.retry_on_disconnect
def replace(name: str, hosts: Iterable[str], metadata: dict[str, Any]) -> dict[str, Any]:
    """Make aggregate ``name`` hold exactly ``hosts`` and ``metadata``,
    creating it if needed, in one transaction: an aggregate as nova's API
    has it (``update_aggregates``). nova checked its zone rules already."""
    _check_text("aggregate name", name)
    hosts = set(hosts)
    for host in hosts:
        _check_text("host name", host)
    metadata = {key: str(value) for key, value in metadata.items()
                if value not in (None, "")}
    for key, value in metadata.items():
        _check_text("metadata key", key)
        _check_text(f"value of {key}", value)
    with db_api.session_scope() as session:
        _bump_stamp(session)
        now = db_api.utcnow()
        agg = _find(session, name)
        if agg is None:
            agg = models.Aggregate(name=name, created_at=now)
            session.add(agg)
            session.flush()
        agg.updated_at = now
        members = {row.host: row for row in session.scalars(
            sa.select(models.AggregateHost).where(
                models.AggregateHost.aggregate_id == agg.id))}
        for host, row in members.items():
            if host not in hosts:
                session.delete(row)
        session.add_all(models.AggregateHost(aggregate_id=agg.id, host=host)
                        for host in sorted(hosts - members.keys()))
        rows = {row.key: row for row in session.scalars(
            sa.select(models.AggregateMetadata).where(
                models.AggregateMetadata.aggregate_id == agg.id))}
        for key, row in rows.items():
            if key not in metadata:
                session.delete(row)
            elif row.value != metadata[key]:
                row.value = metadata[key]
        session.add_all(models.AggregateMetadata(aggregate_id=agg.id, key=key,
                                                 value=value)
                        for key, value in metadata.items() if key not in rows)
        session.flush()
        return _describe(session, [agg])[0]


@db_api.retry_on_disconnect
def delete(name: str) -> bool:
    """Remove aggregate ``name`` with its hosts and metadata; False if absent."""
    with db_api.session_scope() as session:
        agg = _find(session, name)
        if agg is None:
            return False
        _bump_stamp(session)
        for model in (models.AggregateHost, models.AggregateMetadata):
            session.execute(sa.delete(model).where(model.aggregate_id == agg.id))
        session.delete(agg)
        return True


@db_api.retry_on_disconnect
def list_all() -> list[dict[str, Any]]:
    """Every aggregate by name: id, name, availability_zone, hosts, metadata."""
    with db_api.session_scope() as session:
        return _list(session)


def load_for_cache() -> list[AggregateInfo]:
    """Every aggregate as the host-state store holds it.

    Read ``stamp()`` before calling this (or use ``load_with_stamp``): a
    change that lands in between then shows as a newer stamp next time,
    never as a missed one.
    """
    return [_info(agg) for agg in list_all()]


@db_api.retry_on_disconnect
def load_with_stamp() -> tuple[int, list[AggregateInfo]]:
    """The change stamp and every aggregate, the stamp read first."""
    with db_api.read_session() as session:
        value = _read_stamp(session)
        return value, [_info(agg) for agg in _list(session)]


@db_api.retry_on_disconnect
def stamp() -> int:
    """Microseconds stamp of the last aggregate change; 0 when never changed."""
    with db_api.read_session() as session:
        return _read_stamp(session)


def _read_stamp(session) -> int:
    value = session.scalar(
        sa.select(models.ChangeCounter.value).where(
            models.ChangeCounter.name == STAMP_NAME
        )
    )
    return int(value or 0)


def _list(session) -> list[dict[str, Any]]:
    aggs = session.scalars(
        sa.select(models.Aggregate).order_by(models.Aggregate.name)
    ).all()
    return _describe(session, aggs)


def _info(agg: dict[str, Any]) -> AggregateInfo:
    return AggregateInfo(
        id=agg["id"],
        name=agg["name"],
        hosts=frozenset(agg["hosts"]),
        metadata=agg["metadata"],
    )


def _bump_stamp(session) -> None:
    table = models.ChangeCounter.__table__
    now = db_api.now_us()
    # Strictly increasing even when this host's clock is behind the one that
    # wrote the last stamp, so a reader never misses a change.
    result = session.execute(
        sa.update(table)
        .where(table.c.name == STAMP_NAME)
        .values(value=sa.case((table.c.value >= now, table.c.value + 1), else_=now))
    )
    if result.rowcount == 0:
        # A schema made without the migration (create_all) lacks the row.
        session.execute(sa.insert(table).values(name=STAMP_NAME, value=now))
    # What decisions read changed: a claim decided before this commits
    # must be decided again (db.operator_changes).
    operator_changes.bump(session)


def _check_text(what: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise exception.InvalidInput(reason=f"{what} must be a non-empty string")
    if len(value) > _MAX_LEN:
        raise exception.InvalidInput(
            reason=f"{what} is longer than {_MAX_LEN} characters"
        )


def _find(session, name: str) -> models.Aggregate | None:
    return session.scalar(
        sa.select(models.Aggregate).where(models.Aggregate.name == name)
    )


def _get(session, name: str) -> models.Aggregate:
    agg = _find(session, name)
    if agg is None:
        raise exception.AggregateNotFound(name=name)
    return agg


def _membership(session, agg_id: int, host: str) -> models.AggregateHost | None:
    return session.scalar(
        sa.select(models.AggregateHost).where(
            models.AggregateHost.aggregate_id == agg_id,
            models.AggregateHost.host == host,
        )
    )


def _metadata(session, agg_id: int) -> dict[str, str]:
    rows = session.execute(
        sa.select(models.AggregateMetadata.key, models.AggregateMetadata.value).where(
            models.AggregateMetadata.aggregate_id == agg_id
        )
    )
    return {key: value for key, value in rows}


def _check_zone(session, agg: models.Aggregate, zone: str, hosts) -> None:
    """Refuse when one of ``hosts`` is in another aggregate of another zone.

    ``hosts`` is a list of names or a SELECT of them.
    """
    other = aliased(models.Aggregate)
    conflict = session.execute(
        sa.select(models.AggregateHost.host, other.name, models.AggregateMetadata.value)
        .join(other, other.id == models.AggregateHost.aggregate_id)
        .join(
            models.AggregateMetadata,
            sa.and_(
                models.AggregateMetadata.aggregate_id == other.id,
                models.AggregateMetadata.key == AZ_KEY,
            ),
        )
        .where(
            models.AggregateHost.host.in_(hosts),
            other.id != agg.id,
            models.AggregateMetadata.value != zone,
        )
        .order_by(models.AggregateHost.host, other.name)
        .limit(1)
    ).first()
    if conflict is not None:
        host, other_name, other_zone = conflict
        raise exception.AvailabilityZoneConflict(
            host=host, other_zone=other_zone, other=other_name, name=agg.name, zone=zone
        )


def _describe(session, aggs: Iterable[models.Aggregate]) -> list[dict[str, Any]]:
    aggs = list(aggs)
    ids = [agg.id for agg in aggs]
    hosts: dict[int, list[str]] = collections.defaultdict(list)
    metadata: dict[int, dict[str, str]] = collections.defaultdict(dict)
    if ids:
        for agg_id, host in session.execute(
            sa.select(models.AggregateHost.aggregate_id, models.AggregateHost.host)
            .where(models.AggregateHost.aggregate_id.in_(ids))
            .order_by(models.AggregateHost.host)
        ):
            hosts[agg_id].append(host)
        for agg_id, key, value in session.execute(
            sa.select(
                models.AggregateMetadata.aggregate_id,
                models.AggregateMetadata.key,
                models.AggregateMetadata.value,
            ).where(models.AggregateMetadata.aggregate_id.in_(ids))
        ):
            metadata[agg_id][key] = value
    return [
        {
            "id": agg.id,
            "name": agg.name,
            "availability_zone": metadata[agg.id].get(AZ_KEY),
            "hosts": hosts[agg.id],
            "metadata": dict(sorted(metadata[agg.id].items())),
            "created_at": agg.created_at,
            "updated_at": agg.updated_at,
        }
        for agg in aggs
    ]
