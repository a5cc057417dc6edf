"""What a request carries for Placement, on both RPC paths, and the
resource request built from a Havana request.

The 4.x path is also covered, against nova's own primitives, by the
differential tests beside this one; these pin the boundary: defaults for
a Havana request, and InvalidRequestSpec naming the field on bad input.
"""

from __future__ import annotations

import re

import pytest

from nova_sched import exception
from nova_sched.scheduler.placement_model import request_builder
from nova_sched.scheduler.wire import request


def havana(extra_specs=None, fprops=None, **fields) -> request.RequestSpec:
    spec = {"instance_properties": {"uuid": "u1", "project_id": "p1"},
            "instance_type": {"name": "m1", "memory_mb": 8192, "vcpus": 4,
                              "root_gb": 40, "ephemeral_gb": 0, "swap": 0,
                              "extra_specs": extra_specs or {}},
            "image": {"properties": fields.pop("image_props", {})}}
    spec.update(fields)
    return request.parse(spec, fprops or {})


def queries(spec, **kwargs) -> list[str]:
    return [r.to_querystring() for r in request_builder.build(spec, **kwargs)]


def test_a_havana_request_has_nothing_for_placement():
    spec = havana()
    assert (spec.is_bfv, spec.requested_resources, spec.root_required,
            spec.root_forbidden, spec.same_subtree, spec.destination_aggregates,
            spec.destination_forbidden_aggregates, spec.destination_node,
            spec.requested_networks, spec.pci_requests) == (
        False, [], set(), set(), [], [], set(), None, [], [])


def test_field_notes_examples():
    # shared/FIELD-NOTES "Placement's model", before the request filters.
    assert queries(havana()) == [
        "limit=1000&resources=DISK_GB%3A40%2CMEMORY_MB%3A8192%2CVCPU%3A4"]
    ironic = {"resources:VCPU": "0", "resources:MEMORY_MB": "0",
              "resources:DISK_GB": "0", "resources:CUSTOM_BAREMETAL_GOLD": "1"}
    assert queries(havana(ironic)) == [
        "limit=1000&resources=CUSTOM_BAREMETAL_GOLD%3A1"]
    pinned = {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "isolate",
              "hw:emulator_threads_policy": "isolate"}
    assert queries(havana(pinned))[0] == (
        "limit=1000&required=%21HW_CPU_HYPERTHREADING"
        "&resources=DISK_GB%3A40%2CMEMORY_MB%3A8192%2CPCPU%3A5")


def test_pcpu_fallback_follows_the_workaround():
    pinned = havana({"hw:cpu_policy": "dedicated"})
    first, fallback = request_builder.build(pinned)
    assert first.unnumbered.resources["PCPU"] == 4
    assert fallback.unnumbered.resources["VCPU"] == 4
    assert "PCPU" not in fallback.unnumbered.resources
    from oslo_config import cfg
    cfg.CONF.set_override("disable_fallback_pcpu_query", True, "workarounds")
    try:
        assert len(request_builder.build(pinned)) == 1
    finally:
        cfg.CONF.clear_override("disable_fallback_pcpu_query", "workarounds")


def test_image_traits_and_volume_backed_disk():
    spec = havana(image_props={"trait:HW_CPU_X86_AVX2": "required"},
                  is_bfv=True)
    assert queries(spec) == ["limit=1000&required=HW_CPU_X86_AVX2"
                             "&resources=MEMORY_MB%3A8192%2CVCPU%3A4"]


def test_two_flavor_groups_without_policy_are_refused_with_placements_reason():
    with pytest.raises(exception.ResourceRequestRefused,
                       match='"group_policy" parameter is required'):
        request_builder.build(havana({"resources1:VGPU": "1",
                                      "resources2:VGPU": "1"}))


def test_port_groups_default_the_policy_to_none():
    port = {"requester_id": "port-1", "resources": {"NET_BW_EGR_KILOBIT_PER_SEC": 10},
            "required_traits": ["CUSTOM_PHYSNET_A"]}
    (req,) = request_builder.build(havana({"resources1:VGPU": "1"},
                                          requested_resources=[port]))
    assert req.group_policy == "none"
    assert req.groups["port-1"].required_traits == {"CUSTOM_PHYSNET_A"}


def test_destination_node_becomes_in_tree_and_a_multi_node_host_drops_limit():
    nodes = {("h1", "n1"): ["rp-1"], ("h2", None): ["rp-2", "rp-3"]}

    def lookup(host, node):
        return nodes.get((host, node), [])

    (one,) = request_builder.build(
        havana(fprops={"requested_destination": {"host": "h1", "node": "n1"}}),
        node_uuids=lookup)
    assert one.unnumbered.in_tree == "rp-1" and one.limit == 1000
    (many,) = request_builder.build(havana(fprops={"force_hosts": ["h2"]}),
                                    node_uuids=lookup)
    assert many.unnumbered.in_tree is None and many.limit is None
    with pytest.raises(exception.NoValidHost, match="No such host - host: h9"):
        request_builder.build(havana(fprops={"force_hosts": ["h9"]}),
                              node_uuids=lookup)


def test_destination_aggregates_without_a_host():
    spec = havana(fprops={"requested_destination": {
        "host": None, "aggregates": ["a,b", "c"], "forbidden_aggregates": ["d"]}})
    assert spec.destination is None
    (req,) = request_builder.build(spec)
    assert req.unnumbered.member_of == [frozenset("ab"), frozenset("c")]
    assert req.unnumbered.forbidden_aggs == {"d"}


@pytest.mark.parametrize("fields, named", [
    ({"is_bfv": "yes"}, "is_bfv"),
    ({"requested_resources": {"x": 1}}, "requested_resources"),
    ({"requested_resources": [{"resources": {"VGPU": -1}}]},
     "requested_resources[0].resources.VGPU"),
    ({"requested_resources": [{"required_traits": "CUSTOM_X"}]},
     "requested_resources[0].required_traits"),
    ({"request_level_params": {"root_required": [1]}},
     "request_level_params.root_required"),
    ({"request_level_params": {"same_subtree": "1,2"}},
     "request_level_params.same_subtree"),
    ({"requested_networks": [{"port_id": 7}]}, "requested_networks[0].port_id"),
    ({"pci_requests": ["x"]}, "pci_requests[0]"),
])
def test_bad_placement_fields_name_the_field(fields, named):
    with pytest.raises(exception.InvalidRequestSpec,
                       match=re.escape(named) + r"(?![\w.\[])") as err:
        havana(**fields)
    assert err.value.instance_uuids == ["u1"]


def test_bad_destination_aggregates_name_the_field():
    with pytest.raises(exception.InvalidRequestSpec,
                       match="requested_destination.aggregates"):
        havana(fprops={"requested_destination": {"host": None,
                                                 "aggregates": "a"}})


def test_no_extra_spec_or_image_property_crashes_the_build():
    """Bad input ends in nova's answer (the spec ignored, or NoValidHost
    with a reason), never another exception."""
    import random

    from nova_sched.scheduler.placement_model import request_filters as rf

    rng = random.Random(7)
    keys = ["resources:VCPU", "resources1:VGPU", "trait:X", "trait2:Y",
            "group_policy", "hw:cpu_policy", "hw:cpu_thread_policy",
            "hw:emulator_threads_policy", "hw:cpu_dedicated_mask",
            "hw:cpu_realtime", "hw:cpu_realtime_mask", "hw:mem_encryption",
            "hw:mem_encryption_model", "hw:pmem", "hw:tpm_version",
            "hw:tpm_model", "os:secure_boot", "hw:maxphysaddr_mode",
            "hw:pci_numa_affinity_policy", "hw:virtio_packed_ring",
            "hw:ephemeral_encryption", "hw:ephemeral_encryption_format",
            "hw:sound_model", "hw:tpm_secret_security", "accel:device_profile"]
    junk = ["", " ", "^", "0-", "-1", "1.5", "dedicated", "mixed", "isolate",
            "true", "2.0", "tpm-crb", "required", "socket", "^0-99", "0,,1",
            "a,b", 3, True, 0]
    for _ in range(400):
        extra = {key: rng.choice(junk)
                 for key in rng.sample(keys, rng.randint(1, 6))}
        spec = havana(extra)
        try:
            requests = request_builder.build(spec)
            rf.run(spec, requests, rf.RequestFilterContext())
        except exception.NoValidHost:
            pass
