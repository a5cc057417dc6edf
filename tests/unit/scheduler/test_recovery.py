"""Faults of the scheduler's own: stuck instances, a database that went away."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.db import instances as db_instances
from nova_sched.db import models
from nova_sched.scheduler import claims
from nova_sched.scheduler.wire import recovery
from tests.unit.scheduler.conftest import boot_request, compute_report


def test_stuck_instance_goes_to_error_and_partial_claim_is_released(manager, ctxt):
    CONF.set_override("scheduling_timeout", 60, group="scheduler")
    manager.compute_node_update(ctxt, compute_report("c1"))
    spec = boot_request(memory_mb=1024)
    uuid = spec["instance_uuids"][0]
    # A daemon recorded the instance and claimed, then died before placing it.
    db_instances.ensure_instances([uuid], spec["instance_properties"])
    node_id = manager.host_manager.table.state(0).node_id
    claims.DatabaseClaims().claim(claims.Claim(uuid, node_id, 1024, 1, 1024))
    fresh = db_instances.find_stuck(db_api.utcnow())
    assert recovery.recover_stuck_instances(manager.cycle) == []  # not yet old

    with db_api.session_scope() as s:
        s.execute(sa.update(models.Instance).values(
            updated_at=db_api.utcnow().replace(year=2000)))
    assert recovery.recover_stuck_instances(manager.cycle) == [uuid]
    assert fresh == [uuid]
    row = db_instances.get(uuid)
    assert (row.vm_state, row.task_state) == ("error", None)
    with db_api.session_scope() as s:
        (fault,) = s.execute(sa.select(models.InstanceFault.message)).scalars().all()
        node = s.execute(sa.select(models.ComputeNode)).scalar_one()
    assert fault.startswith("Scheduling timed out")
    assert node.claimed_memory_mb == 0
    # A second daemon running the same recovery finds nothing to do.
    assert recovery.recover_stuck_instances(manager.cycle) == []


def test_database_outage_is_logged_and_the_next_request_is_served(
        manager, ctxt, caplog, tmp_path):
    CONF.set_override("operation_retries", 1, group="database")
    manager.compute_node_update(ctxt, compute_report("c1"))
    good_url = CONF.database.connection
    db_api.configure(f"sqlite:///{tmp_path}/missing-dir/none.sqlite")
    spec = boot_request()
    manager.run_instance(ctxt, spec, "pw", [], None, True, {})
    assert "Database unavailable" in caplog.text
    assert spec["instance_uuids"][0] in caplog.text
    assert manager.cycle.compute_api.casts == []

    db_api.configure(good_url)
    spec = boot_request()
    manager.run_instance(ctxt, spec, "pw", [], None, True, {})
    assert manager.cycle.compute_api.casts[-1]["host"] == "c1"


def test_request_parked_during_outage_is_placed_when_the_database_returns(
        manager, ctxt, tmp_path):
    CONF.set_override("operation_retries", 0, group="database")
    manager.compute_node_update(ctxt, compute_report("c1"))
    good_url = CONF.database.connection
    db_api.configure(f"sqlite:///{tmp_path}/missing-dir/none.sqlite")
    spec = boot_request(count=2)
    manager.run_instance(ctxt, spec, "pw", [], None, True, {})
    assert len(manager.parked) == 1
    assert manager.resume_parked() == 0  # still down: kept for later
    assert len(manager.parked) == 1

    db_api.configure(good_url)
    assert manager.resume_parked() == 1
    assert len(manager.parked) == 0
    casts = manager.cycle.compute_api.casts
    assert sorted(c["instance"]["uuid"] for c in casts) == sorted(spec["instance_uuids"])
    assert casts[0]["admin_password"] == "pw"
    # A second resume finds nothing left to do: no instance is built twice.
    assert manager.resume_parked() == 0
    assert len(manager.cycle.compute_api.casts) == 2


def test_only_exposed_methods_are_callable_over_rpc(db):
    import oslo_messaging as messaging

    from nova_sched import rpc
    from nova_sched.scheduler.manager import SchedulerManager

    CONF.set_override("transport_url", "fake:")
    transport = rpc.get_transport()
    mgr = SchedulerManager(transport)
    mgr.host_manager.full_resync()
    server = rpc.get_server(transport, messaging.Target(topic="sched-test",
                                                        server="s1"), [mgr])
    server.start()
    try:
        client = rpc.get_client(transport, messaging.Target(topic="sched-test",
                                                            version="2.10"))
        reply = client.prepare(timeout=10).call({}, "explain",
                                                request_spec=boot_request(),
                                                filter_properties={})
        assert reply["hosts"] == []
        with pytest.raises(messaging.NoSuchMethod):
            client.prepare(timeout=10).call({}, "resume_parked")
    finally:
        server.stop()
        server.wait()
        transport.cleanup()


def _age_everything():
    with db_api.session_scope() as s:
        s.execute(sa.update(models.Instance).values(
            updated_at=db_api.utcnow().replace(year=2000)))


def _lose_the_request(manager, ctxt, spec, password, files):
    """What a daemon that died mid-request leaves: the instance recorded
    with its request, a claim, no cast (and a broker that lost the message)."""
    real = manager.cycle._cast

    def die(*args, **kwargs):
        raise SystemExit("daemon killed")

    manager.cycle._cast = die
    with pytest.raises(SystemExit):
        manager.run_instance(ctxt, spec, password, files, None, True, {})
    manager.cycle._cast = real


def test_a_stuck_instance_is_rescheduled_from_its_stored_request(manager, ctxt):
    CONF.set_override("scheduling_timeout", 60, group="scheduler")
    manager.compute_node_update(ctxt, compute_report("c1"))
    spec = boot_request(memory_mb=1024)
    uuid = spec["instance_uuids"][0]
    _lose_the_request(manager, ctxt, spec, None, [])
    assert db_instances.get(uuid).host == "c1"  # claimed, never cast
    assert manager.recover_stuck() == []  # not old yet

    _age_everything()
    assert manager.recover_stuck() == [uuid]
    (cast,) = manager.cycle.compute_api.casts
    assert cast["instance"]["uuid"] == uuid and cast["host"] == "c1"
    assert cast["admin_password"] is None and cast["injected_files"] == []
    row = db_instances.get(uuid)
    assert row.vm_state == "building" and row.cast_at is not None
    with db_api.session_scope() as s:
        node = s.execute(sa.select(models.ComputeNode)).scalar_one()
    assert node.claimed_memory_mb == 1024  # one claim, not two
    # Nothing is stuck any more, for this daemon or another.
    _age_everything()
    assert manager.recover_stuck() == []


def test_a_stuck_instance_whose_request_had_secrets_goes_to_error(manager, ctxt):
    CONF.set_override("scheduling_timeout", 60, group="scheduler")
    manager.compute_node_update(ctxt, compute_report("c1"))
    spec = boot_request(memory_mb=1024)
    uuid = spec["instance_uuids"][0]
    _lose_the_request(manager, ctxt, spec, "s3cret-pw", [["/etc/motd", "hi"]])
    with db_api.session_scope() as s:
        stored = s.execute(sa.select(models.InstanceRequest)).scalar_one()
    assert stored.needs_secrets
    assert "s3cret-pw" not in repr(vars(stored)) and "/etc/motd" not in repr(vars(stored))

    _age_everything()
    assert manager.recover_stuck() == [uuid]
    assert manager.cycle.compute_api.casts == []
    row = db_instances.get(uuid)
    assert row.vm_state == "error"
    with db_api.session_scope() as s:
        (fault,) = s.execute(sa.select(models.InstanceFault.message)).scalars().all()
        node = s.execute(sa.select(models.ComputeNode)).scalar_one()
    assert "scheduler died while placing the instance" in fault
    assert node.claimed_memory_mb == 0
