"""Server-group context of a request: the one place it is worked out.

A request belongs to a group through ``request_spec['instance_group']``
(Havana's and today's nova) or the ``group`` scheduler hint. ``resolve``
finds the group once per request, recording the request's instances as
members (``record=True``, for requests that place instances) or only
looking the group up (``explain``). ``for_decision`` adds, before each
instance's decision, where the group's other members are now; the
affinity filters and soft-affinity weighers read that from the cycle.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Callable, Iterable

from nova_sched.db import instance_groups as db_groups
from nova_sched.scheduler.wire.request import RequestSpec


@dataclasses.dataclass(frozen=True)
class GroupContext:
    """A request's server group as the decision sees it."""

    ref: str
    policy: str | None
    rules: dict
    # host -> members of the group there (placed or claimed), not counting
    # the instance being placed.
    hosts: dict = dataclasses.field(default_factory=dict)

    def max_per_host(self) -> int:
        """The ``max_server_per_host`` rule of anti-affinity (default 1)."""
        try:
            return max(1, int(self.rules.get("max_server_per_host", 1)))
        except (TypeError, ValueError):
            return 1


def _reference(spec: RequestSpec) -> tuple[str | None, dict]:
    """The group a request names: its instance_group, else the hint."""
    group = spec.instance_group or {}
    ref = group.get("uuid") or group.get("name") or spec.scheduler_hints.get("group")
    if isinstance(ref, list):
        ref = ref[0] if ref else None
    return (ref if isinstance(ref, str) and ref else None), group


def _described_policy(group: dict) -> tuple[str | None, dict]:
    policy = group.get("policy")
    if not policy and isinstance(group.get("policies"), list) and group["policies"]:
        policy = group["policies"][0]
    rules = group.get("rules") if isinstance(group.get("rules"), dict) else {}
    return policy, rules


def resolve(spec: RequestSpec, record: bool) -> GroupContext | None:
    """The request's group with its policy and rules; None without one.

    With ``record`` the request's instances become members (a group the
    request describes and the scheduler does not know yet is created);
    without it nothing is written.
    """
    ref, group = _reference(spec)
    if ref is None:
        return None
    policy, rules = _described_policy(group)
    if record:
        # Members nova already knows (today's nova sends them) join the
        # request's own instances, so their hosts count from the first request
        # this scheduler sees of the group.
        known = [m for m in group.get("members") or [] if m not in spec.instance_uuids]
        policy, rules = db_groups.record(group.get("uuid") or ref, group.get("name"),
                                         policy, rules, spec.instance_uuids + known,
                                         uuid_is_exact=bool(group.get("uuid")))
    else:
        stored_policy, stored_rules = db_groups.describe(group.get("uuid") or ref)
        policy, rules = stored_policy or policy, stored_rules or rules
    return GroupContext(ref=ref, policy=policy, rules=rules or {})


def for_decision(group: GroupContext | None, instance_uuid: str | None,
                 hosts_of: Callable[[Iterable[str]], dict[str, str]]
                 ) -> GroupContext | None:
    """The group with where its other members are right now; ``hosts_of``
    says where instances are (the host source's knowledge)."""
    if group is None or not group.policy:
        return group
    members = [m for m in db_groups.members(group.ref) if m != instance_uuid]
    hosts = collections.Counter(hosts_of(members).values())
    return dataclasses.replace(group, hosts=dict(hosts))
