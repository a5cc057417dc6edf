"""Today's nova RequestSpec, turned into Havana's request_spec and filter_properties.

The scheduler RPC API 4.x (CONTRACT section 5) sends a ``RequestSpec``
object primitive (4.3 onwards) or nova's own legacy dicts (4.0). Both are
mapped here onto the Havana dicts ``request.parse`` validates, so a 4.x
decision runs exactly the code a 2.x one does: one set of filters, one
claim path, one place that checks requests. nova's RequestSpec has been at
version 1.15 from nova 29 (2024.1) to nova 34, and every older 1.x minor
only lacks fields, which read as absent here; a newer 1.x minor adds fields,
which are ignored until they are mapped.

What is mapped (nova field -> Havana key):

* ``flavor`` -> ``instance_type`` (sizes, ``extra_specs``, the rest kept)
  and the sizes in ``instance_properties``; with ``is_bfv`` the root disk
  is not counted (nova asks Placement for no root disk of a volume-backed
  instance either);
* ``image`` (ImageMeta/ImageMetaProps) -> ``image`` with ``id`` and
  ``properties`` under nova's current names; ``hw_numa_cpus``/``hw_numa_mem``
  lists become Glance's ``hw_numa_cpus.N``/``hw_numa_mem.N`` and
  ``traits_required`` Glance's ``trait:NAME = required``, which
  ``image_meta`` reads back into nova's model; ``image_ref`` and
  ``os_type`` of the instance;
* ``scheduler_hints``: nova keeps every value as a list; one-item lists
  become the item as Havana had them (nova's ``get_scheduler_hint`` rule),
  except ``same_host``/``different_host``, which stay lists;
* ``availability_zone``, ``project_id``, ``user_id``, ``num_instances``,
  ``instance_uuid`` -> ``instance_properties``;
* ``force_hosts``, ``force_nodes``, ``ignore_hosts`` -> filter_properties;
* ``requested_destination`` with a host ->
  ``filter_properties['requested_destination']`` = ``{'host', 'node'}``:
  the candidates narrowed to it and, as in nova, still filtered
  (``filter_scheduler``), where ``force_hosts`` skips the filters;
* ``instance_group`` -> ``request_spec['instance_group']`` (``uuid``,
  ``name``, ``policy`` (``policies[0]`` before InstanceGroup 1.11),
  ``rules`` with ``max_server_per_host`` as a number, ``members``, ``hosts``);
* ``retry`` -> ``retry`` with ``hosts`` as ``[[host, node], ...]`` and
  ``num_attempts`` one less than nova's: nova's conductor has counted the
  attempt being scheduled already, and the Havana scheduling cycle counts it
  again (``retry.next_attempt``), so ``max_attempts`` means the same on both;
* ``limits`` -> ``limits`` (``vcpu``, ``disk_gb``, ``memory_mb`` when set);
* what nova asks Placement with, for the resource request
  (``placement_model.request_builder``) and nova's request filters:
  ``is_bfv``, ``requested_resources`` (a list of RequestGroup dicts),
  ``request_level_params`` (``root_required``, ``root_forbidden``,
  ``same_subtree``), ``requested_networks`` (``network_id``, ``port_id``)
  and ``pci_requests`` (``request_id``, ``source`` of each) ->
  ``request_spec`` under the same names; ``requested_destination``'s
  ``aggregates`` and ``forbidden_aggregates`` ->
  ``filter_properties['requested_destination']``, with or without a host.

Instance uuids: the RPC argument when given (4.4+; claims are made for
them). Without it (4.3, and 4.0's dicts) nova claims nothing; here a
single-instance request claims for ``instance_uuid``, and a multi-instance
one, whose other uuids are unknown, is decided without claims (an explicit
empty ``instance_uuids``), as ``request.parse`` and the cycle allow.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from nova_sched import exception
from nova_sched.scheduler.wire import nova_objects
from nova_sched.scheduler.wire import request

# RequestSpec fields that do not reach a decision, and why.
IGNORED_FIELDS: tuple[str, ...] = (
    # The API database row id of the spec: nothing to decide on.
    "id",
    # Derived by nova's API from the flavor's hw:numa_* extra specs and the
    # image's hw_numa_* properties, which NUMATopologyFilter reads itself.
    "numa_topology",
    # nova-network's security groups: no filter ever read them.
    "security_groups",
    # Physnet/tunnel NUMA affinity of the ports: NUMATopologyFilter leaves it out.
    "network_metadata",
)

# Parts of mapped fields that are dropped, and why.
IGNORED_SUBFIELDS: tuple[str, ...] = (
    # The cell's uuid is read; the rest of its CellMapping (its database
    # and transport URLs) is conductor's, never the scheduler's.
    "requested_destination.cell.database_connection",
    "requested_destination.cell.transport_url",
    # Only the ids are read (by the request filters and OWNER_NOVA): the
    # devices a PCI request asks for come from the flavor's
    # pci_passthrough:alias, which PciPassthroughFilter reads; neutron
    # SR-IOV port requests are not modelled.
    "pci_requests.requests.spec",
    "requested_networks.address",
    "requested_networks.tag",
    # NUMA limits are worked out per node by NUMATopologyFilter, never sent by the caller.
    "limits.numa_topology",
    # Group quotas are the API's business, not the scheduler's.
    "instance_group.user_id",
    "instance_group.project_id",
)

# Hints whose Havana value is a list of instance uuids even with one item.
_LIST_HINTS = ("same_host", "different_host")
_SIZE_FIELDS = ("memory_mb", "vcpus", "root_gb", "ephemeral_gb", "swap")
_REQUIRED_SIZES = ("memory_mb", "vcpus", "root_gb")
_LIMIT_FIELDS = ("vcpu", "disk_gb", "memory_mb")
# Parts of a legacy (4.0) instance_properties that are object primitives
# of fields ignored above; Havana's instance_properties never had them.
_LEGACY_OBJECT_PROPS = ("numa_topology", "pci_requests")


def _invalid(reason: str) -> exception.InvalidRequestSpec:
    return exception.InvalidRequestSpec(reason)


def _type_name(value: Any) -> str:
    return type(value).__name__


def _whole(value: Any, where: str) -> int:
    # bool is an int in Python; a flavor with vcpus=True is a bug.
    if isinstance(value, bool) or not (
            isinstance(value, int)
            or isinstance(value, float) and value.is_integer()):
        raise _invalid(f"{where} must be a whole non-negative number, got "
                       f"{_type_name(value)} {value!r}")
    if value < 0:
        raise _invalid(f"{where} must not be negative, got {value!r}")
    return int(value)


def _opt_str(value: Any, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise _invalid(f"{where} must be a string, got {_type_name(value)} "
                       f"{value!r}")
    return value


def _str_list(value: Any, where: str) -> list[str]:
    # The legacy request's rule for a list of names (nova's sets, left so
    # by a transport that skips JSON, sorted); a primitive's refusal names
    # no instance.
    return request.string_list(value, where, [])


def _str_dict(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _invalid(f"{where} must be a dict, got {_type_name(value)}")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise _invalid(f"{where} must map strings to strings, got "
                           f"{key!r}: {item!r}")
    return dict(value)


# -- nested objects ---------------------------------------------------------

def _flavor(value: Any, where: str) -> dict:
    """A Flavor primitive as Havana's ``instance_type`` dict."""
    data = nova_objects.unwrap(value, "Flavor", where=where)
    itype = {key: item for key, item in data.items()
             if key not in _SIZE_FIELDS and key != "extra_specs"}
    for field in _SIZE_FIELDS:
        if data.get(field) is None:
            if field in _REQUIRED_SIZES:
                raise _invalid(f"{where} has no {field}")
            itype[field] = 0
        else:
            itype[field] = _whole(data[field], f"{where}.{field}")
    _opt_str(data.get("name"), f"{where}.name")
    itype["extra_specs"] = _str_dict(data.get("extra_specs"), f"{where}.extra_specs")
    return itype


def _numa_cell_cpus(cell: Any, where: str) -> str:
    if not isinstance(cell, (list, tuple, set, frozenset)) or not all(
            isinstance(cpu, int) and not isinstance(cpu, bool) and cpu >= 0
            for cpu in cell):
        raise _invalid(f"{where} must be a set of CPU numbers, got {cell!r}")
    return ",".join(str(cpu) for cpu in sorted(cell))


def _image_props(props: Any, where: str) -> dict:
    """ImageMetaProps data (or a 4.0 plain dict of it) as Glance's properties.

    Everything is kept under its name, except what nova's model holds
    under another name than Glance's, which is turned back into Glance's
    form, so that ``image_meta.read`` gives the same model again: the NUMA
    cell lists become one property per cell, ``traits_required`` becomes
    ``trait:NAME = required``.
    """
    if props is None:
        return {}
    if not isinstance(props, Mapping):
        raise _invalid(f"{where} must be a dict, got {_type_name(props)}")
    result = dict(props)
    cpus = result.pop("hw_numa_cpus", None)
    if cpus is not None:
        if not isinstance(cpus, (list, tuple)):
            raise _invalid(f"{where}.hw_numa_cpus must be a list of CPU sets, "
                           f"got {cpus!r}")
        for index, cell in enumerate(cpus):
            result[f"hw_numa_cpus.{index}"] = _numa_cell_cpus(
                cell, f"{where}.hw_numa_cpus[{index}]")
    mem = result.pop("hw_numa_mem", None)
    if mem is not None:
        if not isinstance(mem, (list, tuple)):
            raise _invalid(f"{where}.hw_numa_mem must be a list of MB, got {mem!r}")
        for index, size in enumerate(mem):
            result[f"hw_numa_mem.{index}"] = _whole(
                size, f"{where}.hw_numa_mem[{index}]")
    traits = result.pop("traits_required", None)
    if traits is not None:
        if not isinstance(traits, (list, tuple)) or not all(
                isinstance(trait, str) for trait in traits):
            raise _invalid(f"{where}.traits_required must be a list of trait "
                           f"names, got {traits!r}")
        result.update((f"trait:{trait}", "required") for trait in traits)
    return result


def _image(value: Any, where: str) -> dict:
    """An ImageMeta primitive (or None) as Havana's ``image`` dict."""
    if value is None:
        return {}
    data = nova_objects.unwrap(value, "ImageMeta", where=where)
    image = {key: item for key, item in data.items() if key != "properties"}
    _opt_str(image.get("id"), f"{where}.id")
    props = data.get("properties")
    if props is not None:
        props = nova_objects.unwrap(props, "ImageMetaProps",
                                    where=f"{where}.properties")
    image["properties"] = _image_props(props, f"{where}.properties")
    return image


def _hints(value: Any, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _invalid(f"{where} must be a dict, got {_type_name(value)}")
    hints: dict[str, Any] = {}
    for key, raw in value.items():
        if not isinstance(key, str):
            raise _invalid(f"{where} has a key that is not a string: {key!r}")
        # nova's RequestSpec wraps a scalar in a list itself; the wire
        # always has lists, a scalar is taken the same way.
        items = [raw] if isinstance(raw, str) else raw
        if not isinstance(items, (list, tuple)) or not all(
                isinstance(item, str) for item in items):
            raise _invalid(f"{where}.{key} must be a list of strings, got {raw!r}")
        items = list(items)
        hints[key] = items if key in _LIST_HINTS or len(items) != 1 else items[0]
    return hints


def _rules(value: Any, where: str) -> dict:
    rules: dict[str, Any] = dict(_str_dict(value, where))
    if "max_server_per_host" in rules:
        # nova's InstanceGroup.rules property makes it a number.
        text = rules["max_server_per_host"]
        try:
            number = int(text)
        except ValueError:
            number = 0
        if number < 1:
            raise _invalid(f"{where}.max_server_per_host must be a whole "
                           f"number of at least 1, got {text!r}")
        rules["max_server_per_host"] = number
    return rules


def _group(value: Any, where: str) -> dict | None:
    """An InstanceGroup primitive as Havana's ``instance_group`` dict."""
    if value is None:
        return None
    data = nova_objects.unwrap(value, "InstanceGroup", where=where)
    group: dict[str, Any] = {}
    uuid = _opt_str(data.get("uuid"), f"{where}.uuid")
    if uuid:
        group["uuid"] = uuid
    group["name"] = _opt_str(data.get("name"), f"{where}.name")
    policy = _opt_str(data.get("policy"), f"{where}.policy")
    if not policy:
        # InstanceGroup before 1.11: a list that only ever held one policy.
        policies = _str_list(data.get("policies"), f"{where}.policies")
        policy = policies[0] if policies else None
    group["policy"] = policy
    # The field is ``_rules`` on the wire (``rules`` is a property).
    rules = data.get("_rules", data.get("rules"))
    group["rules"] = _rules(rules, f"{where}.rules")
    group["members"] = _str_list(data.get("members"), f"{where}.members")
    group["hosts"] = _str_list(data.get("hosts"), f"{where}.hosts")
    return group


def _legacy_attempts(value: Any, where: str) -> int:
    # nova's conductor counted the attempt being scheduled (populate_retry);
    # Havana's compute node sent the count of attempts made, and the
    # scheduling cycle adds this one.
    return max(0, _whole(value, where) - 1)


def _retry(value: Any, where: str) -> dict | None:
    """A SchedulerRetries primitive as Havana's ``retry`` dict."""
    if value is None:
        return None
    data = nova_objects.unwrap(value, "SchedulerRetries", where=where)
    if data.get("num_attempts") is None:
        # nova's SchedulerRetries.from_dict leaves an incomplete retry empty.
        return None
    retry = {"num_attempts": _legacy_attempts(data["num_attempts"],
                                              f"{where}.num_attempts"),
             "hosts": []}
    hosts = data.get("hosts")
    if hosts is not None:
        nodes = nova_objects.unwrap_list(hosts, "ComputeNodeList", "ComputeNode",
                                         where=f"{where}.hosts")
        for index, node in enumerate(nodes):
            host = _opt_str(node.get("host"), f"{where}.hosts[{index}].host")
            if not host:
                raise _invalid(f"{where}.hosts[{index}] has no host")
            nodename = _opt_str(node.get("hypervisor_hostname"),
                                f"{where}.hosts[{index}].hypervisor_hostname")
            retry["hosts"].append([host, nodename])
    return retry


def _limit_values(data: Mapping, where: str) -> dict | None:
    limits: dict[str, Any] = {}
    for field in _LIMIT_FIELDS:
        item = data.get(field)
        if item is None:
            continue
        if isinstance(item, bool) or not isinstance(item, (int, float)) or item < 0:
            raise _invalid(f"{where}.{field} must be a non-negative number, "
                           f"got {item!r}")
        limits[field] = item
    return limits or None


def _limits(value: Any, where: str) -> dict | None:
    if value is None:
        return None
    data = nova_objects.unwrap(value, "SchedulerLimits", where=where)
    return _limit_values(data, where)


def _destination(value: Any, where: str) -> tuple[str, str | None] | None:
    """The (host, node) a Destination asks for; None when it names no host
    (nova sets a Destination with only a cell for moves kept in a cell)."""
    if value is None:
        return None
    if nova_objects.is_primitive(value):
        data = nova_objects.unwrap(value, "Destination", where=where)
    elif isinstance(value, Mapping):
        # Our own {'host', 'node'} form, as to_legacy writes it.
        data = dict(value)
    else:
        raise _invalid(f"{where} must be a nova Destination object primitive, "
                       f"got {_type_name(value)}")
    host = _opt_str(data.get("host"), f"{where}.host")
    if not host:
        return None
    node = _opt_str(data.get("node"), f"{where}.node")
    return host, node or None


def _apply_destination(fprops: dict, destination: tuple[str, str | None]) -> None:
    host, node = destination
    # As nova's host manager: the candidates narrowed to the destination,
    # the filters still run (force_hosts, by contrast, skips them).
    fprops["requested_destination"] = {"host": host, "node": node}


def _destination_aggregates(value: Any, where: str) -> dict:
    """A Destination's ``aggregates`` and ``forbidden_aggregates``, if any."""
    if not nova_objects.is_primitive(value):
        return {}
    data = nova_objects.unwrap(value, "Destination", where=where)
    found = {}
    for field in ("aggregates", "forbidden_aggregates"):
        names = _str_list(data.get(field), f"{where}.{field}")
        if names:
            found[field] = names
    return found


def _destination_cell(value: Any, where: str) -> str | None:
    """The uuid of the cell a Destination keeps the request in: its
    ``cell`` unless ``allow_cross_cell_move`` (nova's host manager then
    reads every cell)."""
    if not nova_objects.is_primitive(value):
        return None
    data = nova_objects.unwrap(value, "Destination", where=where)
    if data.get("cell") is None:
        return None
    allow = data.get("allow_cross_cell_move", False)
    if not isinstance(allow, bool):
        raise _invalid(f"{where}.allow_cross_cell_move must be true or false, "
                       f"got {allow!r}")
    cell = nova_objects.unwrap(data["cell"], "CellMapping", where=f"{where}.cell")
    uuid = _opt_str(cell.get("uuid"), f"{where}.cell.uuid")
    if not uuid:
        raise _invalid(f"{where}.cell has no uuid")
    return None if allow else uuid


def _destination_node(value: Any, where: str) -> str | None:
    if not nova_objects.is_primitive(value):
        return None
    data = nova_objects.unwrap(value, "Destination", where=where)
    return _opt_str(data.get("node"), f"{where}.node") or None


def _request_group_dict(value: Any, where: str) -> dict:
    """A RequestGroup primitive as a dict of its fields the model reads."""
    data = nova_objects.unwrap(value, "RequestGroup", where=where)
    resources = data.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise _invalid(f"{where}.resources must be a dict")
    aggregates = data.get("aggregates") or []
    if not isinstance(aggregates, (list, tuple)):
        raise _invalid(f"{where}.aggregates must be a list of lists")
    return {
        "requester_id": _opt_str(data.get("requester_id"),
                                 f"{where}.requester_id"),
        "resources": {rc: _whole(n, f"{where}.resources.{rc}")
                      for rc, n in resources.items()},
        "required_traits": _str_list(data.get("required_traits"),
                                     f"{where}.required_traits"),
        "forbidden_traits": _str_list(data.get("forbidden_traits"),
                                      f"{where}.forbidden_traits"),
        "aggregates": [_str_list(item, f"{where}.aggregates[{i}]")
                       for i, item in enumerate(aggregates)],
        "forbidden_aggregates": _str_list(data.get("forbidden_aggregates"),
                                          f"{where}.forbidden_aggregates"),
        "in_tree": _opt_str(data.get("in_tree"), f"{where}.in_tree"),
    }


def _requested_resources(value: Any, where: str) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise _invalid(f"{where} must be a list of RequestGroup primitives, "
                       f"got {_type_name(value)}")
    return [_request_group_dict(item, f"{where}[{i}]")
            for i, item in enumerate(value)]


def _level_params(value: Any, where: str) -> dict | None:
    if value is None:
        return None
    data = nova_objects.unwrap(value, "RequestLevelParams", where=where)
    subtrees = data.get("same_subtree") or []
    if not isinstance(subtrees, (list, tuple)):
        raise _invalid(f"{where}.same_subtree must be a list of lists")
    return {
        "root_required": _str_list(data.get("root_required"),
                                   f"{where}.root_required"),
        "root_forbidden": _str_list(data.get("root_forbidden"),
                                    f"{where}.root_forbidden"),
        "same_subtree": [_str_list(item, f"{where}.same_subtree[{i}]")
                         for i, item in enumerate(subtrees)],
    }


def _networks(value: Any, where: str) -> list[dict]:
    if value is None:
        return []
    items = nova_objects.unwrap_list(value, "NetworkRequestList",
                                     "NetworkRequest", where=where)
    return [{"network_id": _opt_str(item.get("network_id"),
                                    f"{where}[{i}].network_id"),
             "port_id": _opt_str(item.get("port_id"), f"{where}[{i}].port_id")}
            for i, item in enumerate(items)]


def _pci_requests(value: Any, where: str) -> list[dict]:
    if value is None:
        return []
    data = nova_objects.unwrap(value, "InstancePCIRequests", where=where)
    requests = data.get("requests") or []
    if not isinstance(requests, (list, tuple)):
        raise _invalid(f"{where}.requests must be a list")
    result = []
    for i, item in enumerate(requests):
        request = nova_objects.unwrap(item, "InstancePCIRequest",
                                      where=f"{where}.requests[{i}]")
        alias = _opt_str(request.get("alias_name"),
                         f"{where}.requests[{i}].alias_name")
        result.append({
            "request_id": _opt_str(request.get("request_id"),
                                   f"{where}.requests[{i}].request_id"),
            # nova's InstancePCIRequest.source: a request without an alias
            # is a neutron SR-IOV port's.
            "source": "neutron_port" if alias is None else "flavor_alias",
        })
    return result


def _uuids_without_list(num_instances: Any, uuid: Any) -> list[str]:
    # Only a one-instance request can be claimed: the others' uuids are
    # unknown, and a partial claim would be worse than none.
    if num_instances == 1 and not isinstance(num_instances, bool) \
            and isinstance(uuid, str) and uuid:
        return [uuid]
    return []


def _with_uuids(err: exception.InvalidRequestSpec,
                uuids: list[str]) -> exception.InvalidRequestSpec:
    if err.instance_uuids or not uuids:
        return err
    return exception.InvalidRequestSpec(err.reason, instance_uuids=uuids)


def _known_uuids(spec_obj: Any, instance_uuids: Any) -> list[str]:
    """Instance uuids a (possibly malformed) call names, for the error."""
    if isinstance(instance_uuids, (list, tuple)):
        return [u for u in instance_uuids if isinstance(u, str) and u]
    if nova_objects.is_primitive(spec_obj, "RequestSpec"):
        data = spec_obj.get(nova_objects.DATA_KEY)
        uuid = data.get("instance_uuid") if isinstance(data, Mapping) else None
        if isinstance(uuid, str) and uuid:
            return [uuid]
    return []


# -- the API -----------------------------------------------------------------

def to_legacy(spec_obj: Any, instance_uuids: Any = None) -> tuple[dict, dict]:
    """``(request_spec, filter_properties)`` for ``request.parse`` from a
    RequestSpec primitive and the ``instance_uuids`` argument (None: 4.3).

    InvalidRequestSpec naming the field on anything malformed, carrying
    the instance uuids the call names.
    """
    try:
        return _to_legacy(spec_obj, instance_uuids)
    except exception.InvalidRequestSpec as err:
        raise _with_uuids(err, _known_uuids(spec_obj, instance_uuids)) from None


def _to_legacy(spec_obj: Any, instance_uuids: Any) -> tuple[dict, dict]:
    where = "spec_obj"
    data = nova_objects.unwrap(spec_obj, "RequestSpec", where=where)

    if data.get("flavor") is None:
        raise _invalid(f"{where} has no flavor")
    itype = _flavor(data["flavor"], f"{where}.flavor")
    if data.get("is_bfv") is not None and not isinstance(data["is_bfv"], bool):
        raise _invalid(f"{where}.is_bfv must be true or false, got {data['is_bfv']!r}")
    if data.get("is_bfv"):
        # A volume-backed instance has no local root disk; nova asks
        # Placement for none.
        itype["root_gb"] = 0
    is_bfv = bool(data.get("is_bfv"))
    image = _image(data.get("image"), f"{where}.image")

    num = data.get("num_instances")
    num = 1 if num is None else _whole(num, f"{where}.num_instances")
    if num < 1:
        raise _invalid(f"{where}.num_instances must be at least 1, got {num}")
    instance_uuid = _opt_str(data.get("instance_uuid"), f"{where}.instance_uuid")
    if instance_uuids is None:
        uuids = _uuids_without_list(num, instance_uuid)
    elif isinstance(instance_uuids, (list, tuple)) and all(
            isinstance(u, str) and u for u in instance_uuids):
        uuids = list(instance_uuids)
    else:
        raise _invalid("instance_uuids must be a list of instance uuid strings, "
                       f"got {instance_uuids!r}")

    props: dict[str, Any] = {field: itype[field] for field in _SIZE_FIELDS}
    first = instance_uuid or (uuids[0] if uuids else None)
    if first:
        props["uuid"] = first
    for field in ("availability_zone", "project_id", "user_id"):
        props[field] = _opt_str(data.get(field), f"{where}.{field}")
    props["image_ref"] = image.get("id")
    props["os_type"] = image.get("properties", {}).get("os_type")
    if "id" in itype:
        props["instance_type_id"] = itype["id"]

    request_spec: dict[str, Any] = {
        "instance_properties": props,
        "instance_type": itype,
        "image": image,
        "instance_uuids": uuids,
        "num_instances": num,
    }
    group = _group(data.get("instance_group"), f"{where}.instance_group")
    if group is not None:
        request_spec["instance_group"] = group
    if is_bfv:
        request_spec["is_bfv"] = True
    groups = _requested_resources(data.get("requested_resources"),
                                  f"{where}.requested_resources")
    if groups:
        request_spec["requested_resources"] = groups
    params = _level_params(data.get("request_level_params"),
                           f"{where}.request_level_params")
    if params and any(params.values()):
        request_spec["request_level_params"] = params
    networks = _networks(data.get("requested_networks"),
                         f"{where}.requested_networks")
    if networks:
        request_spec["requested_networks"] = networks
    pci = _pci_requests(data.get("pci_requests"), f"{where}.pci_requests")
    if pci:
        request_spec["pci_requests"] = pci

    fprops: dict[str, Any] = {
        "scheduler_hints": _hints(data.get("scheduler_hints"),
                                  f"{where}.scheduler_hints"),
    }
    for field in ("force_hosts", "force_nodes", "ignore_hosts"):
        names = _str_list(data.get(field), f"{where}.{field}")
        if names:
            fprops[field] = names
    destination = _destination(data.get("requested_destination"),
                               f"{where}.requested_destination")
    if destination is not None:
        _apply_destination(fprops, destination)
    aggregates = _destination_aggregates(data.get("requested_destination"),
                                         f"{where}.requested_destination")
    node = _destination_node(data.get("requested_destination"),
                             f"{where}.requested_destination")
    if destination is None and node:
        # A node without its host (API 2.74's hypervisor_hostname): nova
        # asks Placement within that node's tree.
        aggregates["node"] = node
    cell = _destination_cell(data.get("requested_destination"),
                             f"{where}.requested_destination")
    if cell:
        aggregates["cell"] = cell
    if aggregates:
        fprops.setdefault("requested_destination",
                          {"host": None, "node": None}).update(aggregates)
    retry = _retry(data.get("retry"), f"{where}.retry")
    if retry is not None:
        fprops["retry"] = retry
    limits = _limits(data.get("limits"), f"{where}.limits")
    if limits is not None:
        fprops["limits"] = limits
    return request_spec, fprops


def legacy_4_0(request_spec: Any, filter_properties: Any) -> tuple[dict, dict]:
    """nova's 4.0 dicts (``RequestSpec.to_legacy_request_spec_dict`` and
    ``to_legacy_filter_properties_dict``) made Havana's, for ``request.parse``.

    They differ from Havana's in that ``instance_type`` is a Flavor
    primitive, ``instance_properties`` carries NUMA/PCI object primitives
    and no swap, image NUMA properties are lists, the group comes as
    ``group_*`` keys, ``requested_destination`` is a Destination primitive
    and ``retry.num_attempts`` counts the attempt being made. Anything else
    is passed on for ``request.parse`` to judge. The arguments are not
    changed.
    """
    try:
        return _legacy_4_0(request_spec, filter_properties)
    except exception.InvalidRequestSpec as err:
        raise _with_uuids(err, request.find_instance_uuids(request_spec)) from None


def _legacy_4_0(request_spec: Any, filter_properties: Any) -> tuple[dict, dict]:
    if not isinstance(request_spec, Mapping):
        raise _invalid(f"request_spec must be a dict, got {_type_name(request_spec)}")
    if filter_properties is None:
        filter_properties = {}
    if not isinstance(filter_properties, Mapping):
        raise _invalid("filter_properties must be a dict, got "
                       f"{_type_name(filter_properties)}")
    spec = copy.deepcopy(dict(request_spec))
    fprops = copy.deepcopy(dict(filter_properties))

    itype = spec.get("instance_type")
    if nova_objects.is_primitive(itype):
        itype = spec["instance_type"] = _flavor(itype, "request_spec.instance_type")

    image = spec.get("image")
    if nova_objects.is_primitive(image):
        spec["image"] = _image(image, "request_spec.image")
    elif isinstance(image, Mapping):
        spec["image"] = dict(image)
        spec["image"]["properties"] = _image_props(
            image.get("properties"), "request_spec.image.properties")
    image = spec.get("image") if isinstance(spec.get("image"), dict) else {}

    props = spec.get("instance_properties")
    if isinstance(props, dict):
        for key in _LEGACY_OBJECT_PROPS:
            props.pop(key, None)
        if isinstance(itype, Mapping) and "swap" not in props and "swap" in itype:
            props["swap"] = itype["swap"]
        props.setdefault("image_ref", image.get("id"))
        image_props = image.get("properties")
        if isinstance(image_props, Mapping):
            props.setdefault("os_type", image_props.get("os_type"))
        if "instance_uuids" not in spec:
            num = spec.get("num_instances")
            spec["instance_uuids"] = _uuids_without_list(
                1 if num is None else num, props.get("uuid"))

    group_object = fprops.pop("instance_group", None)
    if "instance_group" not in spec:
        if group_object is not None:
            spec["instance_group"] = _group(group_object,
                                            "filter_properties.instance_group")
        elif fprops.get("group_updated"):
            spec["instance_group"] = _legacy_group(fprops)

    retry = fprops.get("retry")
    if isinstance(retry, Mapping) and retry.get("num_attempts") is not None:
        fprops["retry"] = dict(retry, num_attempts=_legacy_attempts(
            retry["num_attempts"], "filter_properties.retry.num_attempts"))

    limits = fprops.get("limits")
    if isinstance(limits, Mapping):
        limits = _limit_values(limits, "filter_properties.limits")
        if limits is None:
            fprops.pop("limits")
        else:
            fprops["limits"] = limits

    destination = _destination(fprops.pop("requested_destination", None),
                               "filter_properties.requested_destination")
    if destination is not None:
        _apply_destination(fprops, destination)
    return spec, fprops


def _legacy_group(fprops: Mapping) -> dict:
    """nova's ``_to_legacy_group_info`` keys as an ``instance_group`` dict."""
    where = "filter_properties"
    policies = _str_list(fprops.get("group_policies"), f"{where}.group_policies")
    group: dict[str, Any] = {
        "policy": policies[0] if policies else None,
        "rules": {},
        "members": _str_list(fprops.get("group_members"), f"{where}.group_members"),
        "hosts": _str_list(fprops.get("group_hosts"), f"{where}.group_hosts"),
    }
    uuid = _opt_str(fprops.get("group_uuid"), f"{where}.group_uuid")
    if uuid:
        group["uuid"] = uuid
    return group
