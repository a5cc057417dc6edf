"""Builders of host tables and requests for scheduler unit tests."""

from __future__ import annotations

import itertools
import time
from typing import Any, Iterable

from nova_sched.db.aggregates import AggregateInfo
from nova_sched.scheduler import weights
from nova_sched.scheduler.wire import request
from nova_sched.scheduler.decision.cycle_state import CycleState
from nova_sched.scheduler.cloud.host_state import VALUE_COLUMNS, HostState, HostTable
from nova_sched.scheduler.decision.server_groups import GroupContext

# Column values a node dict may carry (anything else describes the node).
_COLUMNS = VALUE_COLUMNS

_node_ids = itertools.count(1)


def add_node(table: HostTable, host: str = "host1", nodename: str | None = None,
             **fields: Any) -> HostState:
    """Add (or update) one node; unspecified numbers are 0, the heartbeat now.

    ``local_gb`` may be given instead of ``disk_mb``. Other keyword
    arguments (hypervisor_type, cpu_info, supported_instances, stats...)
    become HostState attributes.
    """
    nodename = nodename or host
    if "local_gb" in fields:
        fields["disk_mb"] = fields.pop("local_gb") * 1024
    values = {name: fields.pop(name) for name in _COLUMNS if name in fields}
    values.setdefault("service_updated", time.time())
    values.setdefault("disabled", False)
    node_id = fields.pop("node_id", None) or next(_node_ids)
    state = HostState(host=host, nodename=nodename, node_id=node_id,
                      hypervisor_hostname=nodename, **fields)
    table.upsert(state, values)
    return state


def make_table(nodes: Iterable[dict] = (), aggregates: Iterable = ()) -> HostTable:
    """A HostTable holding ``nodes`` (dicts of add_node's arguments).

    ``aggregates`` are AggregateInfo objects or dicts with ``name``,
    ``hosts`` and ``metadata`` (``id`` optional).
    """
    table = HostTable(capacity=4)
    for node in nodes:
        add_node(table, **dict(node))
    aggs = []
    for number, agg in enumerate(aggregates, start=1):
        if isinstance(agg, dict):
            agg = AggregateInfo(
                id=agg.get("id", number),
                name=agg.get("name", f"agg{number}"),
                hosts=frozenset(agg.get("hosts", ())),
                metadata=dict(agg.get("metadata", {})),
            )
        aggs.append(agg)
    if aggs:
        table.set_aggregates(aggs)
    return table


def state(table: HostTable, host: str, nodename: str | None = None) -> HostState:
    """The HostState of a node by name."""
    return table.state(table.row_of(host, nodename or host))


def make_spec(memory_mb: int = 512, vcpus: int = 1, root_gb: int = 1,
              ephemeral_gb: int = 0, swap: int = 0, *,
              extra_specs: dict | None = None,
              image_props: dict | None = None,
              image_id: str = "image-1",
              availability_zone: str | None = None,
              instance_uuids: list[str] | None = None,
              retry_hosts: list | None = None,
              scheduler_hints: dict | None = None,
              instance_group: dict | None = None,
              filter_properties: dict | None = None,
              **instance_properties: Any) -> request.RequestSpec:
    """A parsed RequestSpec for one flavor, built from a Havana request dict."""
    uuids = instance_uuids or ["11111111-2222-3333-4444-555555555555"]
    sizes = dict(memory_mb=memory_mb, vcpus=vcpus, root_gb=root_gb,
                 ephemeral_gb=ephemeral_gb, swap=swap)
    props = dict(uuid=uuids[0], project_id="project", user_id="user",
                 image_ref=image_id, **sizes)
    if availability_zone is not None:
        props["availability_zone"] = availability_zone
    props.update(instance_properties)
    spec = {
        "instance_properties": props,
        "instance_type": dict(name="m1.test", flavorid="42",
                              extra_specs=dict(extra_specs or {}), **sizes),
        "image": {"id": image_id, "properties": dict(image_props or {})},
        "instance_uuids": uuids,
        "num_instances": len(uuids),
    }
    if instance_group is not None:
        spec["instance_group"] = instance_group
    fprops = dict(filter_properties or {})
    if scheduler_hints is not None:
        fprops["scheduler_hints"] = scheduler_hints
    if retry_hosts is not None:
        fprops["retry"] = {"num_attempts": len(retry_hosts) + 1,
                           "hosts": [list(h) for h in retry_hosts]}
    return request.parse(spec, fprops)


def cycle(table: HostTable, spec, group: GroupContext | None = None,
          instance_uuid: str | None = None) -> CycleState:
    """A decision's state over ``table`` for ``spec`` (plugins prepare lazily)."""
    return CycleState(spec=spec, instance_uuid=instance_uuid, group=group,
                      table=table)


def group(policy: str | None, hosts: dict | None = None, rules: dict | None = None,
          ref: str = "group-1") -> GroupContext:
    """A server-group context with its members' hosts."""
    return GroupContext(ref=ref, policy=policy, rules=dict(rules or {}),
                        hosts=dict(hosts or {}))


def passes(flt, table: HostTable, spec, group: GroupContext | None = None
           ) -> list[tuple[str, str]]:
    """The (host, node) pairs among active rows that the filter keeps,
    asked as the scheduler asks it (``filter_rows``)."""
    rows = table.active_rows()
    mask = flt.filter_rows(cycle(table, spec, group), rows)
    return [(table.states[r].host, table.states[r].nodename) for r in rows[mask]]


def weigh(weigher, table: HostTable, spec, group: GroupContext | None = None,
          rows=None):
    """Raw weights of ``rows`` (default: every active row), asked as the
    scheduler asks them (``weigh_rows``)."""
    rows = table.active_rows() if rows is None else rows
    return weigher.weigh_rows(cycle(table, spec, group), rows)


class FewestInstancesWeigher(weights.BaseHostWeigher):
    """A custom weigher that only implements ``_weigh_object`` (loaded by
    dotted path in tests): prefers hosts with fewer instances."""

    def _weigh_object(self, host_state, spec) -> float:
        return -host_state.num_instances


class NotAWeigher:
    """Something a dotted path can name that is not a weigher."""
