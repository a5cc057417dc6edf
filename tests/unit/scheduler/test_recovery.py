"""Faults of the scheduler's own: stuck instances, a database that went away."""

from __future__ import annotations

import sqlalchemy as sa

from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.db import instances as db_instances
from nova_sched.db import models
from nova_sched.scheduler import claims, recovery
from tests.unit.scheduler.conftest import boot_request, compute_report


def test_stuck_instance_goes_to_error_and_partial_claim_is_released(manager, ctxt):
    CONF.set_override("scheduling_timeout", 60, group="scheduler")
    manager.compute_node_update(ctxt, compute_report("c1"))
    spec = boot_request(memory_mb=1024)
    uuid = spec["instance_uuids"][0]
    # A daemon recorded the instance and claimed, then died before placing it.
    db_instances.ensure_instances([uuid], spec["instance_properties"])
    node_id = manager.host_manager.table.state(0).node_id
    claims.claim(claims.Claim(uuid, node_id, 1024, 1, 1024))
    fresh = db_instances.find_stuck(db_api.utcnow())
    assert recovery.recover_stuck_instances(manager.driver) == []  # not yet old

    with db_api.session_scope() as s:
        s.execute(sa.update(models.Instance).values(
            updated_at=db_api.utcnow().replace(year=2000)))
    assert recovery.recover_stuck_instances(manager.driver) == [uuid]
    assert fresh == [uuid]
    row = db_instances.get(uuid)
    assert (row.vm_state, row.task_state) == ("error", None)
    with db_api.session_scope() as s:
        (fault,) = s.execute(sa.select(models.InstanceFault.message)).scalars().all()
        node = s.execute(sa.select(models.ComputeNode)).scalar_one()
    assert fault.startswith("Scheduling timed out")
    assert node.claimed_memory_mb == 0
    # A second daemon running the same recovery finds nothing to do.
    assert recovery.recover_stuck_instances(manager.driver) == []


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
    assert manager.compute_api.casts == []

    db_api.configure(good_url)
    spec = boot_request()
    manager.run_instance(ctxt, spec, "pw", [], None, True, {})
    assert manager.compute_api.casts[-1]["host"] == "c1"
