"""nova's request filters, as nova 34 applies them.

Unit tests pin each filter's behaviour (on and off, nova's reasons); the
differential test runs nova's own ``request_filter.process_reqspec`` and
``resources_from_request_spec`` in the nova venv on generated requests
and clouds (aggregates with tenant, zone and trait metadata, compute
service versions, routed networks, remote-managed ports, PCI requests,
every filter option on and off) and compares the query strings with
``request_builder`` followed by ``request_filters``. A failure prints the
case's JSON.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import uuid as uuidlib

import pytest
from oslo_config import cfg

from nova_sched import exception
from nova_sched.db.aggregates import AggregateInfo
from nova_sched.scheduler.placement_model import request_builder
from nova_sched.scheduler.placement_model import request_filters as rf
from nova_sched.scheduler.wire import request

from . import nova_differential as nd
from . import test_request_builder as trb

CONF = cfg.CONF
CASES = int(os.environ.get("NOVA_SCHED_FILTER_CASES", "400"))
OPTIONS = ("limit_tenants_to_placement_aggregate",
           "placement_aggregate_required_for_tenants",
           "query_placement_for_image_type_support",
           "enable_isolated_aggregate_filtering", "image_metadata_prefilter",
           "query_placement_for_routed_network_aggregates")
AGG = [str(uuidlib.UUID(int=100 + i)) for i in range(6)]
NET = ["net-a", "net-b", "net-c"]


def _cloud_aggregates(rng: random.Random) -> list[dict]:
    menu = [{"filter_tenant_id": "p1"}, {"filter_tenant_id2": "p1"},
            {"filter_tenant_id": "p2"}, {"other": "p1"},
            {"availability_zone": "az1"}, {"availability_zone": "az2"},
            {"trait:CUSTOM_GOLD": "required"},
            {"trait:HW_CPU_X86_AVX2": "required", "x": "y"},
            {"trait:CUSTOM_SSD": "optional"}, {}]
    return [{"uuid": AGG[i], "metadata": rng.choice(menu)}
            for i in range(rng.randint(0, 6))]


def case(rng: random.Random) -> dict:
    """A request (test_request_builder.case) with what the filters read."""
    one = trb.case(rng)
    es = one["flavor"]["extra_specs"]
    for key, values in rng.sample([
            ("accel:device_profile", ["dp1", ""]),
            ("hw:virtio_packed_ring", ["true", "false"]),
            ("hw:ephemeral_encryption", ["true", "false"]),
            ("hw:ephemeral_encryption_format", ["luks", "plain"]),
            ("hw:sound_model", ["virtio", "ich9"]),
            ("hw:tpm_version", ["2.0"]),
            ("hw:tpm_secret_security", ["user", "host", "deployment", "bogus"]),
            ("trait:CUSTOM_GOLD", ["required"])], rng.randint(0, 3)):
        es[key] = rng.choice(values)
    if one["image"] is None:
        # nova's conductor always sends one (a volume's for a volume-backed
        # instance); the filters read it.
        one["image"] = {"id": AGG[5], "name": "img", "properties": {}}
    if one["image"] is not None:
        props = one["image"]["properties"]
        # Glance's images always have one (nova fails on one without).
        one["image"]["disk_format"] = rng.choice(["qcow2", "raw", "iso"])
        for key, values in rng.sample([
                ("hw_disk_bus", ["virtio", "scsi"]),
                ("hw_cdrom_bus", ["sata"]),
                ("hw_video_model", ["virtio", "qxl"]),
                ("hw_vif_model", ["virtio", "e1000", "spapr-vlan"]),
                ("hw_architecture", ["x86_64", "aarch64"]),
                ("hw_viommu_model", ["intel"]),
                ("hw_virtio_packed_ring", [True, False]),
                ("hw_ephemeral_encryption", [True]),
                ("hw_sound_model", ["virtio"])], rng.randint(0, 3)):
            props[key] = rng.choice(values)
    conf = {name: rng.random() < 0.5 for name in OPTIONS}
    ports = not conf["query_placement_for_routed_network_aggregates"]
    networks = []
    for _ in range(rng.randint(0, 2)):
        if ports and rng.random() < 0.5:
            networks.append({"network_id": None,
                             "port_id": rng.choice(["port-1", "port-2"])})
        else:
            networks.append({"network_id": rng.choice(NET), "port_id": None})
    pci_prefix = None
    for group in one["requested_resources"] or []:
        if group["requester_id"].count("-") == 5:
            pci_prefix = group["requester_id"].rsplit("-", 1)[0]
    pci = []
    if pci_prefix and rng.random() < 0.7:
        pci.append({"request_id": pci_prefix,
                    "source": rng.choice(["flavor_alias", "neutron_port"])})
    one.update({
        "project_id": rng.choice(["p1", "p2", "p3"]),
        "availability_zone": rng.choice([None, "az1", "az2", "az3"]),
        "aggregates": _cloud_aggregates(rng),
        "min_compute_version": rng.choice([72, 73, 74]),
        "network_aggregates": {"net-a": [AGG[0], AGG[1]], "net-b": [AGG[2]]},
        "remote_ports": ["port-1"],
        "requested_networks": networks,
        "pci_requests": pci,
        "filter_conf": conf,
    })
    return one


def context_of(case: dict) -> rf.RequestFilterContext:
    return rf.RequestFilterContext(
        aggregates=[AggregateInfo(id=i, name=f"agg{i}", hosts=frozenset(),
                                  metadata=dict(a["metadata"]), uuid=a["uuid"])
                    for i, a in enumerate(case["aggregates"])],
        min_compute_version=case["min_compute_version"],
        network_aggregates=case["network_aggregates"],
        remote_managed_ports=frozenset(case["remote_ports"]))


def ours(case: dict, primitive: dict):
    def filtered(spec, queries):
        context = context_of(case)
        for query in queries:
            for request_filter in rf.ALL_REQUEST_FILTERS:
                request_filter(spec, query, context)

    return nd.ours(case, primitive,
                   dict(case["filter_conf"], max_placement_results=1000),
                   then=filtered)


def compare(case: dict, nova: dict) -> list[str]:
    queries, error = ours(case, nova["primitive"])
    if "error" in nova:
        if error is None:
            return [f"nova failed ({nova['error']}), we built "
                    f"{[q.to_querystring() for q in queries]}"]
        return []
    if error is not None:
        return [f"nova built {nova['queries']}, we failed: {error.reason}"]
    mine = [q.to_querystring() for q in queries]
    if mine != nova["queries"]:
        return [f"queries differ:\n  nova: {nova['queries']}\n  ours: {mine}"]
    return []


@pytest.fixture(scope="module")
def generated():
    return nd.generate(case, CASES, "nova_request_filters.py")


def test_every_filtered_query_is_novas(generated):
    nd.assert_every_case_agrees(generated, compare, shown=4)


def test_the_cases_reach_every_filter(generated):
    """Each filter's trait or aggregate shows up in nova's answers."""
    _cases, answers = generated
    text = "\n".join(q for a in answers for q in a.get("queries", []))
    for mark in ("OWNER_NOVA", "COMPUTE_IMAGE_TYPE_", "COMPUTE_STORAGE_BUS_",
                 "COMPUTE_ACCELERATORS", "COMPUTE_NET_VIRTIO_PACKED",
                 "COMPUTE_REMOTE_MANAGED_PORTS", "COMPUTE_EPHEMERAL_ENCRYPTION",
                 "COMPUTE_SOUND_MODEL_VIRTIO", "TPM_SECRET_SECURITY",
                 # isolated aggregates forbidden; tenant, zone or network
                 # aggregates required (the cloud's aggregate uuids).
                 "member_of=%21in%3A00000000-0000-0000-0000-00000000006",
                 "member_of=in%3A00000000-0000-0000-0000-00000000006"):
        assert mark in text, mark
    errors = [a["error"] for a in answers if "error" in a]
    assert any("No hosts available for tenant" in e[1] for e in errors)
    assert any("TPM secret security" in e[1] for e in errors)


# -- each filter alone --------------------------------------------------------

def _spec(**fields):
    rs = {"instance_properties": {"uuid": "u1", "project_id": "p1",
                                  "availability_zone": fields.pop("az", None)},
          "instance_type": {"name": "f", "memory_mb": 512, "vcpus": 2,
                            "root_gb": 1, "extra_specs": fields.pop("es", {})},
          "image": fields.pop("image", {"properties": {}})}
    rs.update(fields)
    return request.parse(rs, {})


def _filtered(spec, context=None, **options):
    for name, value in options.items():
        CONF.set_override(name, value, "scheduler")
    try:
        (req,) = request_builder.build(spec)
        return rf.run(spec, [req], context or rf.RequestFilterContext())[0]
    finally:
        for name in options:
            CONF.clear_override(name, "scheduler")


def _agg(uuid, **metadata):
    return AggregateInfo(id=1, name=uuid, hosts=frozenset(), metadata=metadata,
                         uuid=uuid)


def test_compute_status_always_forbids_disabled_computes():
    req = _filtered(_spec())
    assert req.root_forbidden == {"COMPUTE_STATUS_DISABLED"}
    assert "root_required=%21COMPUTE_STATUS_DISABLED" in req.to_querystring()


def test_tenant_aggregates_only_when_enabled():
    context = rf.RequestFilterContext(aggregates=[
        _agg("a1", filter_tenant_id="p1"), _agg("a2", filter_tenant_id9="p1"),
        _agg("a3", filter_tenant_id="p2")])
    assert _filtered(_spec(), context).unnumbered.member_of == []
    req = _filtered(_spec(), context, limit_tenants_to_placement_aggregate=True)
    assert req.unnumbered.member_of == [frozenset({"a1", "a2"})]


def test_tenant_without_aggregate_fails_only_when_required():
    context = rf.RequestFilterContext(aggregates=[_agg("a3", filter_tenant_id="p2")])
    req = _filtered(_spec(), context, limit_tenants_to_placement_aggregate=True)
    assert req.unnumbered.member_of == []
    with pytest.raises(exception.NoValidHost,
                       match="Scheduling failed: No hosts available for tenant"):
        _filtered(_spec(), context, limit_tenants_to_placement_aggregate=True,
                  placement_aggregate_required_for_tenants=True)


def test_availability_zone_becomes_its_aggregates():
    context = rf.RequestFilterContext(aggregates=[
        _agg("z1", availability_zone="az1"), _agg("z2", availability_zone="az1"),
        _agg("z3", availability_zone="az2")])
    req = _filtered(_spec(az="az1"), context)
    assert req.unnumbered.member_of == [frozenset({"z1", "z2"})]
    # A zone no aggregate has: nova leaves the request as it is.
    assert _filtered(_spec(az="nowhere"), context).unnumbered.member_of == []


def test_isolated_aggregates_forbid_what_the_request_does_not_require():
    context = rf.RequestFilterContext(aggregates=[
        _agg("gold", **{"trait:CUSTOM_GOLD": "required"}),
        _agg("ssd", **{"trait:CUSTOM_SSD": "required"})])
    spec = _spec(es={"trait:CUSTOM_GOLD": "required"})
    assert _filtered(spec, context).unnumbered.forbidden_aggs == set()
    req = _filtered(spec, context, enable_isolated_aggregate_filtering=True)
    assert req.unnumbered.forbidden_aggs == {"ssd"}


def test_image_type_and_metadata_prefilters():
    image = {"disk_format": "qcow2",
             "properties": {"hw_disk_bus": "virtio", "hw_vif_model": "e1000"}}
    assert _filtered(_spec(image=image)).root_required == set()
    req = _filtered(_spec(image=image), query_placement_for_image_type_support=True,
                    image_metadata_prefilter=True)
    assert req.root_required == {"COMPUTE_IMAGE_TYPE_QCOW2",
                                 "COMPUTE_STORAGE_BUS_VIRTIO",
                                 "COMPUTE_NET_VIF_MODEL_E1000"}
    # A volume-backed instance boots no image on the host.
    assert "COMPUTE_IMAGE_TYPE_QCOW2" not in _filtered(
        _spec(image=image, is_bfv=True),
        query_placement_for_image_type_support=True).root_required
    # One property with no os-traits name: nova adds none of them.
    image["properties"]["hw_viommu_model"] = "intel"
    assert _filtered(_spec(image=image), image_metadata_prefilter=True
                     ).root_required == set()


def test_owner_nova_needs_every_compute_at_version_73():
    assert "OWNER_NOVA" not in _filtered(_spec()).root_required
    old = rf.RequestFilterContext(min_compute_version=72)
    assert "OWNER_NOVA" not in _filtered(_spec(), old).root_required
    new = rf.RequestFilterContext(min_compute_version=73)
    assert "OWNER_NOVA" in _filtered(_spec(), new).root_required


def test_tpm_secret_security():
    es = {"hw:tpm_version": "2.0", "hw:tpm_secret_security": "host"}
    assert "COMPUTE_SECURITY_TPM_SECRET_SECURITY_HOST" in _filtered(
        _spec(es=es)).root_required
    es["hw:tpm_secret_security"] = "nobody"
    with pytest.raises(exception.NoValidHost, match="is not supported"):
        _filtered(_spec(es=es))


def test_routed_networks_narrow_by_known_networks_only():
    context = rf.RequestFilterContext(network_aggregates={"n1": ["s1", "s2"]})
    spec = _spec(requested_networks=[{"network_id": "n1"}, {"network_id": "n9"},
                                     {"port_id": "p1"}])
    assert _filtered(spec, context).unnumbered.member_of == []
    req = _filtered(spec, context,
                    query_placement_for_routed_network_aggregates=True)
    assert req.unnumbered.member_of == [frozenset({"s1", "s2"})]


def test_a_filtered_request_placement_would_refuse_is_refused():
    # Only granular resources: a zone's aggregates on the unnumbered group
    # make nova send "resources=" with member_of, which Placement refuses.
    es = {"resources:VCPU": "0", "resources:MEMORY_MB": "0",
          "resources:DISK_GB": "0", "resources1:CUSTOM_BAREMETAL": "1"}
    context = rf.RequestFilterContext(aggregates=[_agg("z1", availability_zone="az1")])
    with pytest.raises(exception.ResourceRequestRefused, match="empty string"):
        _filtered(_spec(es=es, az="az1"), context)


def test_names_copied_from_os_traits_and_os_resource_classes_are_current():
    """The trait and resource class names nova checks against its
    libraries are the nova venv's (os-traits, os-resource-classes)."""
    script = (
        "import json, os_traits as t, os_resource_classes as o\n"
        "prefixes = ('COMPUTE_IMAGE_TYPE_', 'COMPUTE_STORAGE_BUS_', "
        "'COMPUTE_GRAPHICS_MODEL_', 'COMPUTE_NET_VIF_MODEL_', 'HW_ARCH_', "
        "'COMPUTE_ARCH_', 'COMPUTE_VIOMMU_')\n"
        "print(json.dumps({'traits': [n for n in dir(t) if n.isupper() and "
        "n.startswith(prefixes)], 'all': [n for n in dir(t) if n.isupper()], "
        "'classes': list(o.STANDARDS)}))\n")
    done = subprocess.run([str(nd.nova_venv_python()), "-c", script],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    names = json.loads(done.stdout)
    assert set(names["traits"]) == rf.IMAGE_TYPE_TRAITS | rf.IMAGE_METADATA_TRAITS
    assert set(names["classes"]) == request_builder.STANDARD_RESOURCE_CLASSES
    every = set(names["all"])
    used = set(rf.TPM_SECRET_SECURITY_TRAITS.values()) | {
        model.trait for model in
        request_builder.gc.MEM_ENCRYPTION_MODELS.values()} | {
        "COMPUTE_STATUS_DISABLED", "OWNER_NOVA", "COMPUTE_ACCELERATORS",
        "COMPUTE_NET_VIRTIO_PACKED", "COMPUTE_REMOTE_MANAGED_PORTS",
        "COMPUTE_EPHEMERAL_ENCRYPTION", "COMPUTE_SOUND_MODEL_VIRTIO",
        "HW_CPU_HYPERTHREADING", "COMPUTE_SECURITY_TPM_CRB",
        "COMPUTE_SECURITY_TPM_TIS", "COMPUTE_SECURITY_TPM_2_0",
        "COMPUTE_SECURITY_TPM_1_2", "COMPUTE_SOCKET_PCI_NUMA_AFFINITY",
        "COMPUTE_SECURITY_UEFI_SECURE_BOOT", "COMPUTE_ADDRESS_SPACE_PASSTHROUGH",
        "COMPUTE_ADDRESS_SPACE_EMULATED", "COMPUTE_SECURITY_STATELESS_FIRMWARE"}
    assert used <= every, used - every
