"""The API 4.5 endpoint: nova's RequestSpec in, Selections or nova's errors out,
and nova's fanout casts applied to the scheduler's store."""

from __future__ import annotations

import uuid

import oslo_messaging as messaging
import pytest

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.db import aggregates as db_aggregates
from nova_sched.db import node_uuids
from nova_sched.scheduler.manager_v4 import SchedulerManagerV4
from tests.unit.scheduler.conftest import claimed_memory, compute_report
from tests.unit.scheduler.test_spec_obj import flavor, image, prim, spec

NODE_UUID = "11111111-2222-4333-8444-555555555555"


@pytest.fixture
def v4(manager, ctxt):
    manager.compute_node_update(ctxt, compute_report("c1", memory_mb=4096, uuid=NODE_UUID))
    manager.compute_node_update(ctxt, compute_report("c2", memory_mb=8192))
    manager.compute_node_update(ctxt, compute_report("c3", memory_mb=2048))
    manager.reports.flush()
    return SchedulerManagerV4(manager)


def _raised(call):
    """What oslo.messaging's dispatcher sends back for an expected error."""
    with pytest.raises(messaging.ExpectedException) as info:
        call()
    return info.value.exc_info[1]


def test_selections_as_novas_primitives_choice_then_alternates(v4, ctxt):
    uuid1 = str(uuid.uuid4())
    answer = v4.select_destinations(ctxt, spec_obj=spec(flavor=flavor(memory_mb=1024)),
                                    instance_uuids=[uuid1], return_objects=True,
                                    return_alternates=True)
    (choices,) = answer
    assert [c["nova_object.name"] for c in choices] == ["Selection"] * 3
    assert {c["nova_object.version"] for c in choices} == {"1.1"}
    data = [c["nova_object.data"] for c in choices]
    # RAMWeigher: the most free RAM first, and every host as an alternate.
    assert [d["service_host"] for d in data] == ["c2", "c1", "c3"]
    assert data[1]["compute_node_uuid"] == NODE_UUID            # as reported
    assert data[0]["compute_node_uuid"] == node_uuids.for_node("c2", "c2")
    assert data[0]["cell_uuid"] == v4.cell_uuid() and uuid.UUID(data[0]["cell_uuid"])
    assert data[0]["limits"]["nova_object.name"] == "SchedulerLimits"
    assert data[0]["limits"]["nova_object.data"]["memory_mb"] == 8192 * 1.5
    assert data[0]["availability_zone"] == CONF.default_availability_zone
    assert data[0]["allocation_request"] is None
    # Only the choice is claimed.
    assert claimed_memory("c2") == 1024 and claimed_memory("c1") == 0


def test_without_alternates_or_objects(v4, ctxt):
    one = v4.select_destinations(ctxt, spec_obj=spec(), instance_uuids=[str(uuid.uuid4())],
                                 return_objects=True, return_alternates=False)
    assert len(one) == 1 and len(one[0]) == 1
    legacy = v4.select_destinations(ctxt, spec_obj=spec(),
                                    instance_uuids=[str(uuid.uuid4())])
    assert legacy[0]["host"] in {"c1", "c2", "c3"}
    assert set(legacy[0]) == {"host", "nodename", "limits"}


def test_the_configured_cell_uuid_wins(v4, ctxt):
    cell = "33333333-3333-4333-8333-333333333333"
    CONF.set_override("cell_uuid", cell, group="scheduler")
    try:
        (choices,) = v4.select_destinations(
            ctxt, spec_obj=spec(), instance_uuids=[str(uuid.uuid4())],
            return_objects=True)
    finally:
        CONF.clear_override("cell_uuid", group="scheduler")
    assert choices[0]["nova_object.data"]["cell_uuid"] == cell


def test_no_fit_is_novas_no_valid_host_with_the_reason(v4, ctxt):
    err = _raised(lambda: v4.select_destinations(
        ctxt, spec_obj=spec(flavor=flavor(memory_mb=1_000_000)),
        instance_uuids=[str(uuid.uuid4())], return_objects=True))
    assert (type(err).__module__, type(err).__name__) == ("nova.exception", "NoValidHost")
    assert "RamFilter removed 3" in str(err)
    assert err.kwargs["reason"].startswith("0/3 hosts available")
    assert v4.metrics.registry.get_sample_value(
        "nova_sched_requests_total",
        {"method": "select_destinations", "outcome": "no_valid_host"}) == 1


def test_a_malformed_spec_obj_is_a_clear_error(v4, ctxt):
    err = _raised(lambda: v4.select_destinations(
        ctxt, spec_obj={"nova_object.name": "Flavor"}, instance_uuids=[]))
    assert isinstance(err, exception.InvalidRequestSpec)


def test_4_0_legacy_dicts(v4, ctxt):
    uuid1 = str(uuid.uuid4())
    request_spec = {"instance_properties": {"uuid": uuid1, "memory_mb": 512,
                                            "vcpus": 1, "root_gb": 1,
                                            "ephemeral_gb": 0, "project_id": "p"},
                    "instance_type": flavor(memory_mb=512, root_gb=1),
                    "image": {"properties": {}}, "instance_uuids": [uuid1],
                    "num_instances": 1}
    answer = v4.select_destinations(ctxt, request_spec, {"scheduler_hints": {}})
    assert answer[0]["host"] == "c2"


def test_update_and_delete_aggregates_from_nova(v4, ctxt):
    agg = prim("Aggregate", {"id": 7, "name": "fast", "hosts": ["c1", "c3"],
                             "metadata": {"availability_zone": "az-1", "ssd": "true"}},
               version="1.3")
    v4.update_aggregates(ctxt, [agg])
    (stored,) = [a for a in db_aggregates.list_all() if a["name"] == "fast"]
    assert sorted(stored["hosts"]) == ["c1", "c3"]
    assert stored["metadata"]["ssd"] == "true"
    assert stored["availability_zone"] == "az-1"
    # Changed in nova: hosts and metadata replaced, not merged.
    agg["nova_object.data"].update(hosts=["c2"], metadata={"availability_zone": "az-1"})
    v4.update_aggregates(ctxt, [agg])
    (stored,) = [a for a in db_aggregates.list_all() if a["name"] == "fast"]
    assert stored["hosts"] == ["c2"] and "ssd" not in stored["metadata"]
    # The zone reaches decisions (at the cache's next refresh): only c2 is
    # in az-1.
    v4.manager.host_manager.refresh(force=True)
    answer = v4.select_destinations(ctxt, spec_obj=spec(availability_zone="az-1"),
                                    instance_uuids=[str(uuid.uuid4())])
    assert answer[0]["host"] == "c2"
    v4.delete_aggregate(ctxt, agg)
    assert [a for a in db_aggregates.list_all() if a["name"] == "fast"] == []


def test_instance_info_from_nova(v4, ctxt):
    from tests.unit.scheduler.conftest import instance_row

    known = str(uuid.uuid4())
    v4.select_destinations(ctxt, spec_obj=spec(), instance_uuids=[known])
    others = [str(uuid.uuid4()) for _ in range(2)]
    listed = prim("InstanceList", {"objects": [
        prim("Instance", {"uuid": u, "host": "c3"}, version="2.8") for u in others]},
        version="2.6")
    v4.update_instance_info(ctxt, "c3", listed)
    assert all(instance_row(u).host == "c3" for u in others)
    one = prim("Instance", {"uuid": str(uuid.uuid4())}, version="2.8")
    v4.update_instance_info(ctxt, "c1", one)
    assert instance_row(one["nova_object.data"]["uuid"]).host == "c1"

    host = v4.select_destinations(ctxt, spec_obj=spec(),
                                  instance_uuids=[str(uuid.uuid4())])[0]["host"]
    before = claimed_memory(host)
    (gone,) = [u for u in v4.manager.cycle.claims.held_on_host(host)][-1:]
    v4.delete_instance_info(ctxt, host, gone)
    assert claimed_memory(host) < before


def _with_filters(manager, names):
    """The manager's driver, rebuilt to run only ``names`` (filters are
    loaded when the driver is made)."""
    from nova_sched.scheduler import driver

    CONF.set_override("enabled_filters", names, group="filter_scheduler")
    manager.cycle.driver = driver.load_driver(CONF.scheduler.driver,
                                              manager.host_manager)


# -- what real nova sends, through oslo.messaging's dispatcher ------------------
_FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures"


def _wire(name):
    return sorted(_FIXTURES.glob(f"nova*/{name}"))


def _dispatch(manager, capture):
    """Hand a captured message of nova's client to the daemon's endpoints
    (the 2.10 and the 4.5 one) as the topic consumer does."""
    from oslo_messaging.rpc import dispatcher as rpc_dispatcher

    from nova_sched import rpc

    class Incoming:
        ctxt = capture["ctxt"]
        message = capture["message"]
        client_timeout = None  # no call-monitor heartbeats

    dispatcher = rpc_dispatcher.RPCDispatcher(
        [manager, SchedulerManagerV4(manager)], rpc.ContextSerializer(),
        messaging.ExplicitRPCAccessPolicy)
    return dispatcher.dispatch(Incoming())


@pytest.mark.parametrize("path", _wire("wire_select_destinations_*.json"),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_novas_select_destinations_calls_are_served(manager, ctxt, path):
    import json

    capture = json.loads(path.read_text())
    spec_data = (capture["message"]["args"].get("spec_obj") or {}).get(
        "nova_object.data", {})
    # Hosts that fit whatever the capture asks (its extra specs name
    # capabilities and aggregates these hosts lack: those filters are off).
    _with_filters(manager, ["RamFilter", "CoreFilter", "DiskFilter", "ComputeFilter",
                            "AvailabilityZoneFilter"])
    try:
        # The captures ask for compute1 (node compute1.example.org) in az1,
        # or for any host of az1.
        for n in (1, 2, 3):
            manager.compute_node_update(ctxt, compute_report(
                f"compute{n}", f"compute{n}.example.org", vcpus=64,
                memory_mb=262144, local_gb=4000))
        manager.reports.flush()
        db_aggregates.replace("ssd-hosts", ["compute1", "compute2"],
                              {"availability_zone": "az1"})
        manager.host_manager.refresh(force=True)
        answer = _dispatch(manager, capture)
    finally:
        CONF.clear_override("enabled_filters", group="filter_scheduler")
    args = capture["message"]["args"]
    count = (len(args.get("instance_uuids") or []) or spec_data.get("num_instances")
             or args.get("request_spec", {}).get("num_instances") or 1)
    assert len(answer) == count
    if args.get("return_objects"):
        for per_instance in answer:
            assert {s["nova_object.name"] for s in per_instance} == {"Selection"}
            hosts = [s["nova_object.data"]["service_host"] for s in per_instance]
            assert set(hosts) <= {"compute1", "compute2"}   # az1 only
            assert 1 <= len(hosts) <= (CONF.scheduler.max_attempts
                                       if args.get("return_alternates") else 1)
    else:
        assert {a["host"] for a in answer} <= {"compute1", "compute2"}


@pytest.mark.parametrize("path", _wire("wire_update_*.json") + _wire("wire_delete_*.json")
                         + _wire("wire_sync_*.json"),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_novas_fanout_casts_are_applied(manager, ctxt, path):
    import json

    capture = json.loads(path.read_text())
    method = capture["message"]["method"]
    assert capture["target"]["fanout"] is True
    _dispatch(manager, capture)
    args = capture["message"]["args"]
    if method == "update_aggregates":
        for agg in args["aggregates"]:
            data = agg["nova_object.data"]
            (stored,) = [a for a in db_aggregates.list_all() if a["name"] == data["name"]]
            assert sorted(stored["hosts"]) == sorted(data["hosts"])
            assert stored["metadata"] == data["metadata"]
    elif method == "update_instance_info":
        from tests.unit.scheduler.conftest import instance_row

        info = args["instance_info"]
        items = (info["nova_object.data"]["objects"]
                 if info["nova_object.name"] == "InstanceList" else [info])
        for item in items:
            assert instance_row(item["nova_object.data"]["uuid"]).host == args["host_name"]


def test_instances_nova_reports_count_for_num_instances(manager, ctxt):
    """update_instance_info's instances fill a host for NumInstancesFilter
    as the scheduler's own claims do; deleting them frees it again."""
    CONF.set_override("max_instances_per_host", 2, group="filter_scheduler")
    _with_filters(manager, ["NumInstancesFilter"])
    try:
        for host in ("c1", "c2"):
            manager.compute_node_update(ctxt, compute_report(host))
        manager.reports.flush()
        v4 = SchedulerManagerV4(manager)
        running = [str(uuid.uuid4()) for _ in range(2)]
        v4.update_instance_info(ctxt, "c1", prim("InstanceList", {"objects": [
            prim("Instance", {"uuid": u}, version="2.8") for u in running]},
            version="2.6"))
        # c1 is full (two instances nova runs there): both go to c2.
        for _ in range(2):
            assert v4.select_destinations(ctxt, spec_obj=spec(), instance_uuids=[
                str(uuid.uuid4())])[0]["host"] == "c2"
        # A fresh cache (another daemon, a restart) counts them too.
        manager.host_manager.full_resync()
        _raised(lambda: v4.select_destinations(ctxt, spec_obj=spec(),
                                               instance_uuids=[str(uuid.uuid4())]))
        v4.delete_instance_info(ctxt, "c1", running[0])
        assert v4.select_destinations(ctxt, spec_obj=spec(), instance_uuids=[
            str(uuid.uuid4())])[0]["host"] == "c1"
    finally:
        CONF.clear_override("enabled_filters", group="filter_scheduler")
        CONF.clear_override("max_instances_per_host", group="filter_scheduler")


def test_a_rebuild_asks_its_host_the_image_filters_only_and_claims_nothing(v4, ctxt):
    """nova's rebuild names the instance's host in force_hosts with the
    _nova_check_type hint: the filters still run, only those that judge
    rebuilds (an image the host cannot run is refused; the memory the
    instance already holds there, which RamFilter would count, is not
    judged), and nothing is claimed."""
    _with_filters(v4.manager, ["RamFilter", "ComputeFilter", "ImagePropertiesFilter"])
    rebuild = dict(flavor=flavor(memory_mb=4096), force_hosts=["c3"], force_nodes=["c3"],
                   scheduler_hints={"_nova_check_type": ["rebuild"]})
    (choices,) = v4.select_destinations(ctxt, spec_obj=spec(**rebuild),
                                        instance_uuids=[str(uuid.uuid4())],
                                        return_objects=True)
    assert [c["nova_object.data"]["service_host"] for c in choices] == ["c3"]
    assert claimed_memory("c3") == 0
    err = _raised(lambda: v4.select_destinations(
        ctxt, spec_obj=spec(image=image({"img_hv_type": "xen"}), **rebuild),
        instance_uuids=[str(uuid.uuid4())], return_objects=True))
    assert "ImagePropertiesFilter removed 1" in str(err)
    assert "RamFilter" not in str(err)
