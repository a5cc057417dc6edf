"""Fixtures for scheduler tests that need a database and a manager."""

from __future__ import annotations

import uuid

import pytest

from nova_sched import rpc
from nova_sched.conf import CONF
from nova_sched.db import api as db_api


def compute_report(host: str, node: str | None = None, vcpus: int = 8,
                   memory_mb: int = 8192, local_gb: int = 100, **extra) -> dict:
    """A compute_node dict as CONTRACT section 3 describes it."""
    report = {
        "host": host, "hypervisor_hostname": node or host, "vcpus": vcpus,
        "memory_mb": memory_mb, "local_gb": local_gb, "vcpus_used": 0,
        "memory_mb_used": 0, "local_gb_used": 0, "free_ram_mb": memory_mb,
        "free_disk_gb": local_gb, "disk_available_least": local_gb,
        "running_vms": 0, "current_workload": 0, "hypervisor_type": "kvm",
        "hypervisor_version": 6000000, "cpu_info": "{}", "host_ip": "192.0.2.1",
        "supported_instances": [["x86_64", "kvm", "hvm"]], "stats": {},
        "metrics": [],
    }
    report.update(extra)
    return report


def boot_request(memory_mb=512, vcpus=1, root_gb=1, ephemeral_gb=0, swap=0,
                 count=1, az=None, uuids=None, **props) -> dict:
    """A Havana request_spec for ``count`` instances of one flavor."""
    uuids = uuids or [str(uuid.uuid4()) for _ in range(count)]
    flavor = {"name": "test", "flavorid": "t", "memory_mb": memory_mb,
              "vcpus": vcpus, "root_gb": root_gb, "ephemeral_gb": ephemeral_gb,
              "swap": swap, "extra_specs": {}, "rxtx_factor": 1.0,
              "is_public": True}
    instance_properties = {"uuid": uuids[0], "memory_mb": memory_mb, "vcpus": vcpus,
                           "root_gb": root_gb, "ephemeral_gb": ephemeral_gb,
                           "availability_zone": az, "project_id": "p1",
                           "user_id": "u1", "os_type": "linux",
                           "image_ref": "img-1", "instance_type_id": 1}
    instance_properties.update(props)
    return {"instance_properties": instance_properties, "instance_type": flavor,
            "image": {"id": "img-1", "properties": {}}, "instance_uuids": uuids,
            "num_instances": len(uuids), "block_device_mapping": [],
            "security_group": ["default"]}


def schedule_all(cycle, spec) -> list[tuple[str, object]]:
    """Each instance of ``spec`` through the scheduling cycle, as
    (instance uuid, its first selection); on an instance's error the ones
    placed before are released (so a test's cloud is as before) and the
    error raised."""
    placed = []
    for outcome in cycle.schedule(None, spec):
        if outcome.error is not None:
            cycle.release([o.instance_uuid for o in placed])
            raise outcome.error
        placed.append(outcome)
    return [(o.instance_uuid, o.selections[0]) for o in placed]


def instance_row(uuid: str):
    """The instances row of ``uuid``."""
    import sqlalchemy as sa

    from nova_sched.db import models

    with db_api.session_scope() as s:
        return s.execute(sa.select(models.Instance).where(
            models.Instance.uuid == uuid)).scalar_one()


def claimed_memory(host: str) -> int:
    """The MB of RAM claimed on the compute node of ``host``."""
    import sqlalchemy as sa

    from nova_sched.db import models

    with db_api.session_scope() as s:
        return s.execute(sa.select(models.ComputeNode.claimed_memory_mb).where(
            models.ComputeNode.host == host)).scalar_one()


def commits_of(func) -> int:
    """Run ``func``; the write transactions it committed."""
    import sqlalchemy as sa

    engine = db_api.get_engine()
    commits = []

    def count(_conn):
        commits.append(1)

    sa.event.listen(engine, "commit", count)
    try:
        func()
    finally:
        sa.event.remove(engine, "commit", count)
    return len(commits)


def fault_messages(uuid: str) -> list[str]:
    """The messages of the instance's faults, oldest first."""
    import sqlalchemy as sa

    from nova_sched.db import models

    with db_api.session_scope() as s:
        return s.execute(sa.select(models.InstanceFault.message).where(
            models.InstanceFault.instance_uuid == uuid)
            .order_by(models.InstanceFault.id)).scalars().all()


class RecordingComputeAPI:
    """Stands in for the compute RPC client: records every cast."""

    url = None  # no broker: nothing goes out along with a cast

    def __init__(self):
        self.casts: list[dict] = []

    def run_instance(self, ctxt, **kwargs):
        self.casts.append(kwargs)


class RecordingNotifier:
    def __init__(self):
        self.events: list[tuple[str, str, dict]] = []

    def info(self, ctxt, event_type, payload):
        self.events.append(("INFO", event_type, payload))

    def error(self, ctxt, event_type, payload):
        self.events.append(("ERROR", event_type, payload))


def place(driver, spec, instance_uuid):
    """Claim a node for one instance of ``spec`` as select_destinations does.

    Returns the chosen Selection; NoValidHost when nothing fits.
    """
    import dataclasses

    from nova_sched.scheduler.claims import DatabaseClaims
    from nova_sched.scheduler.decision.cycle import SchedulingCycle

    cycle = SchedulingCycle(driver, driver.host_manager, DatabaseClaims(),
                            compute_api=None, notifier=None)
    one = dataclasses.replace(spec, instance_uuids=[instance_uuid], num_instances=1)
    (outcome,) = cycle.schedule(None, one)
    if outcome.error is not None:
        raise outcome.error
    return outcome.selections[0]


def choose(driver, spec):
    """The node a decision would choose for ``spec``, claiming nothing."""
    from nova_sched.scheduler.decision.cycle_state import CycleState

    decision = driver.decide(CycleState(spec=spec))
    return decision.selection(0)


@pytest.fixture
def manager(db):
    """A SchedulerManager over the test database with recording doubles."""
    from nova_sched.scheduler.manager import SchedulerManager

    CONF.set_override("transport_url", "fake:")
    transport = rpc.get_transport()
    mgr = SchedulerManager(transport)
    mgr.cycle.compute_api = RecordingComputeAPI()
    mgr.notifier._notifier = RecordingNotifier()
    mgr.host_manager.full_resync()
    yield mgr
    transport.cleanup()


@pytest.fixture
def ctxt():
    return rpc.RequestContext.from_wire({"request_id": "req-test", "user_id": "u1",
                                         "project_id": "p1"})


@pytest.fixture
def memory_transport():
    """An RPC transport on kombu's in-memory broker, which CONF names as the
    transport URL (the daemon's own publishers read it there)."""
    CONF.set_override("transport_url", "kombu+memory:////")
    transport = rpc.get_transport()
    # No heartbeats on the in-memory transport (oslo warns about each); the
    # option exists once a transport has been made.
    CONF.set_override("heartbeat_timeout_threshold", 0, group="oslo_messaging_rabbit")
    try:
        yield transport
    finally:
        transport.cleanup()
        CONF.clear_override("transport_url")
