"""A boot's cast recorded by the next boot's claim, its message kept until then.

On a consumer's worker (``topic_consumer.handling``) a new boot's cast is
not recorded in a transaction of its own: the record waits for the next
claim, or for the worker to find no request waiting, and the request's
message is let go only once the record is committed. These tests hand
boots to the manager as a worker does and check what the database and
the broker's acknowledgements see at each step.
"""

from __future__ import annotations

import logging

import oslo_messaging as messaging
import sqlalchemy as sa

from nova_sched import exception, rpc
from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.db import instances as db_instances
from nova_sched.db import models
from nova_sched.scheduler.manager import SchedulerManager
from nova_sched.scheduler.wire import request, topic_consumer
from tests.unit.scheduler.conftest import (RecordingComputeAPI, RecordingNotifier,
                                           boot_request, commits_of, compute_report)
from tests.unit.scheduler.conftest import claimed_memory as _claimed
from tests.unit.scheduler.conftest import instance_row as _instance


def _boot(manager, ctxt, spec, acks: list, name: str) -> None:
    """``spec`` handled as a consumer's worker handles a message; ``name``
    is appended to ``acks`` when the message is let go."""
    with topic_consumer.handling(lambda: acks.append(name)):
        manager.run_instance(ctxt, spec, "pw", [], None, True, {})


def _schedule_result(uuid):
    """The result of the instance's one ``schedule`` event (None: open)."""
    with db_api.session_scope() as s:
        (result,) = s.execute(
            sa.select(models.InstanceActionEvent.result)
            .join(models.InstanceAction,
                  models.InstanceActionEvent.action_id == models.InstanceAction.id)
            .where(models.InstanceAction.instance_uuid == uuid,
                   models.InstanceActionEvent.event == "schedule")).scalars().all()
    return result


def test_a_boots_cast_is_recorded_by_the_next_boots_claim(manager, ctxt):
    manager.compute_node_update(ctxt, compute_report("node-1", memory_mb=16384))
    first, second = boot_request(memory_mb=1024), boot_request(memory_mb=1024)
    uuid1, uuid2 = first["instance_uuids"][0], second["instance_uuids"][0]
    acks: list[str] = []

    # One write transaction per boot: each claim carries the previous record.
    assert commits_of(lambda: _boot(manager, ctxt, first, acks, "first")) == 1
    assert [c["instance"]["uuid"] for c in manager.cycle.compute_api.casts] == [uuid1]
    assert _instance(uuid1).host == "node-1" and _instance(uuid1).cast_at is None
    assert _schedule_result(uuid1) is None
    assert acks == []  # the broker still counts the message as held

    assert commits_of(lambda: _boot(manager, ctxt, second, acks, "second")) == 1
    assert _instance(uuid1).cast_at is not None
    assert _schedule_result(uuid1) == "Success"
    assert acks == ["first"]
    assert _instance(uuid2).cast_at is None

    # A worker that finds no request waiting writes what is held.
    assert commits_of(lambda: manager.write_held_casts(idle=True)) == 1
    assert _instance(uuid2).cast_at is not None
    assert _schedule_result(uuid2) == "Success"
    assert acks == ["first", "second"]
    assert commits_of(lambda: manager.write_held_casts(idle=True)) == 0


class _ConfirmedLater(RecordingComputeAPI):
    """Casts whose broker confirms are read only when waited for (as the
    RabbitMQ publisher's ``Pending``), each step noted in ``log``; a
    ``closed`` publisher cannot read them."""

    def __init__(self, log: list):
        super().__init__()
        self.log = log
        self.closed = False

    def run_instance(self, ctxt, **kwargs):
        super().run_instance(ctxt, **kwargs)
        uuid = kwargs["instance"]["uuid"]
        self.log.append(("cast", uuid))
        api = self

        class Pending:
            def wait(self):
                if api.closed:
                    raise messaging.MessageDeliveryFailure(
                        "run_instance not sent: the publisher is closed")
                api.log.append(("confirmed", uuid))

        return Pending()


def _noting_decisions(manager, log: list) -> None:
    decide = manager.cycle.decide

    def noted(spec, group, uuid):
        log.append(("decide", uuid))
        return decide(spec, group, uuid)

    manager.cycle.decide = noted


def test_a_held_casts_confirm_is_read_after_the_next_decision_before_its_record(
        manager, ctxt):
    """The request thread does not wait for the broker between two boots:
    the first cast's confirm is read once the second boot is decided, and
    only then is the first cast recorded and its message let go."""
    log: list = []
    manager.cycle.compute_api = _ConfirmedLater(log)
    _noting_decisions(manager, log)
    manager.compute_node_update(ctxt, compute_report("node-1", memory_mb=16384))
    first, second = boot_request(memory_mb=1024), boot_request(memory_mb=1024)
    uuid1, uuid2 = first["instance_uuids"][0], second["instance_uuids"][0]
    acks: list[str] = []

    _boot(manager, ctxt, first, acks, "first")
    assert log == [("decide", uuid1), ("cast", uuid1)]
    assert _instance(uuid1).cast_at is None and acks == []

    _boot(manager, ctxt, second, acks, "second")
    assert log == [("decide", uuid1), ("cast", uuid1), ("decide", uuid2),
                   ("confirmed", uuid1), ("cast", uuid2)]
    assert _instance(uuid1).cast_at is not None and acks == ["first"]

    manager.write_held_casts(idle=True)
    assert log[-1] == ("confirmed", uuid2)
    assert _instance(uuid2).cast_at is not None and acks == ["first", "second"]


def test_a_cast_whose_confirm_cannot_be_read_is_never_recorded(manager, ctxt, caplog):
    """A stopping daemon's publisher is closed before a held cast's confirm
    is read: the cast is not recorded and its message not let go, so that
    the broker delivers it again to a daemon that casts it to the same
    node; the next boot's claim goes on without it."""
    log: list = []
    api = manager.cycle.compute_api = _ConfirmedLater(log)
    manager.compute_node_update(ctxt, compute_report("node-1", memory_mb=16384))
    first, second = boot_request(memory_mb=1024), boot_request(memory_mb=1024)
    uuid1, uuid2 = first["instance_uuids"][0], second["instance_uuids"][0]
    acks: list[str] = []
    _boot(manager, ctxt, first, acks, "first")
    api.closed = True
    with caplog.at_level(logging.WARNING):
        _boot(manager, ctxt, second, acks, "second")
        manager.write_held_casts()
    assert _instance(uuid2).host == "node-1"      # the second boot was placed
    assert _instance(uuid1).cast_at is None and _instance(uuid2).cast_at is None
    assert acks == []
    assert manager.cycle.casts.holds(uuid1) and manager.cycle.casts.holds(uuid2)
    assert any(uuid1 in r.getMessage() and "publisher is closed" in r.getMessage()
               for r in caplog.records)


def test_a_direct_call_records_its_cast_at_once(manager, ctxt):
    """Outside a consumer's worker nothing could keep the message: the cast
    is recorded before run_instance returns."""
    log: list = []
    manager.cycle.compute_api = _ConfirmedLater(log)
    manager.compute_node_update(ctxt, compute_report("node-1", memory_mb=16384))
    spec = boot_request(memory_mb=1024)
    manager.run_instance(ctxt, spec, "pw", [], None, True, {})
    uuid = spec["instance_uuids"][0]
    assert log == [("cast", uuid), ("confirmed", uuid)]
    assert _instance(uuid).cast_at is not None


def test_held_casts_wait_out_a_database_outage(manager, ctxt, monkeypatch):
    manager.compute_node_update(ctxt, compute_report("node-1", memory_mb=16384))
    spec = boot_request(memory_mb=1024)
    uuid = spec["instance_uuids"][0]
    acks: list[str] = []
    _boot(manager, ctxt, spec, acks, "boot")
    real = db_instances.mark_casts

    def away(casts):
        raise exception.DatabaseUnavailable("mark_casts: OperationalError")

    monkeypatch.setattr(db_instances, "mark_casts", away)
    manager.write_held_casts()           # logged, not raised
    assert acks == [] and manager.cycle.casts.holds(uuid)
    assert _instance(uuid).cast_at is None

    monkeypatch.setattr(db_instances, "mark_casts", real)
    # Idle workers leave them alone for a moment after a failure...
    manager.write_held_casts(idle=True)
    assert acks == []
    # ...the periodic tasks do not.
    manager.write_held_casts()
    assert acks == ["boot"] and _instance(uuid).cast_at is not None


def test_a_boot_published_twice_leaves_the_held_record_written_once(manager, ctxt):
    """The copy's claim fails (its instance has rows): the records it
    carried are put back, and its general way writes them before it reads
    where the instance stands, so it finds it cast and leaves it."""
    manager.compute_node_update(ctxt, compute_report("node-1", memory_mb=16384))
    spec = boot_request(memory_mb=1024)
    uuid = spec["instance_uuids"][0]
    acks: list[str] = []
    _boot(manager, ctxt, spec, acks, "original")
    _boot(manager, ctxt, spec, acks, "copy")

    assert len(manager.cycle.compute_api.casts) == 1
    assert _instance(uuid).cast_at is not None
    assert _claimed("node-1") == 1024
    assert sorted(acks) == ["copy", "original"]
    assert not manager.cycle.casts.holds(uuid)


def test_a_daemon_dying_with_a_held_cast_leaves_the_instance_to_its_node(
        manager, ctxt):
    """The dead daemon's message comes back to another: it finds the
    instance claimed and not recorded as cast, and casts it to the node it
    holds (a compute node builds an instance once), not to the node a fresh
    decision would choose, and claims nothing more."""
    manager.compute_node_update(ctxt, compute_report("big", memory_mb=16384))
    manager.compute_node_update(ctxt, compute_report("small", memory_mb=4096))
    spec = boot_request(memory_mb=1024)
    uuid = spec["instance_uuids"][0]
    _boot(manager, ctxt, spec, [], "dies")
    (first,) = manager.cycle.compute_api.casts
    # The daemon dies here: its held record and its message with it.

    other = SchedulerManager(rpc.get_transport())
    other.cycle.compute_api = RecordingComputeAPI()
    other.notifier._notifier = RecordingNotifier()
    other.host_manager.full_resync()
    # "small" has grown meanwhile: a fresh decision would choose it now.
    other.compute_node_update(ctxt, compute_report("small", memory_mb=65536))
    best = other.cycle.explain(request.parse(spec, {}))["hosts"][0]["host"]
    assert (first["host"], best) == ("big", "small")
    acks: list[str] = []
    _boot(other, ctxt, spec, acks, "again")

    (again,) = other.cycle.compute_api.casts
    assert (again["host"], again["node"]) == (first["host"], first["node"])
    assert _claimed(first["host"]) == 1024
    assert _instance(uuid).cast_at is not None and acks == ["again"]


def test_a_message_held_twice_goes_when_both_let_it_go():
    acks: list[str] = []
    with topic_consumer.handling(lambda: acks.append("acked")):
        first, second = topic_consumer.defer_ack(), topic_consumer.defer_ack()
    assert acks == []
    first()
    first()  # a holder lets go once, however often it says so
    assert acks == []
    second()
    assert acks == ["acked"]
    with topic_consumer.handling(lambda: acks.append("at once")):
        pass
    assert acks == ["acked", "at once"]
    assert not topic_consumer.in_handler()


def test_the_stuck_instance_sweep_leaves_a_held_cast_alone(manager, ctxt):
    """An instance cast by this daemon whose record waits (the database was
    away) is not stuck: rescheduling it would cast it a second time."""
    manager.compute_node_update(ctxt, compute_report("node-1", memory_mb=16384))
    spec = boot_request(memory_mb=1024)
    uuid = spec["instance_uuids"][0]
    acks: list[str] = []
    _boot(manager, ctxt, spec, acks, "boot")
    CONF.set_override("scheduling_timeout", 60, group="scheduler")
    try:
        # Held far longer than the timeout.
        with db_api.session_scope() as s:
            s.execute(sa.update(models.Instance).values(
                updated_at=db_api.utcnow().replace(year=2000)))
        assert manager.recover_stuck() == []
        assert len(manager.cycle.compute_api.casts) == 1
        manager.write_held_casts()
        assert manager.recover_stuck() == [] and acks == ["boot"]
    finally:
        CONF.clear_override("scheduling_timeout", group="scheduler")
    row = _instance(uuid)
    assert row.cast_at is not None and row.vm_state == "building"
