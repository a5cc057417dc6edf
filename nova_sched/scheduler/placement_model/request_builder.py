"""The resource request nova 34 builds from a request, as data.

nova-scheduler builds its ``GET /allocation_candidates`` query in
``nova/scheduler/utils.py``: ``ResourceRequest.from_request_spec`` reads
the flavor's ``resources[$S]:RC=N`` and ``trait[$S]:T=required|forbidden``
extra specs and ``group_policy``, the image's required traits, the CPU
pinning policies, the groups of ``requested_resources`` (ports, PCI
devices, device profiles) and ``request_level_params``, then the flavor's
sizes, memory encryption, persistent memory, vTPM, PCI NUMA affinity,
secure boot, maxphysaddr and stateless firmware; ``resources_from_request_spec``
adds ``requested_destination``'s aggregates, the destination or forced
host as ``in_tree``, drops ``limit`` where nova does and defaults
``group_policy``. ``build`` does the same and returns the request(s) nova
would send: two when nova also asks with VCPU in place of PCPU
(``[workarounds] disable_fallback_pcpu_query`` false), whose answers nova
merges.

A request nova or Placement refuses raises ``ResourceRequestRefused``
with their reason (see ``refusal``). The request filters
(``request_filters``) narrow the requests afterwards.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Union

from oslo_config import cfg

from nova_sched import exception
from nova_sched.scheduler.placement_model import guest_constraints as gc
from nova_sched.scheduler.placement_model.resource_request import (
    RequestGroup, ResourceRequest)

CONF = cfg.CONF

# os-resource-classes 1.x's standard classes (Placement 16 knows them all);
# any other name must be custom.
STANDARD_RESOURCE_CLASSES = frozenset((
    "VCPU", "MEMORY_MB", "DISK_GB", "PCI_DEVICE", "SRIOV_NET_VF",
    "NUMA_SOCKET", "NUMA_CORE", "NUMA_THREAD", "NUMA_MEMORY_MB",
    "IPV4_ADDRESS", "VGPU", "VGPU_DISPLAY_HEAD", "NET_BW_EGR_KILOBIT_PER_SEC",
    "NET_BW_IGR_KILOBIT_PER_SEC", "PCPU", "MEM_ENCRYPTION_CONTEXT", "FPGA",
    "PGPU", "NET_PACKET_RATE_KILOPACKET_PER_SEC",
    "NET_PACKET_RATE_EGR_KILOPACKET_PER_SEC",
    "NET_PACKET_RATE_IGR_KILOPACKET_PER_SEC",
))
CUSTOM_PREFIX = "CUSTOM_"

# A flavor's resources[$S]:RC / trait[$S]:NAME key ($S: Placement 1.33's
# suffix syntax, as nova matches it).
_EXTRA_SPEC_KEY = re.compile(r"^(resources|trait)([a-zA-Z0-9_-]{1,64})?:(.*)$")
# Hints under which nova asks for every candidate (no limit): the
# affinity filters must see every host.
_UNLIMITED_HINTS = ("group", "same_host", "different_host")

# What finds a destination's compute nodes: (host, node) -> the uuids of
# the compute nodes (their root providers) matching both (either may be
# None). nova asks its cell database; the caller knows the host table.
NodeLookup = Callable[[Union[str, None], Union[str, None]],
                      Union[str, None, Sequence[str]]]


class _Draft:
    """A request being built: groups by suffix in the order nova adds them."""

    def __init__(self) -> None:
        self.request = ResourceRequest(limit=CONF.scheduler.max_placement_results)
        self.cpu_pinning_requested = False
        self.flavor_suffixed_groups = 0

    def group(self, suffix: str | None) -> RequestGroup:
        suffix = suffix or ""
        group = self.request.groups.get(suffix)
        if group is None:
            group = self.request.groups[suffix] = RequestGroup(
                suffix=suffix, requester_id=suffix or None)
        return group

    def add_resource(self, rc: str, amount, suffix: str | None = None) -> None:
        # nova warns and skips a class neither standard nor custom, and an
        # amount that is not a whole number >= 0 (the group is made
        # anyway, and counts for the default group_policy).
        group = self.group(suffix)
        if not (rc.startswith(CUSTOM_PREFIX) or rc in STANDARD_RESOURCE_CLASSES):
            return
        try:
            number = int(amount)
        except (TypeError, ValueError):
            return
        if number < 0:
            return
        group.resources[rc] = number

    def add_trait(self, trait: str, kind: str, suffix: str | None = None) -> None:
        # Only "required" and "forbidden"; anything else nova warns about.
        group = self.group(suffix)
        if kind == "required":
            group.required_traits.add(trait)
        elif kind == "forbidden":
            group.forbidden_traits.add(trait)

    def merged_resources(self) -> dict[str, int]:
        merged: dict[str, int] = collections.defaultdict(int)
        for group in self.request.groups.values():
            for rc, amount in group.resources.items():
                merged[rc] += amount
        return merged

    def suffixed_groups(self) -> int:
        return sum(1 for suffix in self.request.groups if suffix)


def _flavor_extra_specs(draft: _Draft, extra_specs) -> None:
    for key, value in extra_specs.items():
        if key == "group_policy":
            if value in ("none", "isolate"):
                draft.request.group_policy = value
            continue
        match = _EXTRA_SPEC_KEY.match(key)
        if not match:
            continue
        prefix, suffix, name = match.groups()
        if prefix == "resources":
            draft.add_resource(name, value, suffix)
        else:
            draft.add_trait(name, value, suffix)


def _pinning(draft: _Draft, fi: gc.FlavorImage) -> None:
    """hw:cpu_policy dedicated/mixed as PCPU, hw:cpu_thread_policy as
    HW_CPU_HYPERTHREADING."""
    policy = gc.cpu_policy(fi)
    thread_policy = gc.cpu_thread_policy(fi)
    emulator_policy = gc.emulator_threads_policy(fi)
    pcpus = 0
    if policy == "dedicated":
        draft.cpu_pinning_requested = True
        pcpus = fi.vcpus
    if policy == "mixed":
        dedicated = gc.dedicated_cpus(fi)
        realtime = gc.realtime_cpus(fi)
        pcpus = len(dedicated or realtime or ())
        draft.add_resource("VCPU", fi.vcpus - pcpus)
    if policy in ("dedicated", "mixed"):
        if emulator_policy == "isolate":
            pcpus += 1
        draft.add_resource("PCPU", pcpus)
    kind = {"isolate": "forbidden", "require": "required"}.get(thread_policy)
    if kind:
        draft.add_trait("HW_CPU_HYPERTHREADING", kind)


def _outside_groups(draft: _Draft, groups: Sequence[RequestGroup]) -> None:
    """Groups from ports, PCI requests and device profiles, suffixed by
    their requester_id."""
    for outside in groups:
        if not outside.requester_id:
            raise exception.ResourceRequestRefused(
                "Missing requester_id in RequestGroup! This is probably a "
                "programmer error.")
        if not (outside.resources or outside.required_traits
                or outside.forbidden_traits or outside.member_of
                or outside.forbidden_aggs):
            raise exception.ResourceRequestRefused(
                "Refusing to add no-op RequestGroup with requester_id="
                f"{outside.requester_id}.")
        if outside.requester_id in draft.request.groups:
            raise exception.ResourceRequestRefused(
                f"Duplicate request group suffix {outside.requester_id}.")
        draft.request.groups[outside.requester_id] = RequestGroup(
            suffix=outside.requester_id,
            resources=dict(outside.resources),
            required_traits=set(outside.required_traits),
            forbidden_traits=set(outside.forbidden_traits),
            member_of=list(outside.member_of),
            forbidden_aggs=set(outside.forbidden_aggs),
            in_tree=outside.in_tree,
            requester_id=outside.requester_id)


def _flavor_sizes(draft: _Draft, spec) -> None:
    merged = draft.merged_resources()
    if "VCPU" not in merged and "PCPU" not in merged:
        draft.add_resource("VCPU", spec.vcpus)
    if "MEMORY_MB" not in merged:
        draft.add_resource("MEMORY_MB", spec.memory_mb)
    if "DISK_GB" not in merged:
        disk = spec.ephemeral_gb + math.ceil(spec.swap / 1024)
        if not spec.is_bfv:
            disk += spec.root_gb
        if disk:
            draft.add_resource("DISK_GB", disk)


def _host_features(draft: _Draft, fi: gc.FlavorImage) -> None:
    """Memory encryption, pmem, vTPM, PCI NUMA affinity, secure boot,
    maxphysaddr and stateless firmware, in nova's order."""
    model = gc.mem_encryption(fi)
    if model is not None:
        draft.add_resource("MEM_ENCRYPTION_CONTEXT", 1)
        draft.add_trait(model.trait, "required")
    namespaces: dict[str, int] = collections.defaultdict(int)
    for label in gc.pmem_labels(fi):
        namespaces[CUSTOM_PREFIX + re.sub(
            "[^0-9A-Za-z]+", "_", "PMEM_NAMESPACE_" + label).upper()] += 1
    for rc, amount in namespaces.items():
        draft.add_resource(rc, amount)
    tpm = gc.vtpm(fi)
    if tpm is not None:
        version, model_name = tpm
        draft.add_trait("COMPUTE_SECURITY_TPM_CRB" if model_name == "tpm-crb"
                        else "COMPUTE_SECURITY_TPM_TIS", "required")
        draft.add_trait("COMPUTE_SECURITY_TPM_2_0" if version == "2.0"
                        else "COMPUTE_SECURITY_TPM_1_2", "required")
    if gc.pci_numa_policy(fi) == "socket":
        draft.add_trait("COMPUTE_SOCKET_PCI_NUMA_AFFINITY", "required")
    if gc.secure_boot(fi) == "required":
        draft.add_trait("COMPUTE_SECURITY_UEFI_SECURE_BOOT", "required")
    mode = gc.maxphysaddr_mode(fi)
    if mode == "passthrough":
        draft.add_trait("COMPUTE_ADDRESS_SPACE_PASSTHROUGH", "required")
    elif mode == "emulate":
        draft.add_trait("COMPUTE_ADDRESS_SPACE_EMULATED", "required")
    if gc.stateless_firmware(fi):
        draft.add_trait("COMPUTE_SECURITY_STATELESS_FIRMWARE", "required")


def _strip_zeros(request: ResourceRequest) -> None:
    # nova keeps a group of traits or aggregates only (Placement then
    # refuses the query: see refusal).
    for suffix, group in list(request.groups.items()):
        group.resources = {rc: n for rc, n in group.resources.items() if n}
        if not (group.resources or group.required_traits
                or group.forbidden_traits or group.member_of
                or group.forbidden_aggs):
            del request.groups[suffix]


def _from_spec(spec, pinning: bool, zeros_stripped: bool = False) -> _Draft:
    """nova's ``ResourceRequest.from_request_spec``.

    ``zeros_stripped``: the outside groups as nova's first query left them
    (it strips their zero amounts in place, so the fallback query sees a
    group of zeros as empty and fails)."""
    draft = _Draft()
    request = draft.request
    request.root_required = set(spec.root_required)
    request.root_forbidden = set(spec.root_forbidden)
    request.same_subtree = list(spec.same_subtree)
    fi = gc.FlavorImage.of(spec)
    _flavor_extra_specs(draft, fi.extra_specs)
    # Counted before the outside groups and before zeros are stripped, as
    # nova counts them, for its default group_policy.
    draft.flavor_suffixed_groups = draft.suffixed_groups()
    for trait in spec.image_props.get("traits_required") or ():
        draft.add_trait(trait, "required")
    if pinning:
        _pinning(draft, fi)
    outside = spec.requested_resources
    if zeros_stripped:
        outside = [dataclasses.replace(group, resources={
            rc: n for rc, n in group.resources.items() if n})
            for group in outside]
    _outside_groups(draft, outside)
    _flavor_sizes(draft, spec)
    _host_features(draft, fi)
    _strip_zeros(request)
    return draft


def _node_uuids(lookup: NodeLookup | None, host: str | None,
                node: str | None) -> list[str] | None:
    if lookup is None:
        return None
    found = lookup(host, node)
    if found is None:
        return []
    if isinstance(found, str):
        return [found]
    return list(found)


def _destination(draft: _Draft, spec, node_uuids: NodeLookup | None) -> None:
    """nova's ``resources_from_request_spec`` after the request is built:
    aggregates, the destination as in_tree, the limit, group_policy."""
    request = draft.request
    if spec.destination_aggregates:
        # ["a,b", "c"]: in a or b, and in c; this replaces any member_of.
        draft.group(None).member_of = [
            frozenset(item.split(",")) for item in spec.destination_aggregates]
    if spec.destination_forbidden_aggregates:
        draft.group(None).forbidden_aggs |= set(
            spec.destination_forbidden_aggregates)
    host, node = spec.destination or (None, spec.destination_node)
    host = host or (spec.force_hosts[0] if spec.force_hosts else None)
    node = node or (spec.force_nodes[0] if spec.force_nodes else None)
    if host or node:
        uuids = _node_uuids(node_uuids, host, node)
        if uuids is not None:
            if not uuids:
                raise exception.NoValidHost(
                    f"No such host - host: {host} node: {node} ")
            if len(uuids) == 1:
                draft.group(None).in_tree = uuids[0]
            else:
                # Placement takes one in_tree: nova asks for every
                # candidate instead, so that none of the host's is cut.
                request.limit = None
    if any(key in _UNLIMITED_HINTS for key in spec.scheduler_hints):
        request.limit = None
    if draft.suffixed_groups() >= 2 and not request.group_policy \
            and draft.flavor_suffixed_groups <= 1:
        # Groups from ports or PCI requests beside at most one of the
        # flavor's: nova lets them overlap rather than fail in Placement.
        request.group_policy = "none"


def refusal(request: ResourceRequest) -> str | None:
    """Placement 16's reason to answer this query with 400 at microversion
    1.36 (nova then finds no host), or None.

    Unknown traits and resource classes are judged where Placement's
    tables are known (the candidate search), not here.
    """
    if not request.groups:
        return "There must be at least one resources or resources[$S] parameter."
    conflicts = sorted(request.root_required & request.root_forbidden)
    if conflicts:
        return ("Conflicting required and forbidden traits found in "
                f"root_required: {', '.join(conflicts)}")
    for suffix, group in sorted(request.groups.items()):
        if not group.resources:
            # nova sends "resources$S=" for it.
            return ("Badly formed resources parameter. Expected resources "
                    "query string parameter in form: "
                    "?resources=VCPU:2,MEMORY_MB:1024. Got: empty string.")
    suffixes = set(request.groups)
    for subtree in request.same_subtree:
        unknown = sorted(s for s in subtree if s not in suffixes)
        if unknown:
            return ("Real suffixes should be specified in `same_subtree`: "
                    f"{unknown} not found in {sorted(suffixes)}.")
    conflicting = [
        f"required{suffix}: ({trait})"
        for suffix, group in sorted(request.groups.items())
        for trait in sorted(group.required_traits & group.forbidden_traits)]
    if conflicting:
        return ("Conflicting required and forbidden traits found in the "
                f"following traits keys: {', '.join(sorted(conflicting))}")
    if not request.group_policy and len(request.granular()) > 1:
        return ('The "group_policy" parameter is required when specifying '
                'more than one "resources{N}" parameter.')
    return None


def check(request: ResourceRequest) -> None:
    """ResourceRequestRefused with Placement's reason if it would refuse."""
    reason = refusal(request)
    if reason is not None:
        raise exception.ResourceRequestRefused(reason)


def required_traits(spec) -> set[str]:
    """Every trait the request requires in any group, as nova's
    ``ResourceRequest.from_request_spec(spec).all_required_traits`` (what
    ``isolate_aggregates`` compares with the aggregates' traits)."""
    groups = _from_spec(spec, pinning=True).request.groups.values()
    return set().union(*(group.required_traits for group in groups))


def nova_queries(spec, node_uuids: NodeLookup | None = None
                 ) -> list[ResourceRequest]:
    """Every query nova 34 sends Placement for ``spec``, refused or not
    (``build`` without ``refusal``): one, or two with the PCPU fallback.
    ResourceRequestRefused where nova itself fails to build it."""
    # nova's isolate_aggregates request filter builds the request once
    # before nova does, which strips the outside groups' zeros in place.
    draft = _from_spec(spec, pinning=True, zeros_stripped=(
        CONF.scheduler.enable_isolated_aggregate_filtering))
    _destination(draft, spec, node_uuids)
    queries = [draft.request]
    if draft.cpu_pinning_requested and \
            not CONF.workarounds.disable_fallback_pcpu_query:
        fallback = _from_spec(spec, pinning=False, zeros_stripped=True)
        _destination(fallback, spec, node_uuids)
        queries.append(fallback.request)
    return queries


def build(spec, node_uuids: NodeLookup | None = None) -> list[ResourceRequest]:
    """The resource request(s) nova 34 asks Placement for ``spec``.

    ``spec`` is a ``wire.request.RequestSpec``. ``node_uuids(host, node)``
    gives the uuids of the compute nodes matching a destination or forced
    host/node (None: the destination is not turned into ``in_tree``).
    One request, or two when the request asks for dedicated CPUs and
    ``[workarounds] disable_fallback_pcpu_query`` is false: the second
    asks for VCPU in place of PCPU, and nova keeps the candidates of both.
    A request Placement would refuse is left out; when all are,
    ``ResourceRequestRefused`` with the first one's reason (and with nova's
    reason for a request nova itself refuses to build); NoValidHost when
    the destination names no compute node. A rebuild asks Placement
    nothing in nova: not this function's concern.
    """
    return answerable(nova_queries(spec, node_uuids))


def answerable(requests: Iterable[ResourceRequest]) -> list[ResourceRequest]:
    """The requests Placement would answer (``refusal`` finds nothing),
    in order; ResourceRequestRefused with the first reason when none is."""
    kept, reasons = [], []
    for request in requests:
        reason = refusal(request)
        if reason is None:
            kept.append(request)
        else:
            reasons.append(reason)
    if not kept:
        raise exception.ResourceRequestRefused(reasons[0])
    return kept
