"""nova 34's request filters (``nova/scheduler/request_filter.py``), one
function each, in nova's order.

nova runs them before it asks Placement: each narrows the question with
Placement aggregates (``member_of``, forbidden aggregates) or root
provider traits (``root_required``). Here each narrows a built
``ResourceRequest`` (``request_builder``) the same way, so the query
asked is the one nova asks; ``run`` applies them all to every request of
a decision (two with nova's PCPU fallback) and drops a request Placement
would then refuse.

nova reads the cloud as it filters (the API database's aggregates, the
minimum nova-compute service version of every cell, neutron's ports and
segments); here that is ``RequestFilterContext``, filled by the host
source. What nova-sched cannot reach is documented on each filter:
neutron is never called, so routed networks narrow only by the networks
whose segment aggregates the context knows, and remote-managed ports are
only those the context lists.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence

from oslo_config import cfg

from nova_sched import exception
from nova_sched.db.aggregates import AggregateInfo
from nova_sched.scheduler.placement_model import guest_constraints as gc
from nova_sched.scheduler.placement_model import request_builder
from nova_sched.scheduler.placement_model.resource_request import ResourceRequest

CONF = cfg.CONF

TENANT_METADATA_KEY = "filter_tenant_id"
# nova-compute's service version from which computes report OWNER_NOVA.
MIN_COMPUTE_VERSION_OWNER_TRAIT = 73
# InstancePCIRequest.source of a neutron port's PCI request.
NEUTRON_PORT_SOURCE = "neutron_port"

# os-traits 3.x's names that image properties become (nova checks each
# computed name exists in os_traits; one that does not disables the
# prefilter for the request).
IMAGE_TYPE_TRAITS = frozenset(
    f"COMPUTE_IMAGE_TYPE_{fmt}" for fmt in (
        "AKI", "AMI", "ARI", "ISO", "PLOOP", "QCOW2", "RAW", "VDI", "VHD",
        "VHDX", "VMDK"))
IMAGE_METADATA_TRAITS = frozenset(
    [f"COMPUTE_ARCH_{a}" for a in (
        "AARCH64", "MIPSEL", "PPC64LE", "RISCV64", "S390X", "X86_64")]
    + [f"COMPUTE_GRAPHICS_MODEL_{m}" for m in (
        "BOCHS", "CIRRUS", "GOP", "NONE", "QXL", "VGA", "VIRTIO", "VMVGA",
        "XEN")]
    + [f"COMPUTE_NET_VIF_MODEL_{m}" for m in (
        "E1000", "E1000E", "IGB", "LAN9118", "NE2K_PCI", "NETFRONT", "PCNET",
        "RTL8139", "SPAPR_VLAN", "SRIOV", "VIRTIO", "VMXNET", "VMXNET3")]
    + [f"COMPUTE_STORAGE_BUS_{b}" for b in (
        "FDC", "IDE", "LXC", "SATA", "SCSI", "UML", "USB", "VIRTIO", "XEN")]
    + [f"COMPUTE_VIOMMU_MODEL_{m}" for m in (
        "AUTO", "INTEL", "SMMUV3", "VIRTIO")]
    + [f"HW_ARCH_{a}" for a in (
        "AARCH64", "ALPHA", "ARMV6", "ARMV7", "ARMV7B", "CRIS", "I686", "IA64",
        "LM32", "M68K", "MICROBLAZE", "MICROBLAZEEL", "MIPS", "MIPS64",
        "MIPS64EL", "MIPSEL", "OPENRISC", "PARISC", "PARISC64", "PPC", "PPC64",
        "PPC64LE", "PPCEMB", "PPCLE", "S390", "S390X", "SH4", "SH4EB", "SPARC",
        "SPARC64", "UNICORE32", "X86_64", "XTENSA", "XTENSAEB")])
# Image property -> trait prefix of transform_image_metadata, nova's order.
IMAGE_METADATA_PREFIXES = (
    ("hw_cdrom_bus", "COMPUTE_STORAGE_BUS"),
    ("hw_disk_bus", "COMPUTE_STORAGE_BUS"),
    ("hw_video_model", "COMPUTE_GRAPHICS_MODEL"),
    ("hw_vif_model", "COMPUTE_NET_VIF_MODEL"),
    ("hw_architecture", "HW_ARCH"),
    ("hw_emulation_architecture", "COMPUTE_ARCH"),
    ("hw_viommu_model", "COMPUTE_VIOMMU"),
)
TPM_SECRET_SECURITY_TRAITS = {
    "user": "COMPUTE_SECURITY_TPM_SECRET_SECURITY_USER",
    "host": "COMPUTE_SECURITY_TPM_SECRET_SECURITY_HOST",
    "deployment": "COMPUTE_SECURITY_TPM_SECRET_SECURITY_DEPLOYMENT",
}


@dataclasses.dataclass
class RequestFilterContext:
    """What the request filters read from the cloud, as the host source
    last read it.

    ``aggregates``: the API database's host aggregates with their metadata
    and uuid (a Placement aggregate has its nova aggregate's uuid; one
    without a uuid is skipped). ``min_compute_version``: the lowest
    nova-compute service version of every cell (None: unknown, as if
    below 73). ``network_aggregates``: for routed networks, a network id's
    segment aggregates (nova asks neutron and Placement). ``remote_managed_ports``:
    port ids neutron reports as remote-managed.
    """

    aggregates: Sequence[AggregateInfo] = ()
    min_compute_version: int | None = None
    network_aggregates: Mapping[str, Sequence[str]] = dataclasses.field(
        default_factory=dict)
    remote_managed_ports: frozenset[str] = frozenset()


class RequestFilterFailed(exception.NoValidHost):
    """A request filter found no host can be right (nova's
    ``RequestFilterFailed``, which nova turns into NoValidHost with the
    same reason)."""

    def __init__(self, reason: str):
        super().__init__(f"Scheduling failed: {reason}")


def _uuids(aggregates: Iterable[AggregateInfo]) -> frozenset[str]:
    return frozenset(agg.uuid for agg in aggregates
                     if getattr(agg, "uuid", None))


def _require_aggregates(request: ResourceRequest, uuids: Iterable[str]) -> None:
    # One clause: in any of them; each call's clause must also hold.
    request.unnumbered.member_of.append(frozenset(uuids))


def require_tenant_aggregate(spec, request: ResourceRequest,
                             context: RequestFilterContext) -> None:
    """Only the aggregates naming the project (a metadata key starting
    with ``filter_tenant_id``) when
    ``[scheduler] limit_tenants_to_placement_aggregate``; none at all
    names it and ``placement_aggregate_required_for_tenants``: no host."""
    if not CONF.scheduler.limit_tenants_to_placement_aggregate:
        return
    project = spec.project_id
    # As nova's query: an aggregate with any metadata value equal to the
    # project, and any key starting with the prefix.
    found = _uuids(
        agg for agg in context.aggregates
        if project in agg.metadata.values()
        and any(key.startswith(TENANT_METADATA_KEY) for key in agg.metadata))
    if found:
        _require_aggregates(request, found)
    elif CONF.scheduler.placement_aggregate_required_for_tenants:
        raise RequestFilterFailed("No hosts available for tenant")


def map_az_to_placement_aggregate(spec, request: ResourceRequest,
                                  context: RequestFilterContext) -> None:
    """The requested availability zone as its aggregates (always on in
    nova 34)."""
    zone = spec.availability_zone
    if not zone:
        return
    found = _uuids(agg for agg in context.aggregates
                   if agg.metadata.get("availability_zone") == zone)
    if found:
        _require_aggregates(request, found)


def require_image_type_support(spec, request: ResourceRequest,
                               context: RequestFilterContext) -> None:
    """COMPUTE_IMAGE_TYPE_<disk format> on the root, with
    ``[scheduler] query_placement_for_image_type_support``, unless the
    instance is volume-backed."""
    if not CONF.scheduler.query_placement_for_image_type_support:
        return
    if spec.is_bfv:
        return
    disk_format = spec.image.get("disk_format")
    if not isinstance(disk_format, str):
        return
    trait = f"COMPUTE_IMAGE_TYPE_{disk_format.upper()}"
    if trait in IMAGE_TYPE_TRAITS:
        request.root_required.add(trait)


def compute_status_filter(spec, request: ResourceRequest,
                          context: RequestFilterContext) -> None:
    """Never a disabled compute (COMPUTE_STATUS_DISABLED forbidden on the
    root, which nova-compute sets when its service is disabled)."""
    request.root_forbidden.add("COMPUTE_STATUS_DISABLED")


def isolate_aggregates(spec, request: ResourceRequest,
                       context: RequestFilterContext) -> None:
    """With ``[scheduler] enable_isolated_aggregate_filtering``: an
    aggregate whose metadata requires a trait (``trait:NAME=required``)
    that the request does not require is forbidden."""
    if not CONF.scheduler.enable_isolated_aggregate_filtering:
        return
    keys = {f"trait:{trait}" for trait in request_builder.required_traits(spec)}
    isolated = _uuids(
        agg for agg in context.aggregates
        if any(key.startswith("trait:") and value == "required"
               and key not in keys for key, value in agg.metadata.items()))
    if isolated:
        request.unnumbered.forbidden_aggs |= isolated


def transform_image_metadata(spec, request: ResourceRequest,
                             context: RequestFilterContext) -> None:
    """With ``[scheduler] image_metadata_prefilter``: the image's buses,
    video, VIF and vIOMMU models and architectures as required root
    traits; none at all if one of them names no trait os-traits knows."""
    if not CONF.scheduler.image_metadata_prefilter:
        return
    traits = []
    for key, prefix in IMAGE_METADATA_PREFIXES:
        value = spec.image_props.get(key)
        if value is None:
            continue
        trait = f"{prefix}_{str(value).replace('-', '_').upper()}"
        if trait not in IMAGE_METADATA_TRAITS:
            return
        traits.append(trait)
    request.root_required.update(traits)


def accelerators_filter(spec, request: ResourceRequest,
                        context: RequestFilterContext) -> None:
    """A flavor with a Cyborg device profile (``accel:device_profile``)
    needs a compute that supports accelerators (its groups come in
    ``requested_resources`` from nova's conductor)."""
    if spec.extra_specs.get("accel:device_profile"):
        request.root_required.add("COMPUTE_ACCELERATORS")


def packed_virtqueue_filter(spec, request: ResourceRequest,
                            context: RequestFilterContext) -> None:
    """``hw:virtio_packed_ring`` / ``hw_virtio_packed_ring`` true."""
    if gc.packed_virtqueue(gc.FlavorImage.of(spec)):
        request.root_required.add("COMPUTE_NET_VIRTIO_PACKED")


def routed_networks_filter(spec, request: ResourceRequest,
                           context: RequestFilterContext) -> None:
    """With ``[scheduler] query_placement_for_routed_network_aggregates``:
    only hosts in the segment aggregates of each requested network.

    nova asks neutron for a network's segments (or a port's subnet's) and
    Placement for their aggregates. nova-sched calls no neutron: a network
    whose aggregates ``context.network_aggregates`` knows narrows the
    request; a port, or a network it does not know, does not (the
    compute's port binding still fails on a wrong segment, and nova
    reschedules)."""
    if not CONF.scheduler.query_placement_for_routed_network_aggregates:
        return
    for network in spec.requested_networks:
        if network.get("port_id"):
            continue
        aggregates = context.network_aggregates.get(network.get("network_id"))
        if aggregates:
            _require_aggregates(request, aggregates)


def remote_managed_ports_filter(spec, request: ResourceRequest,
                                context: RequestFilterContext) -> None:
    """A remote-managed port (SmartNIC DPU) needs
    COMPUTE_REMOTE_MANAGED_PORTS. nova asks neutron about each port;
    here the ports ``context.remote_managed_ports`` lists."""
    for network in spec.requested_networks:
        if network.get("port_id") in context.remote_managed_ports:
            request.root_required.add("COMPUTE_REMOTE_MANAGED_PORTS")


def ephemeral_encryption_filter(spec, request: ResourceRequest,
                                context: RequestFilterContext) -> None:
    """Ephemeral encryption, and its format if one is asked."""
    fi = gc.FlavorImage.of(spec)
    if not gc.ephemeral_encryption(fi):
        return
    request.root_required.add("COMPUTE_EPHEMERAL_ENCRYPTION")
    fmt = gc.ephemeral_encryption_format(fi)
    if fmt:
        request.root_required.add(f"COMPUTE_EPHEMERAL_ENCRYPTION_{fmt.upper()}")


def virtio_sound_filter(spec, request: ResourceRequest,
                        context: RequestFilterContext) -> None:
    """A virtio sound device (``hw:sound_model`` / ``hw_sound_model``)."""
    if gc.sound_model(gc.FlavorImage.of(spec)) == "virtio":
        request.root_required.add("COMPUTE_SOUND_MODEL_VIRTIO")


def tpm_secret_security_filter(spec, request: ResourceRequest,
                               context: RequestFilterContext) -> None:
    """A vTPM's secret security (``hw:tpm_secret_security``, default
    ``user``) as its trait; an unknown one: no host."""
    fi = gc.FlavorImage.of(spec)
    if gc.vtpm(fi) is None:
        return
    security = fi.extra_specs.get("hw:tpm_secret_security") or "user"
    trait = TPM_SECRET_SECURITY_TRAITS.get(security)
    if trait is None:
        raise RequestFilterFailed(
            f"TPM secret security '{security}' is not supported.")
    request.root_required.add(trait)


def owner_nova_filter(spec, request: ResourceRequest,
                      context: RequestFilterContext) -> None:
    """Only providers nova owns (OWNER_NOVA on the root, and on the
    provider of each flavor PCI request's group) once every nova-compute
    reports the trait (service version 73)."""
    if "OWNER_NOVA" in request.root_required:
        return
    if (context.min_compute_version or 0) < MIN_COMPUTE_VERSION_OWNER_TRAIT:
        return
    request.root_required.add("OWNER_NOVA")
    pci_ids = {pci["request_id"] for pci in spec.pci_requests
               if pci.get("source") != NEUTRON_PORT_SOURCE
               and pci.get("request_id")}
    if not pci_ids:
        return
    for outside in spec.requested_resources:
        rid = outside.requester_id
        if rid and rid.rsplit("-", 1)[0] in pci_ids:
            # nova marks the spec's group before the request is built, so a
            # group of zeros it would strip is kept for the trait.
            request.group(rid).required_traits.add("OWNER_NOVA")


RequestFilter = Callable[[object, ResourceRequest, RequestFilterContext], None]

ALL_REQUEST_FILTERS: tuple[RequestFilter, ...] = (
    require_tenant_aggregate,
    map_az_to_placement_aggregate,
    require_image_type_support,
    compute_status_filter,
    isolate_aggregates,
    transform_image_metadata,
    accelerators_filter,
    packed_virtqueue_filter,
    routed_networks_filter,
    remote_managed_ports_filter,
    ephemeral_encryption_filter,
    virtio_sound_filter,
    tpm_secret_security_filter,
    owner_nova_filter,
)


def run(spec, requests: Sequence[ResourceRequest],
        context: RequestFilterContext) -> list[ResourceRequest]:
    """Every request filter on every request, in nova's order.

    Returns the requests Placement would still answer (``request_builder
    .refusal``); ResourceRequestRefused with the first reason when none
    is left, RequestFilterFailed (a NoValidHost) when a filter finds no
    host can be right. A filter that is off for the options does
    nothing.
    """
    for request in requests:
        for request_filter in ALL_REQUEST_FILTERS:
            request_filter(spec, request, context)
    return request_builder.answerable(requests)
