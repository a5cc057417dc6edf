"""Today's nova RequestSpec mapped onto Havana's request (scheduler.wire.spec_obj).

Hand-built primitives in the shape nova 29-34 send (RequestSpec 1.15),
every field mapping and malformed case; the captured primitives of real
nova releases under ``fixtures/nova*/`` when they are there; and a few
decisions end to end through the 2.x manager path.
"""

from __future__ import annotations

import copy
import json
import pathlib
import uuid as uuidlib

import pytest

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler.decision import retry
from nova_sched.scheduler.wire import request, spec_obj
from nova_sched.scheduler.filters import numa_topology_filter
from tests.unit.scheduler.conftest import compute_report

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
UUID1 = "11111111-1111-4111-8111-111111111111"
UUID2 = "22222222-2222-4222-8222-222222222222"
UUID3 = "33333333-3333-4333-8333-333333333333"
GROUP_UUID = "99999999-9999-4999-8999-999999999999"


def prim(name: str, data: dict, version: str = "1.0") -> dict:
    return {"nova_object.name": name, "nova_object.namespace": "nova",
            "nova_object.version": version, "nova_object.data": data,
            "nova_object.changes": sorted(data)}


def flavor(memory_mb=2048, vcpus=2, root_gb=20, ephemeral_gb=0, swap=0,
           extra_specs=None, **extra) -> dict:
    data = {"id": 7, "name": "m1.small", "flavorid": "2", "memory_mb": memory_mb,
            "vcpus": vcpus, "root_gb": root_gb, "ephemeral_gb": ephemeral_gb,
            "swap": swap, "rxtx_factor": 1.0, "vcpu_weight": 0,
            "disabled": False, "is_public": True,
            "extra_specs": {} if extra_specs is None else extra_specs,
            "description": None, "created_at": "2024-04-01T10:00:00Z",
            "updated_at": None, "deleted_at": None, "deleted": False}
    data.update(extra)
    return prim("Flavor", data, "1.2")


def image(props=None, **extra) -> dict:
    data = {"id": "0b7c1e5a-3f0e-4d55-9b43-6a4f2b5e8c10", "name": "cirros",
            "status": "active", "container_format": "bare", "disk_format": "qcow2",
            "min_ram": 0, "min_disk": 0, "size": 21430272, "owner": "p1",
            "properties": prim("ImageMetaProps", props or {}, "1.43")}
    data.update(extra)
    return prim("ImageMeta", data, "1.8")


def group(policy="anti-affinity", rules=None, version="1.11", **extra) -> dict:
    data = {"uuid": GROUP_UUID, "name": "g1", "user_id": "u1", "project_id": "p1",
            "members": [UUID1], "hosts": ["c9"], "id": 3, "deleted": False,
            "created_at": "2024-04-01T10:00:00Z", "updated_at": None,
            "deleted_at": None}
    if version == "1.11":
        data.update(policy=policy, _rules={} if rules is None else rules)
    else:
        data["policies"] = [policy]
    data.update(extra)
    return prim("InstanceGroup", data, version)


def retries(num_attempts: int, hosts: list[tuple[str, str]]) -> dict:
    nodes = [prim("ComputeNode", {"host": h, "hypervisor_hostname": n}, "1.19")
             for h, n in hosts]
    return prim("SchedulerRetries", {
        "num_attempts": num_attempts,
        "hosts": prim("ComputeNodeList", {"objects": nodes}, "1.17")}, "1.1")


def destination(host=None, node=None, **extra) -> dict:
    data = {"host": host, "node": node, "cell": None, "aggregates": None,
            "allow_cross_cell_move": False, "forbidden_aggregates": None}
    data = {k: v for k, v in data.items() if k not in ("host",) or v is not None}
    data.update(extra)
    return prim("Destination", data, "1.4")


def spec(**fields) -> dict:
    """A RequestSpec 1.15 primitive as nova 29-34's conductor sends for a boot."""
    data = {
        "id": 42,
        "image": image(),
        "numa_topology": None,
        "pci_requests": prim("InstancePCIRequests",
                             {"instance_uuid": UUID1, "requests": []}, "1.1"),
        "project_id": "p1",
        "user_id": "u1",
        "availability_zone": None,
        "flavor": flavor(),
        "num_instances": 1,
        "ignore_hosts": None,
        "force_hosts": None,
        "force_nodes": None,
        "requested_destination": None,
        "retry": None,
        "limits": prim("SchedulerLimits", {"numa_topology": None, "vcpu": None,
                                           "disk_gb": None, "memory_mb": None}),
        "instance_group": None,
        "scheduler_hints": {},
        "instance_uuid": UUID1,
        "security_groups": prim("SecurityGroupList", {"objects": [
            prim("SecurityGroup", {"name": "default"}, "1.2")]}, "1.1"),
        "network_metadata": prim("NetworkMetadata",
                                 {"physnets": [], "tunneled": False}),
        "is_bfv": False,
        "requested_resources": [],
        "request_level_params": prim("RequestLevelParams", {
            "root_required": [], "root_forbidden": [], "same_subtree": []}, "1.1"),
        "requested_networks": prim("NetworkRequestList", {"objects": []}, "1.1"),
    }
    data.update(fields)
    return prim("RequestSpec", data, "1.15")


def parsed(spec_primitive, instance_uuids=(UUID1,)) -> request.RequestSpec:
    uuids = None if instance_uuids is None else list(instance_uuids)
    return request.parse(*spec_obj.to_legacy(spec_primitive, uuids))


# -- field mappings ------------------------------------------------------------

def test_boot_maps_sizes_flavor_image_and_owner():
    props = {"hw_architecture": "x86_64", "img_hv_type": "kvm", "hw_vm_mode": "hvm",
             "img_hv_requested_version": ">=6.0", "os_type": "linux",
             "hw_disk_bus": "virtio"}
    req = parsed(spec(
        flavor=flavor(memory_mb=4096, vcpus=4, root_gb=40, ephemeral_gb=10,
                      swap=512, extra_specs={"hw:cpu_policy": "shared",
                                             "capabilities:cpu_info:vendor": "Intel"}),
        image=image(props), availability_zone="az1"))
    assert (req.memory_mb, req.vcpus, req.root_gb, req.ephemeral_gb, req.swap) == (
        4096, 4, 40, 10, 512)
    assert req.disk_mb == 50 * 1024 + 512
    assert req.extra_specs == {"hw:cpu_policy": "shared",
                               "capabilities:cpu_info:vendor": "Intel"}
    # TypeAffinityFilter and notifications read the flavor's name.
    assert req.instance_type["name"] == "m1.small"
    assert req.instance_type["flavorid"] == "2"
    assert req.image["id"] == "0b7c1e5a-3f0e-4d55-9b43-6a4f2b5e8c10"
    assert req.image_id == "0b7c1e5a-3f0e-4d55-9b43-6a4f2b5e8c10"
    assert req.image["properties"] == props
    assert req.image_props.values == props  # nova's own values read back as they are
    assert req.availability_zone == "az1"
    assert (req.project_id, req.user_id) == ("p1", "u1")
    assert req.instance_properties["uuid"] == UUID1
    assert req.instance_properties["os_type"] == "linux"
    assert req.instance_properties["instance_type_id"] == 7
    assert req.instance_uuids == [UUID1]
    assert req.num_instances == 1
    assert req.instance_group is None
    assert req.retry is None
    assert (req.force_hosts, req.force_nodes, req.ignore_hosts) == ([], [], [])


def test_flavor_without_extra_specs_ephemeral_or_swap():
    data = flavor()["nova_object.data"]
    for key in ("extra_specs", "ephemeral_gb", "swap"):
        del data[key]
    req = parsed(spec(flavor=prim("Flavor", data, "1.2")))
    assert (req.ephemeral_gb, req.swap, req.extra_specs) == (0, 0, {})


def test_boot_from_volume_counts_no_root_disk():
    req = parsed(spec(flavor=flavor(root_gb=20, ephemeral_gb=1, swap=256),
                      is_bfv=True, image=image(id=None)))
    assert req.root_gb == 0
    assert req.disk_mb == 1024 + 256
    assert parsed(spec(flavor=flavor(root_gb=20), is_bfv=False)).root_gb == 20


def test_no_image_and_image_without_properties():
    req = parsed(spec(image=None))
    assert req.image == {}
    assert req.image_props.values == {}
    data = image()["nova_object.data"]
    del data["properties"]
    assert parsed(spec(image=prim("ImageMeta", data, "1.8"))).image_props.values == {}


def test_image_numa_lists_become_per_cell_properties_the_numa_filter_reads():
    req = parsed(spec(flavor=flavor(memory_mb=3072, vcpus=4),
                      image=image({"hw_numa_nodes": 2,
                                   "hw_numa_cpus": [[0, 1, 2], [3]],
                                   "hw_numa_mem": [2048, 1024]})))
    assert req.image["properties"] == {
        "hw_numa_nodes": 2, "hw_numa_cpus.0": "0,1,2", "hw_numa_cpus.1": "3",
        "hw_numa_mem.0": 2048, "hw_numa_mem.1": 1024}
    # ... which nova's model reads back into the lists nova sent.
    assert req.image_props.values == {"hw_numa_nodes": 2,
                                      "hw_numa_cpus": [{0, 1, 2}, {3}],
                                      "hw_numa_mem": [2048, 1024]}
    cells = numa_topology_filter.guest_cells(req.vcpus, req.memory_mb,
                                             req.extra_specs, req.image_props)
    assert [(c.cpus, c.memory_mb) for c in cells] == [(3, 2048), (1, 1024)]


def test_scheduler_hints_unwrap_single_values_as_havana_had_them():
    hints = {"group": [GROUP_UUID], "build_near_host_ip": ["192.0.2.10"],
             "cidr": ["/24"], "query": ['[">=", "$free_ram_mb", 1024]'],
             "same_host": [UUID2], "different_host": [UUID2, UUID3],
             "custom": ["a", "b"], "_nova_check_type": ["rebuild"]}
    req = parsed(spec(scheduler_hints=hints))
    assert req.scheduler_hints == {
        "group": GROUP_UUID, "build_near_host_ip": "192.0.2.10", "cidr": "/24",
        "query": '[">=", "$free_ram_mb", 1024]', "same_host": [UUID2],
        "different_host": [UUID2, UUID3], "custom": ["a", "b"],
        "_nova_check_type": "rebuild"}
    assert parsed(spec(scheduler_hints=None)).scheduler_hints == {}


def test_force_and_ignore_hosts():
    req = parsed(spec(force_hosts=["c1"], force_nodes=["n1"], ignore_hosts=["c2"]))
    assert (req.force_hosts, req.force_nodes, req.ignore_hosts) == (
        ["c1"], ["n1"], ["c2"])


def test_requested_destination_narrows_without_forcing():
    """nova narrows the candidates to a requested destination and still
    runs the filters; a forced host would skip them."""
    req = parsed(spec(requested_destination=destination("c3", "c3-node")))
    assert req.destination == ("c3", "c3-node")
    assert (req.force_hosts, req.force_nodes) == ([], [])
    assert req.filter_properties["requested_destination"] == {
        "host": "c3", "node": "c3-node"}
    req = parsed(spec(requested_destination=destination("c3"),
                      force_hosts=["c1"]))
    assert req.destination == ("c3", None) and req.force_hosts == ["c1"]


def test_requested_destination_without_host_forces_nothing():
    """nova restricts a move to the instance's cell with a host-less
    Destination: that is no destination to force."""
    cell = prim("CellMapping", {"uuid": UUID3, "name": "cell1"}, "1.1")
    req = parsed(spec(requested_destination=destination(
        cell=cell, aggregates=["agg1"], forbidden_aggregates=["agg2"])))
    assert (req.force_hosts, req.force_nodes) == ([], [])
    assert req.destination is None
    # Its aggregates still narrow the resource request, as nova's do.
    assert req.destination_aggregates == ["agg1"]
    assert req.destination_forbidden_aggregates == {"agg2"}
    # And its cell keeps the move there, as nova's host manager reads only it.
    assert req.destination_cell == UUID3


def test_a_cross_cell_move_is_kept_in_no_cell_and_a_bad_cell_is_refused():
    """``allow_cross_cell_move`` (a cross-cell resize the policy allows):
    every cell's nodes are candidates, as nova reads them all."""
    cell = prim("CellMapping", {"uuid": UUID3, "name": "cell1"}, "1.1")
    req = parsed(spec(requested_destination=destination(
        cell=cell, allow_cross_cell_move=True)))
    assert req.destination_cell is None
    req = parsed(spec(requested_destination=destination("c3", cell=cell)))
    assert (req.destination, req.destination_cell) == (("c3", None), UUID3)
    with pytest.raises(exception.InvalidRequestSpec, match="cell"):
        parsed(spec(requested_destination=destination(cell={"uuid": UUID3})))
    with pytest.raises(exception.InvalidRequestSpec, match="allow_cross_cell_move"):
        parsed(spec(requested_destination=destination(
            cell=cell, allow_cross_cell_move="yes")))


def test_instance_group_policy_rules_and_members():
    req = parsed(spec(instance_group=group("anti-affinity",
                                           {"max_server_per_host": "2"}),
                      scheduler_hints={"group": [GROUP_UUID]}))
    assert req.instance_group == {"uuid": GROUP_UUID, "name": "g1",
                                  "policy": "anti-affinity",
                                  "rules": {"max_server_per_host": 2},
                                  "members": [UUID1], "hosts": ["c9"]}


def test_instance_group_before_1_11_has_policies():
    req = parsed(spec(instance_group=group("affinity", version="1.10")))
    assert req.instance_group["policy"] == "affinity"
    assert req.instance_group["rules"] == {}


def test_retry_maps_tried_nodes_and_counts_attempts_as_havana():
    req = parsed(spec(retry=retries(2, [("c1", "c1-node")])))
    assert req.retry == {"num_attempts": 1, "hosts": [["c1", "c1-node"]]}
    assert retry.tried_nodes(req) == {("c1", "c1-node")}
    # The cycle counts the attempt being made: nova's conductor's number.
    assert retry.next_attempt(req.filter_properties, UUID1)["retry"][
        "num_attempts"] == 2


def test_retry_of_the_last_allowed_attempt_is_still_scheduled():
    CONF.set_override("max_attempts", 3, group="scheduler")
    req = parsed(spec(retry=retries(3, [("c1", "c1"), ("c2", "c2")])))
    assert retry.next_attempt(req.filter_properties, UUID1)["retry"][
        "num_attempts"] == 3


def test_counting_an_attempt_leaves_the_requests_own_properties_alone():
    """Each instance's attempt is counted on a copy: the request's retry
    (shared by its instances) keeps its count and hosts."""
    CONF.set_override("max_attempts", 3, group="scheduler")
    # nova's conductor counted 2 for this one; Havana's count is 1.
    req = parsed(spec(retry=retries(2, [("c1", "c1")])))
    before = {"num_attempts": 1, "hosts": [["c1", "c1"]]}
    attempt = retry.next_attempt(req.filter_properties, UUID1)
    retry.record_host(attempt, "c2", "c2")
    attempt["limits"] = {"vcpu": 8}
    assert attempt["retry"] == {"num_attempts": 2, "hosts": [["c1", "c1"], ["c2", "c2"]]}
    assert req.filter_properties["retry"] == before
    assert "limits" not in req.filter_properties


def test_empty_retry_is_no_retry():
    req = parsed(spec(retry=prim("SchedulerRetries", {}, "1.1")))
    assert req.retry is None


def test_limits_that_are_set():
    req = parsed(spec(limits=prim("SchedulerLimits", {
        "numa_topology": prim("NUMATopologyLimits", {"cpu_allocation_ratio": 16.0},
                              "1.1"),
        "vcpu": 64, "disk_gb": None, "memory_mb": 12288})))
    assert req.filter_properties["limits"] == {"vcpu": 64, "memory_mb": 12288}
    assert "limits" not in parsed(spec()).filter_properties


def test_multi_create_claims_every_listed_instance():
    req = parsed(spec(num_instances=3), instance_uuids=[UUID1, UUID2, UUID3])
    assert req.instance_uuids == [UUID1, UUID2, UUID3]
    assert req.num_instances == 3


def test_instance_uuids_argument_wins_over_num_instances():
    # A move or a retry of one instance of a multi-create names only it.
    req = parsed(spec(num_instances=3, instance_uuid=UUID2), instance_uuids=[UUID2])
    assert (req.instance_uuids, req.num_instances) == ([UUID2], 1)


def test_4_3_single_instance_is_claimed_for_its_uuid():
    req = parsed(spec(), instance_uuids=None)
    assert (req.instance_uuids, req.num_instances) == ([UUID1], 1)


def test_4_3_multi_create_is_decided_without_claims():
    req = parsed(spec(num_instances=3), instance_uuids=None)
    assert (req.instance_uuids, req.num_instances) == ([], 3)


def test_older_minor_versions_without_later_fields():
    """RequestSpec 1.5: no user_id, requested_destination, is_bfv, ...;
    InstanceGroup 1.10; nothing missing is an error."""
    data = copy.deepcopy(spec(instance_group=group("affinity", version="1.10"))[
        "nova_object.data"])
    for key in ("user_id", "requested_destination", "security_groups",
                "network_metadata", "is_bfv", "requested_resources",
                "request_level_params", "requested_networks"):
        del data[key]
    req = parsed(prim("RequestSpec", data, "1.5"))
    assert req.user_id is None
    assert req.instance_group["policy"] == "affinity"
    assert req.memory_mb == 2048


def test_newer_minor_version_with_unknown_fields():
    data = spec()["nova_object.data"]
    data["some_future_field"] = prim("Whatever", {"x": 1})
    assert parsed(prim("RequestSpec", data, "1.16")).memory_mb == 2048


def test_ignored_fields_are_listed():
    assert set(spec_obj.IGNORED_FIELDS) == {
        "id", "numa_topology", "security_groups", "network_metadata"}
    # And never reach the Havana dicts.
    rs, fp = spec_obj.to_legacy(spec(), [UUID1])
    text = json.dumps([rs, fp])
    for name in ("security_groups", "network_metadata"):
        assert name not in text


def test_the_argument_is_not_changed():
    original = spec(scheduler_hints={"group": [GROUP_UUID]},
                    instance_group=group(), retry=retries(2, [("c1", "c1")]))
    kept = copy.deepcopy(original)
    rs, fp = spec_obj.to_legacy(original, [UUID1])
    rs["instance_type"]["extra_specs"]["x"] = "y"
    fp["scheduler_hints"]["group"] = "other"
    assert original == kept


def test_result_survives_json():
    rs, fp = spec_obj.to_legacy(spec(instance_group=group(),
                                     retry=retries(2, [("c1", "c1")])), [UUID1])
    assert json.loads(json.dumps([rs, fp])) == [rs, fp]


# -- malformed -----------------------------------------------------------------

def _flavor_with(**changes):
    data = flavor()["nova_object.data"]
    for key, value in changes.items():
        if value is KeyError:
            data.pop(key)
        else:
            data[key] = value
    return prim("Flavor", data, "1.2")


@pytest.mark.parametrize("value, words", [
    (None, ["spec_obj", "NoneType"]),
    ([], ["spec_obj", "list"]),
    ({"flavor": {}}, ["spec_obj", "nova_object"]),
    (prim("Flavor", {}), ["spec_obj", "RequestSpec", "Flavor"]),
    (dict(spec(), **{"nova_object.namespace": "nova_sched"}), ["namespace"]),
    (dict(spec(), **{"nova_object.version": "2.0"}), ["spec_obj", "2.0", "1.x"]),
    (dict(spec(), **{"nova_object.version": "1.x"}), ["spec_obj", "version"]),
    (spec(flavor=None), ["spec_obj", "flavor"]),
    (spec(flavor={"memory_mb": 512, "vcpus": 1, "root_gb": 1}),
     ["spec_obj.flavor", "Flavor"]),
    (spec(flavor=_flavor_with(memory_mb=-512)), ["spec_obj.flavor.memory_mb", "negative"]),
    (spec(flavor=_flavor_with(vcpus=True)), ["spec_obj.flavor.vcpus"]),
    (spec(flavor=_flavor_with(root_gb="20")), ["spec_obj.flavor.root_gb", "str"]),
    (spec(flavor=_flavor_with(swap=1.5)), ["spec_obj.flavor.swap"]),
    (spec(flavor=_flavor_with(memory_mb=KeyError)), ["spec_obj.flavor", "memory_mb"]),
    (spec(flavor=_flavor_with(extra_specs={"hw:numa_nodes": 2})),
     ["spec_obj.flavor.extra_specs"]),
    (spec(flavor=_flavor_with(extra_specs=["x"])), ["spec_obj.flavor.extra_specs"]),
    (spec(flavor=_flavor_with(name=3)), ["spec_obj.flavor.name"]),
    (spec(image={"id": "x"}), ["spec_obj.image", "ImageMeta"]),
    (spec(image=image(properties={"hw_architecture": "x86_64"})),
     ["spec_obj.image.properties", "ImageMetaProps"]),
    (spec(image=image(id=5)), ["spec_obj.image.id"]),
    (spec(image=image({"hw_numa_cpus": [["0"]]})), ["spec_obj.image.properties.hw_numa_cpus[0]"]),
    (spec(image=image({"hw_numa_mem": [-1]})), ["spec_obj.image.properties.hw_numa_mem[0]"]),
    (spec(num_instances=0), ["spec_obj.num_instances"]),
    (spec(num_instances="3"), ["spec_obj.num_instances"]),
    (spec(instance_uuid=5), ["spec_obj.instance_uuid"]),
    (spec(availability_zone=["az1"]), ["spec_obj.availability_zone"]),
    (spec(project_id=1), ["spec_obj.project_id"]),
    (spec(scheduler_hints=["group"]), ["spec_obj.scheduler_hints", "list"]),
    (spec(scheduler_hints={"group": [1]}), ["spec_obj.scheduler_hints.group"]),
    (spec(scheduler_hints={"same_host": {"a": 1}}), ["spec_obj.scheduler_hints.same_host"]),
    (spec(force_hosts="c1"), ["spec_obj.force_hosts"]),
    (spec(ignore_hosts=[None]), ["spec_obj.ignore_hosts"]),
    (spec(requested_destination="c1"), ["spec_obj.requested_destination"]),
    (spec(requested_destination=destination(5)), ["spec_obj.requested_destination.host"]),
    (spec(instance_group={"uuid": GROUP_UUID}), ["spec_obj.instance_group"]),
    (spec(instance_group=group(rules={"max_server_per_host": "many"})),
     ["spec_obj.instance_group.rules.max_server_per_host"]),
    (spec(instance_group=group(rules={"max_server_per_host": "0"})),
     ["spec_obj.instance_group.rules.max_server_per_host"]),
    (spec(instance_group=group(members="u1")), ["spec_obj.instance_group.members"]),
    (spec(instance_group=group(policy=["affinity"])), ["spec_obj.instance_group.policy"]),
    (spec(retry=retries(-1, [])), ["spec_obj.retry.num_attempts"]),
    (spec(retry=prim("SchedulerRetries", {"num_attempts": 2, "hosts": [["c1", "c1"]]},
                     "1.1")), ["spec_obj.retry.hosts", "ComputeNodeList"]),
    (spec(retry=retries(2, [(None, "n1")])), ["spec_obj.retry.hosts[0]", "host"]),
    (spec(limits={"vcpu": 4}), ["spec_obj.limits", "SchedulerLimits"]),
    (spec(limits=prim("SchedulerLimits", {"vcpu": "4"})), ["spec_obj.limits.vcpu"]),
    (spec(is_bfv="yes"), ["spec_obj.is_bfv"]),
])
def test_malformed_spec_is_refused_naming_the_field(value, words):
    with pytest.raises(exception.InvalidRequestSpec) as err:
        spec_obj.to_legacy(value, [UUID1])
    for word in words:
        assert word in err.value.reason, err.value.reason
    # The caller can fail the instances it named.
    assert err.value.instance_uuids == [UUID1]


@pytest.mark.parametrize("uuids", ["u1", [UUID1, None], [UUID1, ""], {"a": 1}, 5])
def test_malformed_instance_uuids(uuids):
    with pytest.raises(exception.InvalidRequestSpec, match="instance_uuids"):
        spec_obj.to_legacy(spec(), uuids)


def test_error_without_uuid_argument_names_the_spec_instance():
    with pytest.raises(exception.InvalidRequestSpec) as err:
        spec_obj.to_legacy(spec(flavor=_flavor_with(vcpus=-1)), None)
    assert err.value.instance_uuids == [UUID1]


# -- RPC API 4.0: nova's legacy dicts ---------------------------------------

def legacy_dicts(num_instances=1, **filter_properties):
    """What nova's RequestSpec.to_legacy_request_spec_dict() and
    to_legacy_filter_properties_dict() send (objects as primitives)."""
    request_spec = {
        "num_instances": num_instances,
        # base.obj_to_primitive(): plain dicts, sets made lists by JSON.
        "image": {"id": "img-1", "name": "cirros", "min_ram": 0,
                  "properties": {"hw_architecture": "x86_64",
                                 "os_type": "linux",
                                 "hw_numa_nodes": 2,
                                 "hw_numa_cpus": [[0], [1]],
                                 "hw_numa_mem": [1024, 1024]}},
        "instance_properties": {
            "numa_topology": None,
            "pci_requests": prim("InstancePCIRequests",
                                 {"instance_uuid": UUID1, "requests": []}, "1.1"),
            "project_id": "p1", "user_id": "u1", "availability_zone": "az1",
            "uuid": UUID1, "root_gb": 20, "ephemeral_gb": 0, "memory_mb": 2048,
            "vcpus": 2},
        "instance_type": flavor(swap=128),
    }
    return request_spec, filter_properties


def test_legacy_4_0_boot():
    rs, fp = spec_obj.legacy_4_0(*legacy_dicts())
    req = request.parse(rs, fp)
    assert (req.memory_mb, req.vcpus, req.root_gb, req.swap) == (2048, 2, 20, 128)
    assert req.instance_type["name"] == "m1.small"
    assert req.image["properties"]["hw_numa_cpus.1"] == "1"
    assert req.image_props.get("hw_numa_cpus")[1] == {1}
    assert req.image_props.get("hw_architecture") == "x86_64"
    assert req.availability_zone == "az1"
    assert req.instance_uuids == [UUID1]
    assert "pci_requests" not in req.instance_properties
    assert req.instance_properties["os_type"] == "linux"
    assert req.instance_properties["image_ref"] == "img-1"


def test_legacy_4_0_group_retry_limits_destination_hints():
    rs, fp = spec_obj.legacy_4_0(*legacy_dicts(
        group_updated=True, group_hosts=["c9"], group_policies=["anti-affinity"],
        group_members=[UUID1], group_uuid=GROUP_UUID,
        retry={"num_attempts": 2, "hosts": [["c1", "c1-node"]]},
        limits={"vcpu": 32, "memory_mb": 4096,
                "numa_topology": prim("NUMATopologyLimits", {}, "1.1")},
        requested_destination=destination("c5", "c5-node"),
        scheduler_hints={"group": GROUP_UUID, "same_host": UUID2},
        ignore_hosts=["c7"]))
    req = request.parse(rs, fp)
    assert req.instance_group == {"uuid": GROUP_UUID, "policy": "anti-affinity",
                                  "rules": {}, "members": [UUID1], "hosts": ["c9"]}
    assert req.retry == {"num_attempts": 1, "hosts": [["c1", "c1-node"]]}
    assert req.filter_properties["limits"] == {"vcpu": 32, "memory_mb": 4096}
    assert req.destination == ("c5", "c5-node")
    assert req.scheduler_hints == {"group": GROUP_UUID, "same_host": UUID2}
    assert req.ignore_hosts == ["c7"]


def test_legacy_4_0_multi_create_is_decided_without_claims():
    rs, fp = spec_obj.legacy_4_0(*legacy_dicts(num_instances=2))
    req = request.parse(rs, fp)
    assert (req.instance_uuids, req.num_instances) == ([], 2)


def test_legacy_4_0_keeps_havana_dicts_as_they_are():
    from tests.unit.scheduler.conftest import boot_request

    havana = boot_request(memory_mb=512, count=2)
    rs, fp = spec_obj.legacy_4_0(havana, {"scheduler_hints": {}})
    assert request.parse(rs, fp).instance_uuids == havana["instance_uuids"]
    assert rs["instance_type"] == havana["instance_type"]


@pytest.mark.parametrize("args, words", [
    ((None, {}), ["request_spec", "NoneType"]),
    (({"instance_properties": {}}, []), ["filter_properties", "list"]),
    ((dict(legacy_dicts()[0], instance_type=_flavor_with(vcpus=-2)), {}),
     ["request_spec.instance_type.vcpus"]),
    ((legacy_dicts()[0], {"group_updated": True, "group_policies": [1]}),
     ["filter_properties.group_policies"]),
    ((legacy_dicts()[0], {"retry": {"num_attempts": "2", "hosts": []}}),
     ["filter_properties.retry.num_attempts"]),
    ((legacy_dicts()[0], {"requested_destination": prim("Flavor", {})}),
     ["filter_properties.requested_destination", "Destination"]),
    ((legacy_dicts()[0], {"limits": {"vcpu": "x"}}), ["filter_properties.limits.vcpu"]),
])
def test_legacy_4_0_malformed(args, words):
    with pytest.raises(exception.InvalidRequestSpec) as err:
        spec_obj.legacy_4_0(*args)
    for word in words:
        assert word in err.value.reason, err.value.reason


# -- decisions through the 2.x path ------------------------------------------

def test_anti_affinity_group_spreads_a_multi_create(manager, ctxt):
    manager.compute_node_update(ctxt, compute_report("c1", memory_mb=65536,
                                                     vcpus=64, local_gb=1000))
    manager.compute_node_update(ctxt, compute_report("c2", memory_mb=8192))
    # Without the group both instances go to the roomiest host.
    dests = manager.select_destinations(ctxt, *spec_obj.to_legacy(
        spec(num_instances=2, instance_uuid=UUID3), [UUID3, str(uuidlib.uuid4())]))
    assert [d["host"] for d in dests] == ["c1", "c1"]
    group_spec = spec(num_instances=2, instance_group=group("anti-affinity",
                                                           members=[], hosts=[]),
                      scheduler_hints={"group": [GROUP_UUID]})
    dests = manager.select_destinations(ctxt, *spec_obj.to_legacy(
        group_spec, [UUID1, UUID2]))
    assert sorted(d["host"] for d in dests) == ["c1", "c2"]


def test_requested_destination_is_where_it_goes(manager, ctxt):
    manager.compute_node_update(ctxt, compute_report("c1", memory_mb=65536))
    manager.compute_node_update(ctxt, compute_report("c3", memory_mb=4096))
    dests = manager.select_destinations(ctxt, *spec_obj.to_legacy(
        spec(requested_destination=destination("c3", "c3")), [UUID1]))
    assert [(d["host"], d["nodename"]) for d in dests] == [("c3", "c3")]


def test_requested_destination_is_still_filtered(manager, ctxt):
    """A destination too small for the flavor is refused by RamFilter, as
    nova's scheduler refuses it (a forced host would not be checked)."""
    from nova_sched import exception

    manager.compute_node_update(ctxt, compute_report("c1", memory_mb=65536))
    manager.compute_node_update(ctxt, compute_report("c3", memory_mb=1024))
    with pytest.raises(Exception) as info:
        manager.select_destinations(ctxt, *spec_obj.to_legacy(
            spec(flavor=flavor(memory_mb=4096),
                 requested_destination=destination("c3")), [UUID1]))
    err = info.value.exc_info[1] if hasattr(info.value, "exc_info") else info.value
    assert isinstance(err, exception.NoValidHost)
    assert "requested_destination removed 1" in err.reason
    assert "RamFilter removed 1" in err.reason


def test_reschedule_avoids_the_tried_node(manager, ctxt):
    manager.compute_node_update(ctxt, compute_report("c1", memory_mb=16384))
    manager.compute_node_update(ctxt, compute_report("c2", memory_mb=4096))
    dests = manager.select_destinations(ctxt, *spec_obj.to_legacy(
        spec(retry=retries(2, [("c1", "c1")])), [UUID1]))
    assert [d["host"] for d in dests] == ["c2"]


# -- captured primitives of real nova releases ---------------------------------

# The captured RequestSpecs, alone or in a 4.3+ select_destinations call
# (the other captures are replies, fanout casts and 4.0's legacy dicts).
_SPEC_FIXTURES = ("boot_*.json", "multi_create_3.json", "requested_destination.json",
                  "reschedule_with_retry.json", "wire_select_destinations_4_[35]*.json")


def _fixture_files() -> list[pathlib.Path]:
    return sorted({path for pattern in _SPEC_FIXTURES
                   for path in FIXTURES.glob(f"nova*/{pattern}")})


def _call_arguments(document) -> tuple[dict, list | None]:
    """(spec_obj, instance_uuids) of a fixture: a RequestSpec primitive, the
    call's kwargs, or an oslo.messaging message with them under ``args``."""
    if isinstance(document, dict) and isinstance(document.get("message"), dict):
        document = document["message"]  # a capture of nova's client
    if isinstance(document, dict) and isinstance(document.get("oslo.message"), str):
        # oslo.messaging's envelope around the serialised message.
        document = json.loads(document["oslo.message"])
    if isinstance(document, dict) and isinstance(document.get("args"), dict):
        document = document["args"]
    if isinstance(document, dict) and "spec_obj" in document:
        return document["spec_obj"], document.get("instance_uuids")
    return document, None


@pytest.mark.skipif(not _fixture_files(), reason="no captured nova fixtures yet")
@pytest.mark.parametrize("path", _fixture_files(),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_captured_nova_primitives_decode(path):
    spec_primitive, uuids = _call_arguments(json.loads(path.read_text()))
    data = spec_primitive["nova_object.data"]
    rs, fp = spec_obj.to_legacy(spec_primitive, uuids)
    req = request.parse(rs, fp)

    flavor_data = data["flavor"]["nova_object.data"]
    expected_root = 0 if data.get("is_bfv") else flavor_data["root_gb"]
    assert (req.memory_mb, req.vcpus, req.root_gb) == (
        flavor_data["memory_mb"], flavor_data["vcpus"], expected_root)
    assert req.ephemeral_gb == flavor_data.get("ephemeral_gb", 0)
    assert req.extra_specs == flavor_data.get("extra_specs", {})
    assert req.project_id == data.get("project_id")
    assert req.availability_zone == (data.get("availability_zone") or None)
    for key, value in (data.get("scheduler_hints") or {}).items():
        got = req.scheduler_hints[key]
        assert (got if isinstance(got, list) else [got]) == value
    if uuids:
        assert req.instance_uuids == list(uuids)

    group_primitive = data.get("instance_group")
    if group_primitive is None:
        assert req.instance_group is None
    else:
        group_data = group_primitive["nova_object.data"]
        policy = group_data.get("policy") or (group_data.get("policies") or [None])[0]
        assert req.instance_group["policy"] == policy
        assert req.instance_group.get("uuid") == group_data.get("uuid")
    retry_primitive = data.get("retry")
    if retry_primitive and "num_attempts" in retry_primitive["nova_object.data"]:
        retry_data = retry_primitive["nova_object.data"]
        nodes = retry_data["hosts"]["nova_object.data"]["objects"]
        assert retry.tried_nodes(req) == {
            (n["nova_object.data"]["host"], n["nova_object.data"]["hypervisor_hostname"])
            for n in nodes}
        assert req.retry["num_attempts"] == max(0, retry_data["num_attempts"] - 1)
    dest = (data.get("requested_destination") or {}).get("nova_object.data") or {}
    if dest.get("host"):
        assert req.destination == (dest["host"], dest.get("node") or None)
        assert req.force_hosts == (data.get("force_hosts") or [])

    name = path.name
    if name == "boot_anti_affinity_group.json":
        assert req.instance_group["policy"] == "anti-affinity"
    if name == "reschedule_with_retry.json":
        assert req.retry is not None
    if name == "requested_destination.json":
        assert req.destination
    if name == "multi_create_3.json":
        assert req.num_instances == 3
    if name == "boot_full.json":
        assert req.image_id
