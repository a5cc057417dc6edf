"""Requests the catalogue filters reject (a malformed JsonFilter query, an
unknown PCI alias, an impossible NUMA split) fail their instances with a
fault naming the problem, and the daemon serves the next request."""

from __future__ import annotations

import json

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.db import models
from tests.unit.scheduler.conftest import (boot_request, compute_report,
                                           fault_messages as _faults,
                                           instance_row as _instance)

FILTERS = ["RetryFilter", "RamFilter", "ComputeFilter", "JsonFilter",
           "PciPassthroughFilter", "NUMATopologyFilter", "SameHostFilter",
           "DifferentHostFilter", "SimpleCIDRAffinityFilter"]


@pytest.fixture
def catalogue_manager(db, request):
    """The manager fixture, built after the catalogue filters are enabled."""
    CONF.set_override("enabled_filters", FILTERS, "filter_scheduler")
    CONF.set_override("alias", [json.dumps({"name": "nic", "vendor_id": "8086",
                                            "product_id": "154d"})], "pci")
    return request.getfixturevalue("manager")


def _event_results(uuid):
    with db_api.session_scope() as s:
        return s.execute(
            sa.select(models.InstanceActionEvent.result)
            .join(models.InstanceAction,
                  models.InstanceActionEvent.action_id == models.InstanceAction.id)
            .where(models.InstanceAction.instance_uuid == uuid)).scalars().all()


def _run(manager, ctxt, spec, hints=None):
    manager.run_instance(ctxt, spec, "pw", [], None, True,
                         {"scheduler_hints": hints or {}})
    return spec["instance_uuids"]


def _nodes(manager, ctxt):
    manager.compute_node_update(ctxt, compute_report("c1", memory_mb=8192))
    manager.compute_node_update(ctxt, compute_report(
        "c2", memory_mb=4096, host_ip="192.0.2.77",
        pci_stats=[{"vendor_id": "8086", "product_id": "154d", "count": 2}],
        numa_topology={"cells": [
            {"id": 0, "cpus": [0, 1], "memory_mb": 2048, "cpu_usage": 0,
             "memory_usage": 0},
            {"id": 1, "cpus": [2, 3], "memory_mb": 2048, "cpu_usage": 0,
             "memory_usage": 0}]}))


def _assert_served_next(manager, ctxt, expected_host="c1"):
    (uuid,) = _run(manager, ctxt, boot_request(memory_mb=512))
    assert _instance(uuid).host == expected_host
    assert _instance(uuid).vm_state == "building"


@pytest.mark.parametrize("query,problem", [
    ('[">=", "$free_ram_mb", 1024', "not valid JSON"),
    ('["!=", "$free_ram_mb", 1024]', "unknown operator '!='"),
    ('{"free_ram_mb": 1024}', "must be a JSON list"),
    ('[["=", 1, 1]]', "must start with an operator name"),
])
def test_malformed_json_query_fails_the_instance_with_a_clear_fault(
        catalogue_manager, ctxt, query, problem):
    mgr = catalogue_manager
    _nodes(mgr, ctxt)
    first, second = _run(mgr, ctxt, boot_request(count=2), {"query": query})
    for uuid in (first, second):
        row = _instance(uuid)
        assert (row.vm_state, row.host) == ("error", None)
        (fault,) = _faults(uuid)
        assert "Invalid JsonFilter query" in fault and problem in fault
        assert _event_results(uuid) == ["Error"]
    assert not mgr.cycle.compute_api.casts
    errors = [e for e in mgr.notifier._notifier.events if e[0] == "ERROR"]
    assert len(errors) == 2 and problem in errors[0][2]["reason"]
    _assert_served_next(mgr, ctxt)


def test_valid_json_query_places_by_it(catalogue_manager, ctxt):
    mgr = catalogue_manager
    _nodes(mgr, ctxt)
    (uuid,) = _run(mgr, ctxt, boot_request(),
                   {"query": json.dumps(["<", "$free_ram_mb", 5000])})
    assert _instance(uuid).host == "c2"
    (none,) = _run(mgr, ctxt, boot_request(),
                   {"query": json.dumps([">", "$free_ram_mb", 100000])})
    assert "JsonFilter removed 2" in _faults(none)[0]


def test_unknown_pci_alias_fails_the_instance(catalogue_manager, ctxt):
    mgr = catalogue_manager
    _nodes(mgr, ctxt)
    spec = boot_request()
    spec["instance_type"]["extra_specs"] = {"pci_passthrough:alias": "gpu:1"}
    (uuid,) = _run(mgr, ctxt, spec)
    assert _instance(uuid).vm_state == "error"
    assert "PCI alias 'gpu' is not defined in [pci] alias" in _faults(uuid)[0]
    _assert_served_next(mgr, ctxt)


def test_pci_and_numa_requests_go_where_they_fit(catalogue_manager, ctxt):
    mgr = catalogue_manager
    _nodes(mgr, ctxt)
    spec = boot_request(memory_mb=2048, vcpus=2)
    spec["instance_type"]["extra_specs"] = {"pci_passthrough:alias": "nic:2",
                                            "hw:numa_nodes": "2"}
    (uuid,) = _run(mgr, ctxt, spec)
    assert _instance(uuid).host == "c2"
    spec = boot_request(memory_mb=2048, vcpus=2)
    spec["instance_type"]["extra_specs"] = {"pci_passthrough:alias": "nic:3"}
    (uuid,) = _run(mgr, ctxt, spec)
    assert "PciPassthroughFilter removed 2" in _faults(uuid)[0]


def test_impossible_numa_split_fails_the_instance(catalogue_manager, ctxt):
    mgr = catalogue_manager
    _nodes(mgr, ctxt)
    spec = boot_request(memory_mb=1000, vcpus=3)
    spec["instance_type"]["extra_specs"] = {"hw:numa_nodes": "2"}
    (uuid,) = _run(mgr, ctxt, spec)
    assert _instance(uuid).vm_state == "error"
    assert "cannot be split evenly over 2 NUMA nodes" in _faults(uuid)[0]
    _assert_served_next(mgr, ctxt)


def test_cidr_hint_through_the_manager(catalogue_manager, ctxt):
    mgr = catalogue_manager
    _nodes(mgr, ctxt)
    (near,) = _run(mgr, ctxt, boot_request(), {"build_near_host_ip": "192.0.2.70",
                                               "cidr": "/28"})
    assert _instance(near).host == "c2"
    (bad,) = _run(mgr, ctxt, boot_request(), {"build_near_host_ip": "192.0.2.300"})
    assert "build_near_host_ip" in _faults(bad)[0]
    _assert_served_next(mgr, ctxt)


def test_select_destinations_and_explain_raise_invalid_request(catalogue_manager, ctxt):
    mgr = catalogue_manager
    _nodes(mgr, ctxt)
    fprops = {"scheduler_hints": {"query": '["!=", 1, 2]'}}
    # The RPC layer sends the wrapped InvalidRequestSpec to the caller.
    for call in (lambda: mgr.select_destinations(ctxt, boot_request(count=2), fprops),
                 lambda: mgr.explain(ctxt, boot_request(), fprops)):
        with pytest.raises(messaging.ExpectedException) as err:
            call()
        cause = err.value.exc_info[1]
        assert isinstance(cause, exception.InvalidRequestSpec)
        assert "Invalid JsonFilter query: unknown operator '!='" in cause.message
    with db_api.session_scope() as s:
        assert s.execute(sa.select(sa.func.count()).select_from(
            models.Allocation)).scalar_one() == 0


def test_bad_image_property_fails_the_instance_naming_it(catalogue_manager, ctxt):
    # nova raises inside the scheduler building ImageMetaProps; here the
    # instance gets a fault naming each property, and the daemon goes on.
    mgr = catalogue_manager
    _nodes(mgr, ctxt)
    spec = boot_request()
    spec["image"]["properties"] = {"hw_disk_bus": "nvme", "hw_numa_nodes": "two",
                                   "architecture": "x86_64"}
    (uuid,) = _run(mgr, ctxt, spec)
    assert _instance(uuid).vm_state == "error"
    (fault,) = _faults(uuid)
    assert "image property hw_disk_bus='nvme' must be one of fdc, ide" in fault
    assert "image property hw_numa_nodes='two' must be a whole number" in fault
    assert "architecture" not in fault
    assert _event_results(uuid) == ["Error"]
    _assert_served_next(mgr, ctxt)
    fprops = {"scheduler_hints": {}}
    with pytest.raises(messaging.ExpectedException) as err:
        mgr.select_destinations(ctxt, spec, fprops)
    assert "image property hw_disk_bus='nvme'" in err.value.exc_info[1].message
