"""SchedulerManager: the run_instance story and its error paths."""

from __future__ import annotations

import collections
import copy

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.db import models
from tests.unit.scheduler.conftest import (boot_request, claimed_memory as _claimed,
                                           compute_report,
                                           fault_messages as _faults,
                                           instance_row as _instance)


def _events(uuid):
    with db_api.session_scope() as s:
        return s.execute(
            sa.select(models.InstanceAction.action, models.InstanceActionEvent.event,
                      models.InstanceActionEvent.result,
                      models.InstanceActionEvent.traceback)
            .join(models.InstanceActionEvent,
                  models.InstanceActionEvent.action_id == models.InstanceAction.id)
            .where(models.InstanceAction.instance_uuid == uuid)).all()



def _run(manager, ctxt, spec, fprops=None, password="s3cret-pw"):
    manager.run_instance(ctxt, spec, password, [["/etc/motd", "hello"]], None, True,
                         fprops if fprops is not None else {})


def test_run_instance_places_claims_casts_and_records(manager, ctxt):
    manager.compute_node_update(ctxt, compute_report("c1", memory_mb=4096))
    manager.compute_node_update(ctxt, compute_report("c2", memory_mb=8192))
    spec = boot_request(memory_mb=1024, count=2)
    _run(manager, ctxt, spec)

    casts = manager.cycle.compute_api.casts
    # The first goes to the most free RAM; the second sees the first's claim
    # and its build counted as an I/O operation (IoOpsWeigher), so spreads.
    assert [c["host"] for c in casts] == ["c2", "c1"]
    first = casts[0]
    assert first["instance"]["uuid"] == spec["instance_uuids"][0]
    assert first["instance"]["vm_state"] == "building"
    assert first["instance"]["task_state"] == "scheduling"
    assert first["node"] == "c2"
    assert first["filter_properties"]["retry"] == {"num_attempts": 1,
                                                   "hosts": [["c2", "c2"]]}
    assert first["filter_properties"]["limits"]["memory_mb"] == 8192 * 1.5
    assert first["admin_password"] == "s3cret-pw"  # the compute node needs it
    assert [c["instance"]["launch_index"] for c in casts] == [0, 1]
    # Each cast's spec names its own instance's launch index; the request's
    # own is left as it came.
    assert [c["request_spec"]["instance_properties"]["launch_index"]
            for c in casts] == [0, 1]
    assert "launch_index" not in spec["instance_properties"]
    for uuid, host in zip(spec["instance_uuids"], ("c2", "c1")):
        row = _instance(uuid)
        assert (row.host, row.node, row.vm_state) == (host, host, "building")
        assert _events(uuid) == [("create", "schedule", "Success", None)]
    assert _claimed("c2") == 1024 and _claimed("c1") == 1024

    kinds = [e[1] for e in manager.notifier._notifier.events]
    assert kinds == ["scheduler.run_instance.start", "scheduler.run_instance.scheduled",
                     "scheduler.run_instance.scheduled", "scheduler.run_instance.end"]
    assert "s3cret-pw" not in repr(manager.notifier._notifier.events)


def test_no_valid_host_sets_error_fault_event_and_notification(manager, ctxt):
    manager.compute_node_update(ctxt, compute_report("c1", memory_mb=1024))
    spec = boot_request(memory_mb=64000)
    _run(manager, ctxt, spec)

    uuid = spec["instance_uuids"][0]
    row = _instance(uuid)
    assert (row.vm_state, row.task_state, row.host) == ("error", None, None)
    assert _faults(uuid) == [
        "No valid host was found. 0/1 hosts available: RamFilter removed 1"]
    ((action, event, result, trace),) = _events(uuid)
    assert (event, result) == ("schedule", "Error")
    assert "RamFilter removed 1" in trace
    errors = [e for e in manager.notifier._notifier.events if e[0] == "ERROR"]
    assert len(errors) == 1
    payload = errors[0][2]
    assert errors[0][1] == "scheduler.run_instance"
    assert payload["state"] == "error" and payload["method"] == "run_instance"
    assert payload["instance_id"] == uuid and "RamFilter" in payload["reason"]
    assert manager.cycle.compute_api.casts == []


def test_partial_success_keeps_earlier_instances(manager, ctxt):
    manager.compute_node_update(ctxt, compute_report("c1", memory_mb=2048))
    CONF.set_override("ram_allocation_ratio", 1.0, group="filter_scheduler")
    spec = boot_request(memory_mb=1024, count=3)
    _run(manager, ctxt, spec)
    states = [_instance(u).vm_state for u in spec["instance_uuids"]]
    assert states == ["building", "building", "error"]
    assert len(manager.cycle.compute_api.casts) == 2
    assert _claimed("c1") == 2048


@pytest.mark.parametrize("mutate, message", [
    (lambda s: s.pop("instance_properties"), "no instance_properties"),
    (lambda s: s["instance_type"].update(memory_mb="512"), "memory_mb"),
    (lambda s: s["instance_type"].update(memory_mb=-1), "must not be negative"),
    (lambda s: s.update(num_instances=10**9), "num_instances"),
    (lambda s: s["instance_type"].update(vcpus=1.5), "vcpus"),
])
def test_malformed_request_fails_instance_visibly_and_daemon_serves_next(
        manager, ctxt, mutate, message):
    manager.compute_node_update(ctxt, compute_report("c1"))
    bad = boot_request()
    mutate(bad)
    _run(manager, ctxt, bad)
    uuid = bad["instance_uuids"][0]
    assert _instance(uuid).vm_state == "error"
    (fault,) = _faults(uuid)
    assert fault.startswith("Invalid request") and message in fault
    assert _events(uuid)[0][2] == "Error"

    good = boot_request()
    _run(manager, ctxt, good)
    assert _instance(good["instance_uuids"][0]).host == "c1"


def test_request_without_any_uuid_is_logged_not_raised(manager, ctxt, caplog):
    _run(manager, ctxt, "not a dict")
    _run(manager, ctxt, {"instance_type": {}})
    assert "without any instance uuid" in caplog.text


def test_extra_flavor_keys_are_not_errors(manager, ctxt):
    manager.compute_node_update(ctxt, compute_report("c1"))
    spec = boot_request()
    spec["instance_type"].update(rxtx_factor=2.0, is_public=False, vcpu_weight=None)
    _run(manager, ctxt, spec)
    assert _instance(spec["instance_uuids"][0]).host == "c1"


def test_retry_releases_failed_claim_and_avoids_failed_node(manager, ctxt):
    manager.compute_node_update(ctxt, compute_report("big", memory_mb=16384))
    manager.compute_node_update(ctxt, compute_report("small", memory_mb=4096))
    spec = boot_request(memory_mb=1024)
    _run(manager, ctxt, spec)
    cast = manager.cycle.compute_api.casts[-1]
    assert cast["host"] == "big" and _claimed("big") == 1024

    # The compute node gives the instance back, as nova's _reschedule does.
    fprops = copy.deepcopy(cast["filter_properties"])
    fprops["retry"]["exc"] = "BuildAbortException: disk on fire"
    _run(manager, ctxt, cast["request_spec"], fprops)
    retry_cast = manager.cycle.compute_api.casts[-1]
    assert retry_cast["host"] == "small"
    assert retry_cast["filter_properties"]["retry"]["num_attempts"] == 2
    assert retry_cast["filter_properties"]["retry"]["hosts"] == [
        ["big", "big"], ["small", "small"]]
    assert _claimed("big") == 0 and _claimed("small") == 1024
    assert _instance(spec["instance_uuids"][0]).host == "small"


def test_retry_past_max_attempts_goes_to_error(manager, ctxt):
    CONF.set_override("max_attempts", 2, group="scheduler")
    manager.compute_node_update(ctxt, compute_report("c1"))
    manager.compute_node_update(ctxt, compute_report("c2"))
    manager.compute_node_update(ctxt, compute_report("c3"))
    spec = boot_request()
    uuid = spec["instance_uuids"][0]
    fprops = {"retry": {"num_attempts": 2, "hosts": [["c1", "c1"], ["c2", "c2"]],
                        "exc": "boom"}}
    _run(manager, ctxt, spec, fprops)
    assert _instance(uuid).vm_state == "error"
    (fault,) = _faults(uuid)
    assert "Exceeded max scheduling attempts 2" in fault
    assert manager.cycle.compute_api.casts == []


def test_force_hosts_skips_filters_and_disables_retry(manager, ctxt):
    manager.compute_node_update(ctxt, compute_report("c1", memory_mb=16384))
    manager.compute_node_update(ctxt, compute_report("c2", memory_mb=4096))
    spec = boot_request()
    _run(manager, ctxt, spec, {"force_hosts": ["C2"]})
    cast = manager.cycle.compute_api.casts[-1]
    assert cast["host"] == "c2"
    assert "retry" not in cast["filter_properties"]


def test_ignore_hosts_removes_every_node_of_the_host(manager, ctxt):
    manager.compute_node_update(ctxt, compute_report("ironic", "n1", memory_mb=16384))
    manager.compute_node_update(ctxt, compute_report("ironic", "n2", memory_mb=16384))
    manager.compute_node_update(ctxt, compute_report("c2", memory_mb=2048))
    spec = boot_request()
    _run(manager, ctxt, spec, {"ignore_hosts": ["ironic"]})
    assert manager.cycle.compute_api.casts[-1]["host"] == "c2"


def test_compute_report_with_nonsense_is_rejected_and_node_unchanged(manager, ctxt,
                                                                     caplog):
    manager.compute_node_update(ctxt, compute_report("c1", memory_mb=4096))
    for bad in (compute_report("c1", memory_mb=-5),
                compute_report("c1", vcpus="eight"),
                compute_report("c1", supported_instances="nope"),
                {"host": "c1"}, "garbage", None):
        manager.compute_node_update(ctxt, bad)
    assert "Ignored report from compute host" in caplog.text
    with db_api.session_scope() as s:
        node = s.execute(sa.select(models.ComputeNode)).scalar_one()
    assert node.memory_mb == 4096 and node.vcpus == 8
    spec = boot_request(memory_mb=4096)
    _run(manager, ctxt, spec)
    assert manager.cycle.compute_api.casts[-1]["host"] == "c1"


def test_compute_node_delete_stops_placement(manager, ctxt):
    manager.compute_node_update(ctxt, compute_report("c1"))
    manager.compute_node_delete(ctxt, "c1", "c1")
    spec = boot_request()
    _run(manager, ctxt, spec)
    assert _faults(spec["instance_uuids"][0]) == [
        "No valid host was found. 0/0 hosts available"]


def test_instance_delete_releases_claim(manager, ctxt):
    manager.compute_node_update(ctxt, compute_report("c1"))
    spec = boot_request(memory_mb=2048)
    _run(manager, ctxt, spec)
    assert _claimed("c1") == 2048
    manager.instance_delete(ctxt, spec["instance_uuids"][0])
    assert _claimed("c1") == 0


def test_select_destinations_all_or_nothing(manager, ctxt):
    CONF.set_override("ram_allocation_ratio", 1.0, group="filter_scheduler")
    manager.compute_node_update(ctxt, compute_report("c1", memory_mb=2048))
    spec = boot_request(memory_mb=1024, count=3)
    with pytest.raises(messaging.ExpectedException) as err:
        manager.select_destinations(ctxt, spec, {})
    # The RPC layer sends the wrapped NoValidHost to the caller.
    cause = err.value.exc_info[1]
    assert isinstance(cause, exception.NoValidHost)
    assert "RamFilter removed 1" in cause.message
    assert _claimed("c1") == 0  # the first two claims were given back

    spec = boot_request(memory_mb=1024, count=2)
    dests = manager.select_destinations(ctxt, spec, {})
    assert [d["host"] for d in dests] == ["c1", "c1"]
    assert set(dests[0]) == {"host", "nodename", "limits"}
    assert _claimed("c1") == 2048


def test_select_destinations_with_alternates(manager, ctxt):
    CONF.set_override("max_attempts", 3, group="scheduler")
    for n, ram in (("c1", 8192), ("c2", 4096), ("c3", 2048), ("c4", 1024)):
        manager.compute_node_update(ctxt, compute_report(n, memory_mb=ram))
    spec = boot_request(memory_mb=512)
    (choices,) = manager.select_destinations(ctxt, spec, {}, return_alternates=True)
    assert [c["host"] for c in choices] == ["c1", "c2", "c3"]
    assert _claimed("c1") == 512 and _claimed("c2") == 0


def test_explain_claims_nothing(manager, ctxt):
    manager.compute_node_update(ctxt, compute_report("c1", memory_mb=1024))
    manager.compute_node_update(ctxt, compute_report("c2", memory_mb=8192))
    out = manager.explain(ctxt, boot_request(memory_mb=2048), {})
    assert [h["host"] for h in out["hosts"]] == ["c2"]
    assert out["removed"]["RamFilter"] == [["c1", "c1"]]
    assert set(out["hosts"][0]["weights"]) >= {"RAMWeigher", "CPUWeigher", "DiskWeigher"}
    assert _claimed("c2") == 0


def test_a_single_survivor_is_not_weighed_as_in_nova(manager, ctxt):
    manager.compute_node_update(ctxt, compute_report("c1", memory_mb=1024))
    manager.compute_node_update(ctxt, compute_report("c2", memory_mb=8192))
    (alone,) = manager.explain(ctxt, boot_request(memory_mb=2048), {})["hosts"]
    assert alone["weight"] == 0.0
    assert set(alone["weights"].values()) == {0.0}
    # Two survivors are weighed: the one with more free RAM scores.
    best, other = manager.explain(ctxt, boot_request(memory_mb=512), {})["hosts"]
    assert best["host"] == "c2" and best["weight"] > other["weight"]
    assert best["weights"]["RAMWeigher"] == 1.0


def test_sync_instance_info_releases_old_unlisted_claims(manager, ctxt):
    CONF.set_override("scheduling_timeout", 1, group="scheduler")
    manager.compute_node_update(ctxt, compute_report("c1"))
    spec = boot_request(memory_mb=1000, count=2)
    _run(manager, ctxt, spec)
    keep, gone = spec["instance_uuids"]
    with db_api.session_scope() as s:
        s.execute(sa.update(models.Allocation).values(
            created_at=db_api.utcnow().replace(year=2000)))
    manager.sync_instance_info(ctxt, "c1", [keep, "unknown-1"])
    assert _claimed("c1") == 1000
    assert _instance("unknown-1").host == "c1"


def test_server_group_anti_affinity_spreads_one_request(manager, ctxt):
    for n in ("c1", "c2", "c3"):
        manager.compute_node_update(ctxt, compute_report(n, memory_mb=8192))
    spec = boot_request(count=3)
    spec["instance_group"] = {"uuid": "g1", "name": "web", "policy": "anti-affinity"}
    _run(manager, ctxt, spec)
    assert sorted(c["host"] for c in manager.cycle.compute_api.casts) == ["c1", "c2", "c3"]
    more = boot_request()
    more["instance_group"] = {"uuid": "g1", "policy": "anti-affinity"}
    _run(manager, ctxt, more)
    assert "ServerGroupAntiAffinityFilter removed 3" in _faults(
        more["instance_uuids"][0])[0]


def test_server_group_affinity_packs(manager, ctxt):
    for n in ("c1", "c2", "c3"):
        manager.compute_node_update(ctxt, compute_report(n, memory_mb=8192))
    spec = boot_request(count=3)
    spec["instance_group"] = {"uuid": "g2", "policy": "affinity"}
    _run(manager, ctxt, spec)
    assert len({c["host"] for c in manager.cycle.compute_api.casts}) == 1


def test_failed_cast_fails_only_that_instance_and_frees_its_claim(manager, ctxt):
    manager.compute_node_update(ctxt, compute_report("c1"))
    calls = []

    def flaky_cast(ctxt_, **kwargs):
        calls.append(kwargs["instance"]["uuid"])
        if len(calls) == 2:
            raise ConnectionError("broker went away")
        manager.cycle.compute_api.casts.append(kwargs)

    manager.cycle.compute_api.run_instance = flaky_cast
    spec = boot_request(memory_mb=1000, count=3)
    _run(manager, ctxt, spec)
    first, second, third = spec["instance_uuids"]
    assert [_instance(u).vm_state for u in (first, second, third)] == [
        "building", "error", "building"]
    assert "ConnectionError: broker went away" in _faults(second)[0]
    assert _instance(second).host is None
    assert _claimed("c1") == 2000
    assert _events(second)[0][2] == "Error"


def test_explain_sees_a_known_groups_policy_without_recording(manager, ctxt):
    for n in ("c1", "c2"):
        manager.compute_node_update(ctxt, compute_report(n, memory_mb=8192))
    spec = boot_request()
    spec["instance_group"] = {"uuid": "g3", "policy": "anti-affinity"}
    _run(manager, ctxt, spec)
    placed_on = manager.cycle.compute_api.casts[-1]["host"]
    probe = boot_request()
    probe["instance_group"] = {"uuid": "g3"}
    out = manager.explain(ctxt, probe, {})
    assert out["removed"]["ServerGroupAntiAffinityFilter"] == [[placed_on, placed_on]]
    from nova_sched.db import instance_groups
    assert instance_groups.member_hosts("g3") == {placed_on: 1}  # probe not recorded


def test_every_instance_of_a_request_honours_the_zone(manager, ctxt):
    from nova_sched.db import aggregates

    for n in ("c1", "c2", "c3"):
        manager.compute_node_update(ctxt, compute_report(n, memory_mb=8192))
    aggregates.create("rack1", zone="az1")
    aggregates.add_host("rack1", "c1")
    manager.host_manager.refresh(force=True)
    spec = boot_request(count=3, az="az1")
    _run(manager, ctxt, spec)
    assert [c["host"] for c in manager.cycle.compute_api.casts] == ["c1", "c1", "c1"]


def test_anti_affinity_limit_counts_members_placed_in_the_same_request(manager, ctxt):
    for n in ("c1", "c2", "c3"):
        manager.compute_node_update(ctxt, compute_report(n, memory_mb=16384))
    group = {"uuid": "g4", "policy": "anti-affinity", "rules": {"max_server_per_host": 2}}
    spec = boot_request(count=7)
    spec["instance_group"] = group
    _run(manager, ctxt, spec)
    hosts = collections.Counter(c["host"] for c in manager.cycle.compute_api.casts)
    assert hosts == {"c1": 2, "c2": 2, "c3": 2}
    last = spec["instance_uuids"][-1]
    assert "ServerGroupAntiAffinityFilter removed 3" in _faults(last)[0]
