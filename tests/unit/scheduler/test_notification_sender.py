"""NotificationSender: oslo.messaging's notification format, off the request's
thread, in order, and nothing dropped without a word."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import oslo_messaging as messaging
import pytest

from nova_sched import rpc
from nova_sched.conf import CONF
from nova_sched.scheduler.wire import notification_sender
from nova_sched.scheduler.wire.notifications import SchedulerNotifier

WAIT = 10


class _Collector:
    """An oslo.messaging notification listener's endpoint."""

    def __init__(self):
        self.events: list[tuple[str, str, str, dict, dict]] = []

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        self.events.append(("INFO", publisher_id, event_type, payload, ctxt))

    def error(self, ctxt, publisher_id, event_type, payload, metadata):
        self.events.append(("ERROR", publisher_id, event_type, payload, ctxt))


@pytest.fixture
def memory_broker(memory_transport):
    """A notification transport on kombu's in-memory broker."""
    transport = rpc.get_notification_transport()
    try:
        yield transport
    finally:
        transport.cleanup()


def _listen(transport, collector):
    listener = messaging.get_notification_listener(
        transport, [messaging.Target(topic="notifications")], [collector],
        executor="threading")
    listener.start()
    return listener


def _wait(predicate, what):
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_oslo_listeners_read_them_in_order_with_the_context(memory_broker):
    collector = _Collector()
    notifier = SchedulerNotifier(memory_broker, "sched-1")
    assert notifier._sender is not None, "RabbitMQ and kombu's memory broker use the sender"
    ctxt = rpc.RequestContext.from_wire({"request_id": "req-n1", "user_id": "u1",
                                         "project_id": "p1", "auth_token": "tok-secret"})
    spec = {"instance_uuids": [str(uuid.uuid4())], "admin_password": "pw-secret"}
    notifier.run_instance_start(ctxt, spec)
    notifier.run_instance_scheduled(ctxt, spec, "h1", 1.5, spec["instance_uuids"][0])
    notifier.run_instance_error(ctxt, spec, spec["instance_uuids"][0], "no host")
    notifier.run_instance_end(ctxt, spec)
    # Sent before any listener came: they waited in the notifications queue.
    listener = _listen(memory_broker, collector)
    try:
        _wait(lambda: len(collector.events) == 4, "four notifications")
    finally:
        listener.stop()
        listener.wait()
        notifier.stop()
    # One queue per priority (notifications.info, notifications.error), as
    # oslo's driver has them: in order within each.
    assert [e[2] for e in collector.events if e[0] == "INFO"] == [
        "scheduler.run_instance.start", "scheduler.run_instance.scheduled",
        "scheduler.run_instance.end"]
    assert [e[2] for e in collector.events if e[0] == "ERROR"] == ["scheduler.run_instance"]
    assert {e[1] for e in collector.events} == {"scheduler.sched-1"}
    scheduled = next(e[3] for e in collector.events
                     if e[2] == "scheduler.run_instance.scheduled")
    assert scheduled["weighted_host"] == {"host": "h1", "weight": 1.5}
    assert scheduled["request_spec"]["admin_password"] == "***"
    ctxt_seen = next(e[4] for e in collector.events
                     if e[2] == "scheduler.run_instance.start")
    assert ctxt_seen["request_id"] == "req-n1" and ctxt_seen["project_id"] == "p1"
    assert "tok-secret" not in repr(collector.events)


def test_the_request_does_not_wait_for_the_broker(memory_broker, monkeypatch):
    """A publish that waits (the broker confirming slowly, or away) holds the
    sender's thread, not the request's."""
    gate = threading.Event()
    sender = notification_sender.NotificationSender(
        memory_broker, "scheduler.t", rpc.ContextSerializer())
    real = sender._publisher.publish_many

    def slow_publish(messages):
        gate.wait(WAIT)
        real(messages)

    monkeypatch.setattr(sender._publisher, "publish_many", slow_publish)
    started = time.monotonic()
    for i in range(20):
        sender.info(None, f"test.{i}", {"i": i})
    assert time.monotonic() - started < 0.5
    assert sender.sent == 0
    gate.set()
    _wait(lambda: sender.sent == 20, "the queued notifications sent")
    sender.stop()


def test_a_failed_publish_is_logged_and_sent_again(memory_broker, monkeypatch, caplog):
    sender = notification_sender.NotificationSender(
        memory_broker, "scheduler.t", rpc.ContextSerializer())
    monkeypatch.setattr(sender._publisher.settings, "reconnect_delay", 0.01)
    real, failures = sender._publisher._write, []

    def flaky(waiting):
        if len(failures) < 2:
            failures.append(list(waiting))
            raise ConnectionError("broker away")
        return real(waiting)

    monkeypatch.setattr(sender._publisher, "_write", flaky)
    with caplog.at_level(logging.ERROR):
        sender.info(None, "test.flaky", {})
        _wait(lambda: sender.sent == 1, "the notification sent after two failures")
    sender.stop()
    assert len(failures) == 2
    assert sum("Publishing notification test.flaky failed" in r.getMessage()
               for r in caplog.records) == 2
    assert not any("was not sent" in r.getMessage() for r in caplog.records)


def test_what_the_broker_never_took_is_logged_at_stop(memory_broker, monkeypatch, caplog):
    sender = notification_sender.NotificationSender(
        memory_broker, "scheduler.t", rpc.ContextSerializer())
    monkeypatch.setattr(sender._publisher.settings, "reconnect_delay", 0.05)

    def away(waiting):
        raise ConnectionError("broker away")

    monkeypatch.setattr(sender._publisher, "_write", away)
    uuids = [str(uuid.uuid4()) for _ in range(3)]
    for u in uuids:
        sender.info(None, "scheduler.run_instance.scheduled", {"instance_id": u})
    with caplog.at_level(logging.ERROR):
        sender.stop(timeout=0.3)
    unsent = [r.getMessage() for r in caplog.records
              if "was not sent before the scheduler stopped" in r.getMessage()]
    assert len(unsent) == 3
    for u in uuids:
        assert any(u in line for line in unsent)
    # After stop, a late notification is refused with a word, not queued.
    with caplog.at_level(logging.ERROR):
        sender.info(None, "late.event", {"instance_id": "x"})
    assert any("late.event" in r.getMessage() and "stopping" in r.getMessage()
               for r in caplog.records)


def test_other_transports_keep_oslos_notifier():
    CONF.set_override("transport_url", "fake:")
    transport = rpc.get_notification_transport()
    try:
        notifier = SchedulerNotifier(transport, "sched-1")
        assert notifier._sender is None
        assert isinstance(notifier._notifier, messaging.Notifier)
    finally:
        transport.cleanup()
        CONF.clear_override("transport_url")


def test_scrub_masks_secrets_at_any_depth_and_copies():
    from nova_sched.scheduler.wire.notifications import scrub

    spec = {"instance_properties": {"admin_pass": "pw1", "Metadata": {"db_password": "pw2"},
                                    "memory_mb": 512, "name": "vm"},
            "block_device_mapping": [{"auth_token": "tk-9", "size": 1}, "plain", 3],
            "injected_files": [["/etc/motd", "pw3"], ("/x", "pw4")],
            "AdminPassword": "pw5", 7: {"secret_key": "pw6"}, "ok": None}
    clean = scrub(spec)
    assert not any(pw in repr(clean) for pw in ("pw1", "pw2", "pw3", "pw4", "pw5", "pw6",
                                                "tk-9"))
    assert clean["instance_properties"]["memory_mb"] == 512
    assert clean["block_device_mapping"][1:] == ["plain", 3]
    assert clean["injected_files"] == [["/etc/motd", "***"], ["/x", "***"]]
    assert clean[7] == {"secret_key": "***"} and clean["ok"] is None
    # A copy: the request keeps its values for the compute cast.
    assert spec["instance_properties"]["admin_pass"] == "pw1"


def test_scrub_masks_the_same_keys_every_time_it_sees_them():
    """Keys' kinds are remembered between calls: a secret stays masked on
    the second request that carries it, an ordinary key stays shown."""
    from nova_sched.scheduler.wire.notifications import scrub

    first = {"Admin_Pass": "pw1", "memory_mb": 1, "injected_files": [["/a", "x"]]}
    second = {"Admin_Pass": "pw2", "memory_mb": 2, "injected_files": [["/b", "y"]]}
    assert scrub(first) == {"Admin_Pass": "***", "memory_mb": 1,
                            "injected_files": [["/a", "***"]]}
    assert scrub(second) == {"Admin_Pass": "***", "memory_mb": 2,
                             "injected_files": [["/b", "***"]]}


def test_an_instances_scheduled_spec_is_its_own_copy_scrubbed(memory_broker):
    """The scheduled notification of each instance shows that instance's
    launch index, and no secret, though the parts it shares with the
    request's spec are scrubbed once for the request."""
    collector = _Collector()
    notifier = SchedulerNotifier(memory_broker, "sched-1")
    spec = {"instance_uuids": ["u-0", "u-1"], "admin_password": "pw-secret",
            "instance_properties": {"launch_index": 0, "admin_pass": "pw-2", "name": "vm"},
            "instance_type": {"memory_mb": 512}}
    notifier.run_instance_start(None, spec)
    for index in (0, 1):
        copy = dict(spec, instance_properties=dict(spec["instance_properties"],
                                                   launch_index=index))
        notifier.run_instance_scheduled(None, copy, "h1", 1.0, f"u-{index}", base=spec)
    listener = _listen(memory_broker, collector)

    def scheduled():
        # Other tests' notifications may wait in the same in-memory queue.
        return [e[3] for e in collector.events
                if e[2] == "scheduler.run_instance.scheduled"
                and e[3].get("instance_id") in ("u-0", "u-1")]
    try:
        _wait(lambda: len(scheduled()) == 2, "two scheduled notifications")
    finally:
        listener.stop()
        listener.wait()
        notifier.stop()
    scheduled = scheduled()
    assert [p["request_spec"]["instance_properties"]["launch_index"]
            for p in scheduled] == [0, 1]
    assert "pw-secret" not in repr(collector.events) and "pw-2" not in repr(collector.events)
    assert all(p["request_spec"]["instance_type"] == {"memory_mb": 512} for p in scheduled)
    # The request's own spec is left as it came.
    assert spec["admin_password"] == "pw-secret"
    assert spec["instance_properties"]["launch_index"] == 0


def test_held_notifications_keep_their_order_whether_taken_or_not(memory_broker):
    """A request's notifications held for a publish: those it takes go
    with it, those left at the end are queued; after a publish that took
    some failed they are queued again and nothing more is held. A
    listener sees each once, in order."""
    collector = _Collector()
    notifier = SchedulerNotifier(memory_broker, "sched-1")
    sender = notifier._sender
    sent, failed = {"instance_uuids": ["sent-0"]}, {"instance_uuids": ["failed-0"]}
    with notifier.holding(sender.url):
        notifier.run_instance_start(None, sent)
        notifier.run_instance_scheduled(None, sent, "h1", 1.0, "sent-0")
        assert sender._queue.empty(), "held, not queued"
        with notifier.taken() as along:
            assert [m.routing_key for m in along.before] == ["notifications.info"] * 2
            assert all(m.declare_queue for m in along.before)
            assert along.after == [] and not along.ends
            sender._publisher.publish_many(along.before)  # as the compute cast does
        notifier.run_instance_end(None, sent)
        assert sender._queue.empty()
    with notifier.holding(sender.url):
        notifier.run_instance_start(None, failed)
        notifier.run_instance_scheduled(None, failed, "h1", 1.0, "failed-0")
        with pytest.raises(ConnectionError):
            with notifier.taken() as along:
                raise ConnectionError("the cast could not be sent")
        notifier.run_instance_scheduled(None, failed, "h2", 1.0, "failed-1")
        with notifier.taken() as along:
            assert along.before == [], "held no more: it would overtake the queued"
        notifier.run_instance_end(None, failed)
    listener = _listen(memory_broker, collector)

    def seen(spec):
        return [(e[2].rsplit(".", 1)[-1], e[3].get("instance_id"))
                for e in collector.events if e[3].get("request_spec") == spec]
    try:
        _wait(lambda: len(seen(sent)) == 3 and len(seen(failed)) == 4,
              "seven notifications")
        time.sleep(0.2)  # nothing more comes
    finally:
        listener.stop()
        listener.wait()
        notifier.stop()
    assert seen(sent) == [("start", None), ("scheduled", "sent-0"), ("end", None)]
    assert seen(failed) == [("start", None), ("scheduled", "failed-0"),
                            ("scheduled", "failed-1"), ("end", None)]


def test_the_end_goes_with_the_last_publish_or_is_left_to_the_caller(memory_broker):
    """Asked for with a request's last publish, its end notification goes
    after it in the batch, once; if that publish fails the end is dropped
    (the caller emits it after its error), so a listener still sees each
    notification once, in order."""
    collector = _Collector()
    notifier = SchedulerNotifier(memory_broker, "sched-1")
    sender = notifier._sender
    ok = {"instance_uuids": ["end-ok-0"], "admin_password": "pw-end"}
    failed = {"instance_uuids": ["end-failed-0"]}
    with notifier.holding(sender.url):
        notifier.run_instance_start(None, ok)
        notifier.run_instance_scheduled(None, ok, "h1", 1.0, "end-ok-0")
        with notifier.taken((None, ok)) as along:
            assert along.ends
            assert [m.routing_key for m in along.after] == ["notifications.info"]
            # As the compute cast does: held ones, the cast, then the end.
            sender._publisher.publish_many(along.before + along.after)
        assert sender._queue.empty(), "nothing left for the notification thread"
    with notifier.holding(sender.url):
        notifier.run_instance_start(None, failed)
        with pytest.raises(ConnectionError):
            with notifier.taken((None, failed)) as along:
                assert along.ends
                raise ConnectionError("the cast could not be sent")
        notifier.run_instance_error(None, failed, "end-failed-0", "no cast")
        notifier.run_instance_end(None, failed)
    listener = _listen(memory_broker, collector)

    def seen(uuid):
        return [(e[2].rsplit(".", 1)[-1], e[3].get("instance_id"))
                for e in collector.events
                if (e[3].get("request_spec") or {}).get("instance_uuids") == [uuid]]
    try:
        _wait(lambda: len(seen("end-ok-0")) == 3 and len(seen("end-failed-0")) == 3,
              "six notifications")
        time.sleep(0.2)  # nothing more comes
    finally:
        listener.stop()
        listener.wait()
        notifier.stop()
    assert seen("end-ok-0") == [("start", None), ("scheduled", "end-ok-0"),
                                ("end", None)]
    # The error goes to notifications.error, a queue of its own: its order
    # against the others is the listener's.
    failures = seen("end-failed-0")
    assert [e for e in failures if e[0] != "run_instance"] == [("start", None),
                                                               ("end", None)]
    assert failures.count(("run_instance", "end-failed-0")) == 1
    assert "pw-end" not in repr(collector.events)


def test_another_broker_for_notifications_holds_nothing(memory_broker):
    notifier = SchedulerNotifier(memory_broker, "sched-1")
    other = messaging.TransportURL.parse(CONF, "rabbit://guest:guest@192.0.2.9:5672/")
    try:
        with notifier.holding(other):
            notifier.run_instance_start(None, {"instance_uuids": ["u-9"]})
            with notifier.taken((None, {"instance_uuids": ["u-9"]})) as along:
                assert along.before == [] and along.after == [] and not along.ends
    finally:
        notifier.stop()


def test_a_boots_notifications_go_out_with_its_cast(db, memory_transport, ctxt,
                                                    monkeypatch):
    """With the notification thread stuck, a boot's start, scheduled and
    end notifications still reach listeners, with the compute cast (its
    publish is confirmed before the cast is recorded, so a daemon killed
    after that cannot lose them), each once."""
    from nova_sched.scheduler.manager import SchedulerManager
    from tests.unit.scheduler.conftest import boot_request, compute_report
    from tests.unit.scheduler.test_publisher import _Compute, _serve

    manager = SchedulerManager(memory_transport)
    sender = manager.notifier._sender
    gate = threading.Event()
    real = sender._publisher.publish_many

    def stuck(messages):
        gate.wait(WAIT)
        real(messages)

    monkeypatch.setattr(sender._publisher, "publish_many", stuck)
    compute, collector = _Compute(), _Collector()
    server = _serve(memory_transport, compute, "c1")
    listener = _listen(rpc.get_notification_transport(), collector)
    manager.compute_node_update(ctxt, compute_report("c1", memory_mb=4096))
    spec = boot_request(memory_mb=512)
    uuid_ = spec["instance_uuids"][0]

    def mine():
        return [e[2] for e in collector.events
                if e[3].get("request_spec", {}).get("instance_uuids") == [uuid_]]
    try:
        manager.run_instance(ctxt, spec, "pw-s3cret", [], None, True, {})
        assert compute.arrived.wait(WAIT)
        _wait(lambda: len(mine()) == 3, "start, scheduled and end")
        gate.set()
        time.sleep(0.2)  # nothing more comes once the thread goes
    finally:
        gate.set()
        listener.stop()
        listener.wait()
        server.stop()
        server.wait()
        manager.stop_publishing()
    assert mine() == ["scheduler.run_instance.start", "scheduler.run_instance.scheduled",
                      "scheduler.run_instance.end"]
    assert "pw-s3cret" not in repr(collector.events)


def test_a_request_whose_last_instance_fails_ends_after_its_error(
        db, memory_transport, ctxt):
    """Two instances, room for one: the first goes with its cast, the
    second fails; the request's end comes once, after the failure (not
    with the first instance's cast, which was not the request's last)."""
    from nova_sched.scheduler.manager import SchedulerManager
    from tests.unit.scheduler.conftest import boot_request, compute_report
    from tests.unit.scheduler.test_publisher import _Compute, _serve

    manager = SchedulerManager(memory_transport)
    compute, collector = _Compute(), _Collector()
    server = _serve(memory_transport, compute, "c1")
    listener = _listen(rpc.get_notification_transport(), collector)
    manager.compute_node_update(ctxt, compute_report("c1", memory_mb=4096))
    spec = boot_request(memory_mb=4096, count=2)  # ratio 1.5: room for one
    uuids = spec["instance_uuids"]

    def mine():
        return [(e[2], e[3].get("instance_id")) for e in collector.events
                if (e[3].get("request_spec") or {}).get("instance_uuids") == uuids]
    try:
        manager.run_instance(ctxt, spec, None, [], None, True, {})
        assert compute.arrived.wait(WAIT)
        _wait(lambda: len(mine()) == 4, "start, scheduled, error and end")
        time.sleep(0.2)  # nothing more comes
    finally:
        listener.stop()
        listener.wait()
        server.stop()
        server.wait()
        manager.stop_publishing()
    seen = mine()
    info = [e for e in seen if e[0] != "scheduler.run_instance"]
    assert info == [("scheduler.run_instance.start", None),
                    ("scheduler.run_instance.scheduled", uuids[0]),
                    ("scheduler.run_instance.end", None)]
    assert seen.count(("scheduler.run_instance", uuids[1])) == 1
