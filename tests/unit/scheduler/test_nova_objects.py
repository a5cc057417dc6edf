"""nova object primitives read and written without nova (scheduler.wire.nova_objects)."""

from __future__ import annotations

import json

import pytest

from nova_sched import exception
from nova_sched.scheduler.wire import nova_objects


def prim(name: str, data: dict, version: str = "1.0", namespace: str = "nova",
         changes: list[str] | None = None) -> dict:
    """A primitive as oslo.versionedobjects writes it."""
    value = {"nova_object.name": name, "nova_object.namespace": namespace,
             "nova_object.version": version, "nova_object.data": data}
    if changes is not None:
        value["nova_object.changes"] = changes
    return value


# -- reading -------------------------------------------------------------------

def test_is_primitive():
    flavor = prim("Flavor", {"memory_mb": 512}, "1.2")
    assert nova_objects.is_primitive(flavor)
    assert nova_objects.is_primitive(flavor, "Flavor")
    assert not nova_objects.is_primitive(flavor, "ImageMeta")
    assert not nova_objects.is_primitive({"memory_mb": 512})
    assert not nova_objects.is_primitive(prim("Flavor", {}, namespace="cinder"))
    assert not nova_objects.is_primitive([flavor])
    assert not nova_objects.is_primitive(None)


def test_unwrap_returns_a_copy_of_the_data():
    data = {"memory_mb": 512, "vcpus": 1}
    flavor = prim("Flavor", data, "1.2", changes=["memory_mb"])
    out = nova_objects.unwrap(flavor, "Flavor")
    assert out == data
    out["memory_mb"] = 1
    assert data["memory_mb"] == 512


def test_unwrap_accepts_any_minor_of_a_known_major():
    # A newer minor only adds fields: they are read by name or ignored.
    assert nova_objects.unwrap(prim("RequestSpec", {"x": 1}, "1.99"),
                               "RequestSpec") == {"x": 1}
    assert nova_objects.unwrap(prim("RequestSpec", {}, "2.3"), "RequestSpec",
                               versions=(1, 2)) == {}


@pytest.mark.parametrize("value, words", [
    (None, ["spec_obj", "RequestSpec", "NoneType"]),
    ("RequestSpec", ["spec_obj", "str"]),
    ({"nova_object.name": "RequestSpec"}, ["spec_obj", "nova_object.namespace",
                                           "nova_object.version", "nova_object.data"]),
    (prim("RequestSpec", {}, namespace="cinder"), ["spec_obj", "cinder"]),
    (prim("Flavor", {}), ["spec_obj", "RequestSpec", "Flavor"]),
    (prim("RequestSpec", {}, "2.0"), ["spec_obj", "2.0", "1.x"]),
    (prim("RequestSpec", {}, "1"), ["spec_obj", "version", "'1'"]),
    (prim("RequestSpec", {}, "one.two"), ["spec_obj", "version"]),
    (dict(prim("RequestSpec", {}), **{"nova_object.version": 1.15}),
     ["spec_obj", "version", "1.15"]),
    (prim("RequestSpec", ["flavor"]), ["spec_obj", "nova_object.data", "list"]),
])
def test_unwrap_rejects_with_a_reason_naming_the_field(value, words):
    with pytest.raises(exception.InvalidRequestSpec) as err:
        nova_objects.unwrap(value, "RequestSpec", where="spec_obj")
    for word in words:
        assert word in err.value.reason


def test_unwrap_names_the_object_without_where():
    with pytest.raises(exception.InvalidRequestSpec, match="Flavor"):
        nova_objects.unwrap({}, "Flavor")


def test_unwrap_list():
    nodes = prim("ComputeNodeList", {"objects": [
        prim("ComputeNode", {"host": "c1", "hypervisor_hostname": "n1"}, "1.19"),
        prim("ComputeNode", {"host": "c2", "hypervisor_hostname": "n2"}, "1.19"),
    ]}, "1.17")
    assert nova_objects.unwrap_list(nodes, "ComputeNodeList", "ComputeNode") == [
        {"host": "c1", "hypervisor_hostname": "n1"},
        {"host": "c2", "hypervisor_hostname": "n2"}]
    assert nova_objects.unwrap_list(prim("ComputeNodeList", {}, "1.17"),
                                    "ComputeNodeList", "ComputeNode") == []


def test_unwrap_list_names_the_bad_item():
    nodes = prim("ComputeNodeList", {"objects": [
        prim("ComputeNode", {"host": "c1"}, "1.19"), prim("Service", {}, "1.22")]})
    with pytest.raises(exception.InvalidRequestSpec) as err:
        nova_objects.unwrap_list(nodes, "ComputeNodeList", "ComputeNode",
                                 where="retry.hosts")
    assert "retry.hosts.objects[1]" in err.value.reason
    assert "Service" in err.value.reason
    with pytest.raises(exception.InvalidRequestSpec, match="objects must be a list"):
        nova_objects.unwrap_list(prim("ComputeNodeList", {"objects": {}}),
                                 "ComputeNodeList", "ComputeNode")


# -- writing -------------------------------------------------------------------

def test_primitive_lists_the_set_fields_as_changes():
    out = nova_objects.primitive("SchedulerLimits", "1.0", {"vcpu": 4, "disk_gb": None})
    assert out == {"nova_object.name": "SchedulerLimits",
                   "nova_object.namespace": "nova",
                   "nova_object.version": "1.0",
                   "nova_object.data": {"vcpu": 4, "disk_gb": None},
                   "nova_object.changes": ["disk_gb", "vcpu"]}
    # oslo leaves the key out when nothing changed.
    assert "nova_object.changes" not in nova_objects.primitive("X", "1.0", {})
    assert nova_objects.primitive("X", "1.0", {"a": 1}, changes=[])[
        "nova_object.data"] == {"a": 1}


def test_scheduler_limits_primitive():
    out = nova_objects.scheduler_limits_primitive(
        {"memory_mb": 1501.5, "vcpu": 128.0, "disk_gb": 100.0})
    assert out["nova_object.name"] == "SchedulerLimits"
    assert out["nova_object.version"] == "1.0"
    # IntegerField's int(): truncated, never above what the node can take.
    assert out["nova_object.data"] == {"numa_topology": None, "vcpu": 128,
                                       "disk_gb": 100, "memory_mb": 1501}
    assert all(type(v) is int for k, v in out["nova_object.data"].items()
               if k != "numa_topology")
    assert out["nova_object.changes"] == ["disk_gb", "memory_mb", "numa_topology",
                                          "vcpu"]
    # A node without a vCPU limit (CoreFilter off or no vCPU count).
    empty = nova_objects.scheduler_limits_primitive({"memory_mb": 2048.0})
    assert empty["nova_object.data"] == {"numa_topology": None, "vcpu": None,
                                         "disk_gb": None, "memory_mb": 2048}
    assert nova_objects.scheduler_limits_primitive(None)["nova_object.data"] == {
        "numa_topology": None, "vcpu": None, "disk_gb": None, "memory_mb": None}
    with pytest.raises(TypeError):
        nova_objects.scheduler_limits_primitive({"vcpu": "16"})


def _selection(**overrides):
    args = dict(compute_node_uuid="5d3c6c0e-4b8f-4bde-9a5c-2b0f1f3e9a11",
                service_host="c1", nodename="c1-node",
                cell_uuid="8ab3ac61-6e69-4d42-a3f2-7c9a9c6e1f00",
                limits={"memory_mb": 12288.0, "vcpu": 128.0, "disk_gb": 100.0},
                availability_zone="az1")
    args.update(overrides)
    return nova_objects.selection_primitive(**args)


def test_selection_primitive_shape():
    """What nova's conductor deserialises as Selection 1.1: every key,
    version and change as oslo's obj_to_primitive writes them."""
    sel = _selection()
    assert set(sel) == {"nova_object.name", "nova_object.namespace",
                        "nova_object.version", "nova_object.data",
                        "nova_object.changes"}
    assert sel["nova_object.name"] == "Selection"
    assert sel["nova_object.namespace"] == "nova"
    assert sel["nova_object.version"] == "1.1"
    data = sel["nova_object.data"]
    assert set(data) == {"compute_node_uuid", "service_host", "nodename",
                         "cell_uuid", "limits", "allocation_request",
                         "allocation_request_version", "availability_zone"}
    assert sel["nova_object.changes"] == sorted(data)
    assert data["compute_node_uuid"] == "5d3c6c0e-4b8f-4bde-9a5c-2b0f1f3e9a11"
    assert data["service_host"] == "c1"
    assert data["nodename"] == "c1-node"
    assert data["cell_uuid"] == "8ab3ac61-6e69-4d42-a3f2-7c9a9c6e1f00"
    assert data["availability_zone"] == "az1"
    assert data["allocation_request"] is None
    assert data["allocation_request_version"] is None
    limits = data["limits"]
    assert limits["nova_object.name"] == "SchedulerLimits"
    assert limits["nova_object.version"] == "1.0"
    assert limits["nova_object.data"] == {"numa_topology": None, "vcpu": 128,
                                          "disk_gb": 100, "memory_mb": 12288}


def test_selection_primitive_survives_the_wire_and_reads_back():
    sel = json.loads(json.dumps(_selection(availability_zone=None)))
    data = nova_objects.unwrap(sel, "Selection")
    assert data["availability_zone"] is None
    limits = nova_objects.unwrap(data["limits"], "SchedulerLimits")
    # Selection.to_dict() on the nova side: the limits that are set.
    assert {k: v for k, v in limits.items() if v is not None} == {
        "vcpu": 128, "disk_gb": 100, "memory_mb": 12288}


@pytest.mark.parametrize("overrides", [
    {"service_host": ""}, {"nodename": None}, {"cell_uuid": 7},
    {"compute_node_uuid": None}, {"availability_zone": 3},
    {"allocation_request": {}},
])
def test_selection_primitive_refuses_bad_values(overrides):
    with pytest.raises(TypeError):
        _selection(**overrides)
