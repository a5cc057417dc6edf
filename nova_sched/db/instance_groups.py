"""Server groups and their members, as the affinity filters need them."""

from __future__ import annotations

import collections
import json

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from nova_sched.db import allocations as db_allocations
from nova_sched.db import api as db_api
from nova_sched.db import models


@db_api.retry_on_disconnect
def record(group_uuid: str | None, name: str | None, policy: str | None,
           rules: dict | None, member_uuids: list[str],
           uuid_is_exact: bool = True) -> tuple[str | None, dict]:
    """Record a group (when described) and its new members.

    A group described with its uuid is that group only: two groups may
    share a name. Without ``uuid_is_exact`` (a scheduler hint naming a
    group), ``group_uuid`` may also be a known group's name. Returns the
    group's policy and rules as stored, or (None, {}) for an unknown group
    that the request does not describe.
    """
    g = models.InstanceGroup
    with db_api.session_scope() as session:
        group = session.execute(sa.select(g).where(g.uuid == group_uuid)).scalars().first()
        if group is None and not uuid_is_exact:
            group = session.execute(
                sa.select(g).where(g.name == group_uuid).order_by(g.id)).scalars().first()
        if group is None:
            if not policy or not group_uuid:
                return None, {}
            group = models.InstanceGroup(uuid=group_uuid, name=name, policy=policy,
                                         rules=json.dumps(rules or {}),
                                         created_at=db_api.utcnow())
            session.add(group)
            session.flush()
        elif policy and not group.policy:
            group.policy = policy
        existing = set(session.execute(
            sa.select(models.InstanceGroupMember.instance_uuid).where(
                models.InstanceGroupMember.group_id == group.id)).scalars())
        for uuid in member_uuids:
            if uuid not in existing:
                session.add(models.InstanceGroupMember(group_id=group.id,
                                                       instance_uuid=uuid))
        try:
            session.flush()
        except sa_exc.IntegrityError:
            session.rollback()
        stored_rules = json.loads(group.rules) if group.rules else {}
        return group.policy, stored_rules


@db_api.retry_on_disconnect
def describe(ref: str) -> tuple[str | None, dict]:
    """A known group's policy and rules by uuid or name; (None, {}) if unknown."""
    with db_api.session_scope() as session:
        group = session.execute(
            sa.select(models.InstanceGroup).where(
                sa.or_(models.InstanceGroup.uuid == ref,
                       models.InstanceGroup.name == ref))
        ).scalars().first()
        if group is None:
            return None, {}
        return group.policy, json.loads(group.rules) if group.rules else {}


@db_api.retry_on_disconnect
def members(group_uuid: str) -> list[str]:
    """The uuids of the group's members, as recorded."""
    g, m = models.InstanceGroup, models.InstanceGroupMember
    with db_api.session_scope() as session:
        return list(session.execute(
            sa.select(m.instance_uuid).join(g, g.id == m.group_id)
            .where(sa.or_(g.uuid == group_uuid, g.name == group_uuid))).scalars())


def member_hosts(group_uuid: str, exclude: set[str] | None = None) -> dict[str, int]:
    """host -> number of the group's members placed or claimed there.

    Where each member is comes from ``db.allocations.hosts_of``: its claim,
    else its placed instance row (members the scheduler placed without
    holding a claim, recorded from a compute's sync, count where they run).
    """
    exclude = exclude or set()
    counts = collections.Counter(
        host for uuid, host in db_allocations.hosts_of(members(group_uuid)).items()
        if uuid not in exclude)
    return dict(counts)
