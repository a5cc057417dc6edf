"""A request delivered again continues where its dead daemon left off.

The consumer acknowledges a request only once it is handled, so the broker
delivers again whatever a killed daemon held. These tests replay the same
``run_instance`` against the states a daemon can die in: nothing recorded,
claimed but not cast, cast but not acknowledged, and a reschedule that was
already placed again.
"""

from __future__ import annotations

import copy

import sqlalchemy as sa

from nova_sched.db import api as db_api
from nova_sched.db import instances as db_instances
from nova_sched.db import models
from nova_sched.scheduler.claims import Claim, Placement
from tests.unit.scheduler.conftest import boot_request, compute_report
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


def test_claimed_but_not_cast_is_cast_to_the_node_it_holds(manager, ctxt):
    _two_hosts(manager, ctxt)
    spec = boot_request(memory_mb=1024)
    uuid = spec["instance_uuids"][0]
    # The dead daemon recorded the instance, started its event and claimed
    # "small" (not the node a fresh decision would choose), then died.
    db_instances.ensure_instances([uuid], spec["instance_properties"])
    db_instances.start_events([uuid], db_instances.EventStart(
        "create", "schedule", ctxt.request_id, "u1", "p1", "dead-daemon"))
    node_id = manager.host_manager.node_id_of("small", "small")
    manager.cycle.claims.claim(
        Claim(instance_uuid=uuid, node_id=node_id, memory_mb=1024, vcpus=1,
              disk_mb=1024, ratios={"ram": 1.5, "cpu": 16.0, "disk": 1.0}),
        Placement("small", "small", 0))

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
