"""A validated, typed view of nova's request_spec and filter_properties.

Requests arrive as Havana's plain dicts from callers we do not control. This
module is the one place that checks them: anything malformed becomes an
InvalidRequestSpec naming the field, before any filter sees the request.
Unknown extra keys (a real nova sends many) are kept and ignored.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from nova_sched import exception
from nova_sched.scheduler.placement_model.resource_request import RequestGroup
from nova_sched.scheduler.wire import image_meta

# A request that asks for more instances than this is refused before any
# work is done: it would otherwise allocate per-instance state for a
# number a caller typed by mistake (num_instances of 10**9).
MAX_INSTANCES_PER_REQUEST = 10000

_SIZE_FIELDS = ("memory_mb", "vcpus", "root_gb", "ephemeral_gb", "swap")


@dataclasses.dataclass
class RequestSpec:
    """What one scheduling request asks for, with sizes checked.

    ``raw`` and ``filter_properties`` are the caller's dicts (deep-copied),
    forwarded to the compute node as Havana does.
    """

    raw: dict
    filter_properties: dict
    instance_uuids: list[str]
    num_instances: int
    memory_mb: int
    vcpus: int
    root_gb: int
    ephemeral_gb: int
    swap: int
    availability_zone: str | None
    project_id: str | None
    user_id: str | None
    instance_properties: dict
    instance_type: dict
    extra_specs: dict
    image: dict
    # The image's properties as nova's ImageMetaProps has them (what
    # filters read); the raw ones stay in ``image`` for the compute node.
    image_props: image_meta.ImageProperties
    scheduler_hints: dict
    force_hosts: list[str]
    force_nodes: list[str]
    ignore_hosts: list[str]
    instance_group: dict | None
    # (host, node or None): today's nova's requested_destination, which
    # narrows the candidates as force_hosts does but keeps the filters.
    destination: tuple[str, str | None] | None = None
    # What today's nova sends for Placement (absent from a Havana request):
    # a volume-backed instance asks for no root disk;
    is_bfv: bool = False
    # request groups from outside the flavor (ports' bandwidth, PCI in
    # Placement, device profiles), each with its requester_id;
    requested_resources: list[RequestGroup] = dataclasses.field(
        default_factory=list)
    # request_level_params: traits required/forbidden on the root provider
    # and same_subtree's groups of suffixes;
    root_required: set[str] = dataclasses.field(default_factory=set)
    root_forbidden: set[str] = dataclasses.field(default_factory=set)
    same_subtree: list[frozenset[str]] = dataclasses.field(default_factory=list)
    # requested_destination's aggregates: each item "a,b" (in a or b), all
    # items required; and the forbidden ones;
    destination_aggregates: list[str] = dataclasses.field(default_factory=list)
    destination_forbidden_aggregates: set[str] = dataclasses.field(
        default_factory=set)
    # requested_destination's node when it names no host (nova then asks
    # Placement within that node's tree; ``destination`` stays None);
    destination_node: str | None = None
    # requested_destination's cell when nova keeps the move in it (no
    # allow_cross_cell_move): only that cell's nodes are candidates, as
    # nova's host manager reads only that cell;
    destination_cell: str | None = None
    # requested_networks: {"network_id", "port_id"} of each (the request
    # filters of routed networks and remote-managed ports read them);
    requested_networks: list[dict] = dataclasses.field(default_factory=list)
    # pci_requests: {"request_id", "source"} of each (OWNER_NOVA on the
    # request groups of flavor PCI requests).
    pci_requests: list[dict] = dataclasses.field(default_factory=list)

    @property
    def disk_mb(self) -> int:
        """Root plus ephemeral plus swap, in MB, as nova's DiskFilter counts."""
        return (self.root_gb + self.ephemeral_gb) * 1024 + self.swap

    @property
    def retry(self) -> dict | None:
        return self.filter_properties.get("retry") or None

    @property
    def is_rebuild(self) -> bool:
        """nova's ``_nova_check_type`` hint: a rebuild on the instance's own
        host, which only asks whether the host still passes the filters
        (nova's ``request_is_rebuild``: Placement is not asked)."""
        value = self.scheduler_hints.get("_nova_check_type")
        return value in ("rebuild", ["rebuild"])

    @property
    def image_id(self) -> str | None:
        return self.image.get("id") or self.instance_properties.get("image_ref")


def _fail(reason: str, uuids: list[str]) -> exception.InvalidRequestSpec:
    return exception.InvalidRequestSpec(reason, instance_uuids=uuids)


def find_instance_uuids(request_spec: Any) -> list[str]:
    """Every instance uuid a (possibly malformed) request mentions."""
    uuids: list[str] = []
    if not isinstance(request_spec, dict):
        return uuids
    listed = request_spec.get("instance_uuids")
    if isinstance(listed, (list, tuple)):
        uuids.extend(u for u in listed if isinstance(u, str) and u)
    props = request_spec.get("instance_properties")
    # instance_properties carries the first instance's uuid; on a compute
    # node's retry instance_uuids names only the instance being retried, so
    # the properties' uuid counts only when nothing is listed.
    if not uuids and isinstance(props, dict):
        uuid = props.get("uuid")
        if isinstance(uuid, str) and uuid and uuid not in uuids:
            uuids.append(uuid)
    return uuids


def _whole_number(value: Any, field: str, uuids: list[str]) -> int:
    # bool is an int in Python; a flavor with memory_mb=True is a bug.
    if isinstance(value, bool):
        raise _fail(f"{field} must be a whole number, got {value!r}", uuids)
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    else:
        raise _fail(
            f"{field} must be a whole non-negative number, got "
            f"{type(value).__name__} {value!r}",
            uuids,
        )
    if number < 0:
        raise _fail(f"{field} must not be negative, got {number}", uuids)
    return number


def _dict_or_empty(value: Any, field: str, uuids: list[str]) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(f"{field} must be a dict, got {type(value).__name__}", uuids)
    return value


def _str_list(value: Any, field: str, uuids: list[str]) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(v, str) for v in value
    ):
        raise _fail(f"{field} must be a list of names", uuids)
    return list(value)


def _destination_node(value: Any, uuids: list[str]) -> str | None:
    if not isinstance(value, dict) or value.get("host") is not None:
        return None
    node = value.get("node")
    if node is not None and not isinstance(node, str):
        raise _fail("requested_destination.node must be a string", uuids)
    return node or None


def _destination_cell(value: Any, uuids: list[str]) -> str | None:
    if not isinstance(value, dict):
        return None
    cell = value.get("cell")
    if cell is not None and (not isinstance(cell, str) or not cell):
        raise _fail(f"requested_destination.cell must be a cell uuid, got {cell!r}",
                    uuids)
    return cell or None


def _destination_aggregates(value: Any, uuids: list[str]) -> tuple[list, set]:
    if not isinstance(value, dict):
        return [], set()
    return (string_list(value.get("aggregates"), "requested_destination.aggregates",
                        uuids),
            set(string_list(value.get("forbidden_aggregates"),
                            "requested_destination.forbidden_aggregates", uuids)))


def _destination(value: Any, uuids: list[str]) -> tuple[str, str | None] | None:
    if value is None:
        return None
    if isinstance(value, dict) and value.get("host") is None:
        # Only aggregates or a node (today's nova): no host to narrow the
        # filters to; the resource request narrows to the node.
        return None
    host = value.get("host") if isinstance(value, dict) else None
    node = value.get("node") if isinstance(value, dict) else None
    if not isinstance(host, str) or not host or not isinstance(node, (str, type(None))):
        raise _fail("requested_destination must be {'host': name, 'node': name or "
                    "null}", uuids)
    return host, node or None


def string_list(value: Any, field: str, uuids: list[str]) -> list[str]:
    """A list (or set, as nova's sets arrive) of strings; else refused, the
    refusal naming ``field`` and the instances ``uuids``."""
    if value is None:
        return []
    if isinstance(value, (set, frozenset)):
        value = sorted(value, key=str)
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, str) for v in value):
        raise _fail(f"{field} must be a list of strings, got {value!r}", uuids)
    return list(value)


def _request_group(value: Any, field: str, uuids: list[str]) -> RequestGroup:
    """One of nova's RequestGroups (a dict of its fields) as the model's."""
    if not isinstance(value, dict):
        raise _fail(f"{field} must be a dict, got {type(value).__name__}", uuids)
    requester = value.get("requester_id")
    if requester is not None and not isinstance(requester, str):
        raise _fail(f"{field}.requester_id must be a string", uuids)
    resources = _dict_or_empty(value.get("resources"), f"{field}.resources",
                               uuids)
    amounts: dict[str, int] = {}
    for rc, amount in resources.items():
        if not isinstance(rc, str):
            raise _fail(f"{field}.resources has a key that is not a string", uuids)
        amounts[rc] = _whole_number(amount, f"{field}.resources.{rc}", uuids)
    aggregates = value.get("aggregates") or []
    if not isinstance(aggregates, (list, tuple)):
        raise _fail(f"{field}.aggregates must be a list of lists of aggregate "
                    "uuids", uuids)
    in_tree = value.get("in_tree")
    if in_tree is not None and not isinstance(in_tree, str):
        raise _fail(f"{field}.in_tree must be a provider uuid", uuids)
    return RequestGroup(
        suffix=requester or "",
        resources=amounts,
        required_traits=set(string_list(value.get("required_traits"),
                                        f"{field}.required_traits", uuids)),
        forbidden_traits=set(string_list(value.get("forbidden_traits"),
                                         f"{field}.forbidden_traits", uuids)),
        member_of=[frozenset(string_list(clause, f"{field}.aggregates[{i}]", uuids))
                   for i, clause in enumerate(aggregates)],
        forbidden_aggs=set(string_list(value.get("forbidden_aggregates"),
                                       f"{field}.forbidden_aggregates", uuids)),
        in_tree=in_tree or None,
        requester_id=requester or None,
    )


def _request_groups(value: Any, uuids: list[str]) -> list[RequestGroup]:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise _fail("requested_resources must be a list of request groups", uuids)
    return [_request_group(item, f"requested_resources[{i}]", uuids)
            for i, item in enumerate(value)]


def _level_params(value: Any, uuids: list[str]) -> tuple[set, set, list]:
    params = _dict_or_empty(value, "request_level_params", uuids)
    subtrees = params.get("same_subtree") or []
    if not isinstance(subtrees, (list, tuple)):
        raise _fail("request_level_params.same_subtree must be a list of lists "
                    "of group suffixes", uuids)
    return (set(string_list(params.get("root_required"),
                            "request_level_params.root_required", uuids)),
            set(string_list(params.get("root_forbidden"),
                            "request_level_params.root_forbidden", uuids)),
            [frozenset(string_list(item, f"request_level_params.same_subtree[{i}]",
                                   uuids)) for i, item in enumerate(subtrees)])


def _id_dicts(value: Any, field: str, keys: tuple[str, ...],
              uuids: list[str]) -> list[dict]:
    """A list of dicts keeping ``keys``, each a string or None."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise _fail(f"{field} must be a list", uuids)
    result = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise _fail(f"{field}[{i}] must be a dict", uuids)
        kept = {}
        for key in keys:
            if item.get(key) is not None and not isinstance(item[key], str):
                raise _fail(f"{field}[{i}].{key} must be a string", uuids)
            kept[key] = item.get(key)
        result.append(kept)
    return result


_IMMUTABLE = (str, int, float, bool, type(None))


def _own(value: Any) -> Any:
    """A deep copy of a request's data, which the scheduler then changes
    freely (a retry's hosts, a launch index) without touching the caller's.

    What arrives over RPC is JSON's shapes: dicts, lists and immutable
    scalars, copied here in a third of ``copy.deepcopy``'s time (a
    request's spec is copied on every request); anything else, from an
    in-process caller, goes to ``copy.deepcopy``."""
    kind = type(value)
    if kind is dict:
        return {key: _own(item) for key, item in value.items()}
    if kind is list:
        return [_own(item) for item in value]
    if kind is tuple:
        return tuple(_own(item) for item in value)
    if isinstance(value, _IMMUTABLE):
        return value
    return copy.deepcopy(value)


def parse(request_spec: Any, filter_properties: Any) -> RequestSpec:
    """Validate a Havana request and return its typed view.

    Raises InvalidRequestSpec (carrying any instance uuids found, so the
    caller can fail those instances visibly) on anything malformed.
    """
    uuids = find_instance_uuids(request_spec)
    if not isinstance(request_spec, dict):
        raise _fail(
            f"request_spec must be a dict, got {type(request_spec).__name__}", uuids
        )
    if filter_properties is None:
        filter_properties = {}
    if not isinstance(filter_properties, dict):
        raise _fail(
            "filter_properties must be a dict, got "
            f"{type(filter_properties).__name__}",
            uuids,
        )
    raw = _own(request_spec)
    fprops = _own(filter_properties)

    props = raw.get("instance_properties")
    if not isinstance(props, dict):
        raise _fail("request_spec has no instance_properties dict", uuids)
    itype = _dict_or_empty(raw.get("instance_type"), "instance_type", uuids)
    if not itype:
        itype = _dict_or_empty(
            fprops.get("instance_type"), "filter_properties.instance_type", uuids
        )

    listed = raw.get("instance_uuids")
    if listed is None:
        instance_uuids = [props["uuid"]] if isinstance(props.get("uuid"), str) else []
    elif isinstance(listed, (list, tuple)) and all(
        isinstance(u, str) and u for u in listed
    ):
        instance_uuids = list(listed)
    else:
        raise _fail("instance_uuids must be a list of uuid strings", uuids)
    if len(set(instance_uuids)) != len(instance_uuids):
        raise _fail("instance_uuids lists an instance twice", uuids)

    if "num_instances" in raw and raw["num_instances"] is not None:
        num = _whole_number(raw["num_instances"], "num_instances", uuids)
    else:
        num = len(instance_uuids) or 1
    if num < 1:
        raise _fail("num_instances must be at least 1", uuids)
    if num > MAX_INSTANCES_PER_REQUEST:
        raise _fail(
            f"num_instances {num} exceeds the limit of "
            f"{MAX_INSTANCES_PER_REQUEST} per request",
            uuids,
        )
    if instance_uuids:
        # Havana schedules the listed instances and ignores num_instances:
        # a compute node's retry narrows instance_uuids to the one instance
        # and leaves num_instances as the original request had it.
        num = len(instance_uuids)

    sizes: dict[str, int] = {}
    for field in _SIZE_FIELDS:
        # The flavor is authoritative (nova's filters read it); the instance
        # properties are Havana's fallback for callers without one.
        if field in itype and itype[field] is not None:
            value, where = itype[field], f"instance_type.{field}"
        elif field in props and props[field] is not None:
            value, where = props[field], f"instance_properties.{field}"
        elif field in ("memory_mb", "vcpus", "root_gb"):
            raise _fail(f"request has no {field} in instance_type or "
                        "instance_properties", uuids)
        else:
            value, where = 0, field
        sizes[field] = _whole_number(value, where, uuids)

    az = props.get("availability_zone")
    if az is not None and not isinstance(az, str):
        raise _fail("availability_zone must be a string", uuids)

    extra_specs = _dict_or_empty(itype.get("extra_specs"), "extra_specs", uuids)
    image = _dict_or_empty(raw.get("image"), "image", uuids)
    try:
        image_props = image_meta.read(
            _dict_or_empty(image.get("properties"), "image.properties", uuids))
    except image_meta.InvalidImageProperties as err:
        raise _fail(str(err), uuids) from None
    hints = _dict_or_empty(
        fprops.get("scheduler_hints"), "scheduler_hints", uuids
    )
    retry = fprops.get("retry")
    if retry is not None:
        retry = _dict_or_empty(retry, "retry", uuids)
        if "num_attempts" in retry:
            _whole_number(retry["num_attempts"], "retry.num_attempts", uuids)
        hosts = retry.get("hosts", [])
        if not isinstance(hosts, list) or not all(
            isinstance(h, (list, tuple)) and len(h) == 2 for h in hosts
        ):
            raise _fail("retry.hosts must be a list of [host, node] pairs", uuids)
        retry["hosts"] = [list(h) for h in hosts]
    group = raw.get("instance_group")
    if group is not None:
        group = _dict_or_empty(group, "instance_group", uuids)

    is_bfv = raw.get("is_bfv", False)
    if not isinstance(is_bfv, (bool, type(None))):
        raise _fail(f"is_bfv must be true or false, got {is_bfv!r}", uuids)
    root_required, root_forbidden, same_subtree = _level_params(
        raw.get("request_level_params"), uuids)
    aggregates, forbidden_aggregates = _destination_aggregates(
        fprops.get("requested_destination"), uuids)

    return RequestSpec(
        is_bfv=bool(is_bfv),
        requested_resources=_request_groups(raw.get("requested_resources"),
                                            uuids),
        root_required=root_required,
        root_forbidden=root_forbidden,
        same_subtree=same_subtree,
        destination_aggregates=aggregates,
        destination_forbidden_aggregates=forbidden_aggregates,
        destination_node=_destination_node(fprops.get("requested_destination"),
                                           uuids),
        destination_cell=_destination_cell(fprops.get("requested_destination"),
                                           uuids),
        requested_networks=_id_dicts(raw.get("requested_networks"),
                                     "requested_networks",
                                     ("network_id", "port_id"), uuids),
        pci_requests=_id_dicts(raw.get("pci_requests"), "pci_requests",
                               ("request_id", "source"), uuids),
        raw=raw,
        filter_properties=fprops,
        instance_uuids=instance_uuids,
        num_instances=num,
        availability_zone=az or None,
        project_id=props.get("project_id"),
        user_id=props.get("user_id"),
        instance_properties=props,
        instance_type=itype,
        extra_specs=extra_specs,
        image=image,
        image_props=image_props,
        scheduler_hints=hints,
        force_hosts=_str_list(fprops.get("force_hosts"), "force_hosts", uuids),
        force_nodes=_str_list(fprops.get("force_nodes"), "force_nodes", uuids),
        ignore_hosts=_str_list(fprops.get("ignore_hosts"), "ignore_hosts", uuids),
        instance_group=group,
        destination=_destination(fprops.get("requested_destination"), uuids),
        **sizes,
    )
