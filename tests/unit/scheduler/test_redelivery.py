"""A request delivered again continues where its dead daemon left off.

The consumer acknowledges a request only once it is handled, so the broker
delivers again whatever a killed daemon held. These tests replay the same
``run_instance`` against the states a daemon can die in: nothing recorded,
claimed but not cast, cast but not acknowledged, and a reschedule that was
already placed again.
"""

from __future__ import annotations

import copy
import dataclasses

import sqlalchemy as sa

from nova_sched.db import api as db_api
from nova_sched.db import instances as db_instances
from nova_sched.db import models
from nova_sched.scheduler.claims import Claim, Placement
from tests.unit.scheduler.conftest import boot_request, commits_of, compute_report
from tests.unit.scheduler.conftest import claimed_memory as _claimed
from tests.unit.scheduler.conftest import fault_messages as _faults
from tests.unit.scheduler.conftest import instance_row as _instance


def _run(manager, ctxt, spec, fprops=None):
    manager.run_instance(ctxt, spec, "pw", [], None, True,
                         fprops if fprops is not None else {})


def _allocations(uuid):
    with db_api.session_scope() as s:
        return s.execute(sa.select(models.Allocation.compute_node_id).where(
            models.Allocation.instance_uuid == uuid)).scalars().all()



def _schedule_events(uuid):
    with db_api.session_scope() as s:
        return s.execute(
            sa.select(models.InstanceActionEvent.result)
            .join(models.InstanceAction,
                  models.InstanceActionEvent.action_id == models.InstanceAction.id)
            .where(models.InstanceAction.instance_uuid == uuid,
                   models.InstanceActionEvent.event == "schedule")).scalars().all()


def _two_hosts(manager, ctxt):
    manager.compute_node_update(ctxt, compute_report("big", memory_mb=16384))
    manager.compute_node_update(ctxt, compute_report("small", memory_mb=4096))


def test_a_request_handled_once_is_not_handled_again(manager, ctxt):
    _two_hosts(manager, ctxt)
    spec = boot_request(memory_mb=1024, count=2)
    _run(manager, ctxt, spec)
    _run(manager, ctxt, copy.deepcopy(spec))  # the broker delivers it again

    casts = manager.cycle.compute_api.casts
    assert len(casts) == 2
    assert sorted(c["instance"]["uuid"] for c in casts) == sorted(spec["instance_uuids"])
    for uuid in spec["instance_uuids"]:
        assert len(_allocations(uuid)) == 1
        assert _schedule_events(uuid) == ["Success"]
    assert _claimed("big") + _claimed("small") == 2048


def _claimed_by_dead_daemon(manager, ctxt, spec, host: str) -> int:
    """What a daemon that died before casting the request's one instance
    left: the instance's row, its open event and its claim of 1024 MB on
    ``host``. The node's id."""
    uuid = spec["instance_uuids"][0]
    db_instances.ensure_instances([uuid], spec["instance_properties"])
    db_instances.start_events([uuid], db_instances.EventStart(
        "create", "schedule", ctxt.request_id, "u1", "p1", "dead-daemon"))
    node_id = manager.host_manager.node_id_of(host, host)
    manager.cycle.claims.claim(
        Claim(instance_uuid=uuid, node_id=node_id, memory_mb=1024, vcpus=1,
              disk_mb=1024, ratios={"ram": 1.5, "cpu": 16.0, "disk": 1.0}),
        Placement(host, host, 0))
    return node_id


def test_claimed_but_not_cast_is_cast_to_the_node_it_holds(manager, ctxt):
    _two_hosts(manager, ctxt)
    spec = boot_request(memory_mb=1024)
    uuid = spec["instance_uuids"][0]
    # The dead daemon recorded the instance, started its event and claimed
    # "small" (not the node a fresh decision would choose), then died.
    _claimed_by_dead_daemon(manager, ctxt, spec, "small")

    _run(manager, ctxt, spec)

    casts = manager.cycle.compute_api.casts
    assert [c["host"] for c in casts] == ["small"]
    assert casts[0]["filter_properties"]["limits"]["memory_mb"] == 4096 * 1.5
    assert len(_allocations(uuid)) == 1
    assert _claimed("small") == 1024 and _claimed("big") == 0
    # The open event is finished, not doubled.
    assert _schedule_events(uuid) == ["Success"]
    assert _instance(uuid).cast_at is not None


def test_cast_but_not_acknowledged_is_not_cast_again(manager, ctxt):
    _two_hosts(manager, ctxt)
    spec = boot_request(memory_mb=1024)
    uuid = spec["instance_uuids"][0]
    _run(manager, ctxt, spec)
    assert _instance(uuid).cast_at is not None
    # Died after the cast, before the event was finished and the message
    # acknowledged: reopen the event as it would have stood.
    with db_api.transaction() as conn:
        conn.execute(sa.update(models.InstanceActionEvent.__table__)
                     .values(finish_time=None, result=None))

    _run(manager, ctxt, spec)

    assert len(manager.cycle.compute_api.casts) == 1
    assert len(_allocations(uuid)) == 1


def test_a_reschedule_delivered_twice_places_the_instance_once(manager, ctxt):
    _two_hosts(manager, ctxt)
    spec = boot_request(memory_mb=1024)
    uuid = spec["instance_uuids"][0]
    _run(manager, ctxt, spec)
    first = manager.cycle.compute_api.casts[-1]
    assert first["host"] == "big"

    fprops = copy.deepcopy(first["filter_properties"])
    fprops["retry"]["exc"] = "BuildAbortException: disk on fire"
    _run(manager, ctxt, first["request_spec"], copy.deepcopy(fprops))
    _run(manager, ctxt, first["request_spec"], copy.deepcopy(fprops))  # again

    hosts = [c["host"] for c in manager.cycle.compute_api.casts]
    assert hosts == ["big", "small"]
    assert _instance(uuid).host == "small"
    assert _claimed("big") == 0 and _claimed("small") == 1024
    assert len(_allocations(uuid)) == 1


def test_an_instance_in_error_is_left_alone(manager, ctxt):
    _two_hosts(manager, ctxt)
    spec = boot_request(memory_mb=1024)
    uuid = spec["instance_uuids"][0]
    db_instances.ensure_instances([uuid], spec["instance_properties"])
    db_instances.mark_error(uuid, "failed before")

    _run(manager, ctxt, spec)

    assert manager.cycle.compute_api.casts == []
    assert _allocations(uuid) == []


def test_a_cast_the_database_missed_is_recorded_not_sent_again(manager, ctxt,
                                                                monkeypatch):
    from nova_sched import exception

    _two_hosts(manager, ctxt)
    spec = boot_request(memory_mb=1024)
    uuid = spec["instance_uuids"][0]
    real = db_instances.mark_cast

    def gone(*args, **kwargs):
        raise exception.DatabaseUnavailable("mark_cast: OperationalError")

    # The cast goes out, then the database is gone before it is recorded:
    # the request is parked, its claim kept where it was cast.
    monkeypatch.setattr(db_instances, "mark_cast", gone)
    _run(manager, ctxt, spec)
    assert len(manager.parked) == 1
    assert [c["host"] for c in manager.cycle.compute_api.casts] == ["big"]
    assert _instance(uuid).host == "big" and _claimed("big") == 1024

    monkeypatch.setattr(db_instances, "mark_cast", real)
    assert manager.resume_parked() == 1
    assert [c["host"] for c in manager.cycle.compute_api.casts] == ["big"]
    assert _instance(uuid).cast_at is not None
    assert len(_allocations(uuid)) == 1 and _claimed("big") == 1024
    assert _schedule_events(uuid) == ["Success"]


def test_a_request_published_twice_and_handled_at_once_is_placed_once(manager, ctxt):
    """A publisher whose confirm was lost in a broker failover sends the
    request again; two handlers take the copies at once, both read the
    instance unplaced. The one recording its placement second backs off:
    no second claim, no cast elsewhere."""
    from nova_sched.scheduler.wire import request
    from nova_sched.scheduler.decision.cycle import BootArgs

    _two_hosts(manager, ctxt)
    spec = boot_request(memory_mb=1024)
    uuid = spec["instance_uuids"][0]
    _run(manager, ctxt, spec)
    (first,) = manager.cycle.compute_api.casts
    # The second handler decided from what it read before the first placed
    # the instance: nothing standing.
    parsed = request.parse(copy.deepcopy(spec), {})
    boot = BootArgs(None, [], None, True)
    (outcome,) = list(manager.cycle.schedule(ctxt, parsed, boot, standing={}))

    assert outcome.error is None and not outcome.selections
    assert manager.cycle.compute_api.casts == [first], "cast once, to one node"
    assert len(_allocations(uuid)) == 1
    assert _instance(uuid).host == first["host"]
    assert _claimed("big") + _claimed("small") == 1024


def test_a_poison_request_given_up_fails_its_unplaced_instances(manager, ctxt):
    _two_hosts(manager, ctxt)
    placed = boot_request(memory_mb=1024)
    _run(manager, ctxt, placed)
    spec = boot_request(memory_mb=1024, count=2)
    # One of the poison request's instances was placed before a daemon died
    # on the other: it is left where it is.
    spec["instance_uuids"][0] = placed["instance_uuids"][0]
    reason = "Request given up: a scheduler daemon died each of the 5 times"

    manager.give_up(ctxt, {"request_spec": spec}, reason)

    kept, failed = spec["instance_uuids"]
    assert _instance(kept).vm_state != "error"
    assert _instance(failed).vm_state == "error"
    assert _faults(failed) == [reason]
    assert _schedule_events(failed) == ["Error"]
    assert len(manager.cycle.compute_api.casts) == 1


def test_a_redelivered_request_runs_alone():
    """_SoloGate: an alone() waits for the running shared() holders, and no
    shared() starts while an alone() waits or runs."""
    import threading
    import time

    from nova_sched.scheduler.wire.topic_consumer import _SoloGate

    gate = _SoloGate()
    log = []
    release_first = threading.Event()

    def ordinary(name, hold=None):
        with gate.shared():
            log.append(f"{name} start")
            if hold is not None:
                hold.wait(5)
            log.append(f"{name} end")

    def redelivered():
        with gate.alone():
            log.append("solo start")
            time.sleep(0.05)
            log.append("solo end")

    first = threading.Thread(target=ordinary, args=("first", release_first))
    first.start()
    while "first start" not in log:
        time.sleep(0.001)
    solo = threading.Thread(target=redelivered)
    solo.start()
    time.sleep(0.05)
    later = threading.Thread(target=ordinary, args=("later",))
    later.start()
    time.sleep(0.05)
    assert log == ["first start"], "solo waits for first; later waits for solo"
    release_first.set()
    for thread in (first, solo, later):
        thread.join(5)
    assert log == ["first start", "first end", "solo start", "solo end",
                   "later start", "later end"]


# -- a boot of one instance seen for the first time ---------------------------
def _commits(manager, ctxt, spec):
    """Run ``spec`` once; the write transactions it committed."""
    return commits_of(lambda: _run(manager, ctxt, spec))


def _actions(uuid):
    with db_api.session_scope() as s:
        return s.execute(sa.select(models.InstanceAction.action,
                                   models.InstanceAction.finish_time).where(
            models.InstanceAction.instance_uuid == uuid)).all()


def _start_notifications(manager):
    return [e for e in manager.notifier._notifier.events
            if e[1] == "scheduler.run_instance.start"]


def test_a_new_boot_is_recorded_by_its_claim(manager, ctxt):
    """Its row, stored request, action and event are written by the claim's
    transaction: two commits for the whole boot (claim, cast), where a
    request whose instance has a row takes three."""
    _two_hosts(manager, ctxt)
    spec = boot_request(memory_mb=1024)
    uuid = spec["instance_uuids"][0]

    assert _commits(manager, ctxt, spec) == 2

    (cast,) = manager.cycle.compute_api.casts
    row = _instance(uuid)
    assert (row.host, row.node, row.launch_index) == (cast["host"], cast["node"], 0)
    assert row.scheduled_at is not None and row.cast_at is not None
    assert row.vm_state == "building" and row.memory_mb == 1024
    assert db_instances.stored_request(uuid).request_spec["instance_uuids"] == [uuid]
    assert _schedule_events(uuid) == ["Success"]
    (action,) = _actions(uuid)
    assert action.action == "create" and action.finish_time is not None
    assert len(_allocations(uuid)) == 1 and _claimed(cast["host"]) == 1024

    # The same boot for an instance recorded before (the general way).
    again = boot_request(memory_mb=1024)
    db_instances.ensure_instances(again["instance_uuids"], again["instance_properties"])
    assert _commits(manager, ctxt, again) == 3


def test_a_new_boot_that_fits_nowhere_is_recorded_in_error(manager, ctxt):
    _two_hosts(manager, ctxt)
    spec = boot_request(memory_mb=65536)
    uuid = spec["instance_uuids"][0]

    _run(manager, ctxt, spec)

    assert manager.cycle.compute_api.casts == []
    assert _instance(uuid).vm_state == "error"
    (fault,) = _faults(uuid)
    assert "RamFilter removed 2" in fault
    assert _schedule_events(uuid) == ["Error"]
    assert db_instances.stored_request(uuid) is not None
    assert _allocations(uuid) == []


def test_a_new_boot_recorded_before_takes_the_general_way(manager, ctxt):
    """Taken as new, found recorded by its claim (resumed after the database
    went away, or published twice): nothing of that claim stays, it is placed
    once, and its start is announced once."""
    _two_hosts(manager, ctxt)
    spec = boot_request(memory_mb=1024)
    uuid = spec["instance_uuids"][0]
    db_instances.ensure_instances([uuid], spec["instance_properties"])

    _run(manager, ctxt, spec)

    (cast,) = manager.cycle.compute_api.casts
    assert _instance(uuid).host == cast["host"]
    assert len(_allocations(uuid)) == 1
    assert _claimed("big") + _claimed("small") == 1024
    assert _schedule_events(uuid) == ["Success"]
    assert len(_start_notifications(manager)) == 1


def test_a_copy_that_fits_nowhere_leaves_the_instance_its_twin_placed(manager, ctxt):
    """A request published twice: the first copy fills the only node; the
    second, taken as new, fits nowhere, and finds the instance placed when
    it records its failure. The instance keeps its place, no fault."""
    manager.compute_node_update(ctxt, compute_report("only", memory_mb=1024 + 512))
    spec = boot_request(memory_mb=1024)
    uuid = spec["instance_uuids"][0]

    _run(manager, ctxt, spec)
    _run(manager, ctxt, copy.deepcopy(spec))

    assert len(manager.cycle.compute_api.casts) == 1
    row = _instance(uuid)
    assert row.host == "only" and row.vm_state == "building"
    assert _faults(uuid) == []
    assert _schedule_events(uuid) == ["Success"]
    assert _claimed("only") == 1024


def test_a_new_boot_whose_claim_is_lost_and_then_fits_nowhere_is_in_error(manager, ctxt):
    """The claim that would have recorded it lost the node to another
    scheduler (its rows rolled back with it); deciding again finds nothing:
    the failure is recorded on rows written then."""
    # Room for one such instance (1.5 x 1024 MB), not two.
    manager.compute_node_update(ctxt, compute_report("only", memory_mb=1024))
    spec = boot_request(memory_mb=1024)
    uuid = spec["instance_uuids"][0]
    store = manager.cycle.claims
    real_claim = store.claim

    def another_scheduler_first(claim, placement=None):
        if claim.instance_uuid == uuid and _claimed("only") == 0:
            real_claim(dataclasses.replace(claim, instance_uuid="other-scheduler-vm"))
        return real_claim(claim, placement)

    store.claim = another_scheduler_first
    _run(manager, ctxt, spec)

    assert manager.cycle.compute_api.casts == []
    row = _instance(uuid)
    assert row is not None and row.vm_state == "error" and row.host is None
    (fault,) = _faults(uuid)
    assert "1 claims lost to concurrent schedulers" in fault
    assert _schedule_events(uuid) == ["Error"]
    assert _allocations(uuid) == []


def test_a_redelivered_boot_that_fits_nowhere_now_is_cast_to_the_node_it_holds(
        manager, ctxt):
    """The daemon that claimed the only node died before recording its cast;
    the request, delivered again, is taken as new and fits nowhere (its own
    claim fills the node). It must not be left for a handler that is gone,
    nor failed: it is cast to the node it holds (found by test_crash_safety:
    an instance cast by the dead daemon, then put in ERROR by the sweep)."""
    manager.compute_node_update(ctxt, compute_report("only", memory_mb=1024))
    spec = boot_request(memory_mb=1024)
    uuid = spec["instance_uuids"][0]
    node_id = _claimed_by_dead_daemon(manager, ctxt, spec, "only")
    manager.host_manager.refresh_node(node_id)

    _run(manager, ctxt, spec)

    assert [c["host"] for c in manager.cycle.compute_api.casts] == ["only"]
    row = _instance(uuid)
    assert row.host == "only" and row.vm_state == "building" and row.cast_at is not None
    assert _faults(uuid) == []
    assert _schedule_events(uuid) == ["Success"]
    assert _claimed("only") == 1024
