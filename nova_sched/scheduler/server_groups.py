"""Server-group context for a decision: policy, rules, members' hosts."""

from __future__ import annotations

import dataclasses

from nova_sched.db import instance_groups as db_groups
from nova_sched.scheduler.request import RequestSpec


def group_reference(spec: RequestSpec) -> tuple[str | None, dict]:
    """The group a request belongs to: from instance_group or the hint."""
    group = spec.instance_group or {}
    ref = group.get("uuid") or group.get("name") or spec.scheduler_hints.get("group")
    if isinstance(ref, list):
        ref = ref[0] if ref else None
    return (ref if isinstance(ref, str) and ref else None), group


def record_members(spec: RequestSpec) -> RequestSpec:
    """Record the request's instances as members; return spec with the policy."""
    ref, group = group_reference(spec)
    if ref is None:
        return spec
    policy = group.get("policy")
    if not policy and isinstance(group.get("policies"), list) and group["policies"]:
        policy = group["policies"][0]
    rules = group.get("rules") if isinstance(group.get("rules"), dict) else {}
    policy, rules = db_groups.record(group.get("uuid") or ref, group.get("name"),
                                     policy, rules, spec.instance_uuids,
                                     uuid_is_exact=bool(group.get("uuid")))
    return dataclasses.replace(spec, group_policy=policy, group_rules=rules)


def with_policy(spec: RequestSpec) -> RequestSpec:
    """The spec with its group's policy, recording nothing (for explain)."""
    ref, group = group_reference(spec)
    if ref is None:
        return spec
    policy, rules = db_groups.describe(group.get("uuid") or ref)
    policy = policy or group.get("policy")
    if isinstance(group.get("rules"), dict):
        rules = rules or group["rules"]
    return dataclasses.replace(spec, group_policy=policy, group_rules=rules)


def with_member_hosts(spec: RequestSpec, instance_uuid: str | None) -> RequestSpec:
    """The spec with where the group's other members are right now."""
    ref, _ = group_reference(spec)
    if ref is None or not spec.group_policy:
        return spec
    hosts = db_groups.member_hosts(ref, exclude={instance_uuid} if instance_uuid else None)
    return dataclasses.replace(spec, group_hosts=hosts)
