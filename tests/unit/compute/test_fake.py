"""The simulated compute node: reports, builds, Havana's reschedule."""

from __future__ import annotations

import ast
import pathlib
import random

import pytest
import sqlalchemy as sa

from nova_sched.cmd import fake_compute
from nova_sched.compute import fake
from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.db import compute_nodes as db_nodes
from nova_sched.db import instances as db_instances
from nova_sched.db import models
from nova_sched.scheduler.cloud import compute_report
from tests.unit.scheduler.conftest import compute_report as node_report


class _Recorder:
    """Stands in for SchedulerAPI and the instance store."""

    def __init__(self):
        self.runs = []
        self.active = []
        self.errors = []

    def run_instance(self, ctxt, request_spec, admin_password, injected_files,
                     requested_networks, is_first_time, filter_properties,
                     legacy_bdm_in_spec=True):
        self.runs.append(dict(ctxt=ctxt, request_spec=request_spec,
                              admin_password=admin_password,
                              injected_files=injected_files,
                              requested_networks=requested_networks,
                              is_first_time=is_first_time,
                              filter_properties=filter_properties,
                              legacy_bdm_in_spec=legacy_bdm_in_spec))

    def mark_active(self, uuid, host, node):
        self.active.append((uuid, host, node))

    def mark_error(self, uuid, message):
        self.errors.append((uuid, message))


def _instance(uuid="u-1", host="h1", memory_mb=1024, vcpus=2, root_gb=10):
    return {"uuid": uuid, "host": host, "node": host, "vm_state": "building",
            "task_state": "scheduling", "memory_mb": memory_mb, "vcpus": vcpus,
            "root_gb": root_gb, "ephemeral_gb": 0, "project_id": "p1"}


def _spec(uuids=("u-1", "u-2")):
    return {"instance_uuids": list(uuids), "num_instances": len(uuids),
            "instance_properties": {"uuid": uuids[0], "os_type": "linux"},
            "instance_type": {"memory_mb": 1024, "vcpus": 2, "root_gb": 10}}


def _node(fail_rate=0.0, **kw):
    rec = _Recorder()
    node = fake.FakeComputeNode("h1", vcpus=8, memory_mb=8192, local_gb=100,
                                fail_rate=fail_rate, rng=random.Random(1),
                                instance_store=rec, scheduler_api=rec, **kw)
    return node, rec


def test_report_has_every_contract_key():
    node, _ = _node(reserved_host_memory_mb=512)
    report = node.report()
    for key in ("host", "hypervisor_hostname", "vcpus", "memory_mb", "local_gb",
                "vcpus_used", "memory_mb_used", "local_gb_used", "free_ram_mb",
                "free_disk_gb", "disk_available_least", "running_vms",
                "current_workload", "hypervisor_type", "hypervisor_version",
                "cpu_info", "host_ip", "supported_instances", "stats", "metrics",
                "reserved_host_memory_mb", "reserved_host_disk_mb",
                "reserved_host_cpus"):
        assert key in report, key
    assert report["hypervisor_hostname"] == "h1"
    assert report["memory_mb_used"] == 512  # the reservation, as nova counts it
    assert report["free_ram_mb"] == 8192 - 512
    assert report["supported_instances"] == [["x86_64", "kvm", "hvm"]]
    assert report["stats"]["num_instances"] == 0
    assert report["stats"]["io_workload"] == 0
    assert report["metrics"] == []


def test_build_records_the_instance_and_grows_usage():
    node, rec = _node()
    assert node.build(_instance(), _spec(), {}) == fake.ACTIVE
    report = node.report()
    assert report["running_vms"] == 1
    assert report["memory_mb_used"] == 1024
    assert report["vcpus_used"] == 2
    assert report["local_gb_used"] == 10
    assert report["stats"]["num_proj_p1"] == 1
    assert rec.active == [("u-1", "h1", "h1")]
    # A second delivery of the same cast is not counted twice.
    assert node.build(_instance(), _spec(), {}) == fake.ACTIVE
    assert node.report()["running_vms"] == 1


def test_sizes_fall_back_to_the_flavor():
    node, _ = _node()
    inst = {"uuid": "u-9", "host": "h1"}
    node.build(inst, _spec(), {})
    assert node.report()["memory_mb_used"] == 1024


def test_failure_with_retry_goes_back_like_havana():
    node, rec = _node(fail_rate=1.0)
    spec = _spec()
    fprops = {"retry": {"num_attempts": 1, "hosts": [["h1", "h1"]]}}
    outcome = node.build(_instance(), spec, fprops, context={"request_id": "r"},
                         admin_password="pw", injected_files=[["/f", "x"]],
                         requested_networks=None, legacy_bdm_in_spec=False)
    assert outcome == fake.RESCHEDULED
    (run,) = rec.runs
    assert run["ctxt"] == {"request_id": "r"}
    assert run["request_spec"]["instance_uuids"] == ["u-1"]
    assert run["request_spec"]["num_instances"] == 2  # Havana leaves it alone
    assert run["is_first_time"] is False
    assert run["admin_password"] == "pw"
    assert run["injected_files"] == [["/f", "x"]]
    assert run["legacy_bdm_in_spec"] is False
    assert "BuildFailed" in run["filter_properties"]["retry"]["exc"]
    assert rec.errors == [] and rec.active == []
    assert node.report()["stats"]["failed_builds"] == 1
    assert node.report()["running_vms"] == 0


def test_failure_without_retry_is_an_error():
    node, rec = _node(fail_rate=1.0)
    assert node.build(_instance(), _spec(), {}) == fake.ERROR
    assert rec.runs == []
    assert rec.errors and rec.errors[0][0] == "u-1"


def test_claim_against_limits_fails_the_build():
    node, rec = _node()
    fprops = {"retry": {"num_attempts": 1, "hosts": []},
              "limits": {"memory_mb": 1500.0}}
    node.build(_instance("a"), _spec(), dict(fprops))
    assert node.build(_instance("b"), _spec(), fprops) == fake.RESCHEDULED
    assert "Insufficient compute resources" in rec.runs[0]["filter_properties"]["retry"]["exc"]
    assert node.report()["running_vms"] == 1


def test_success_resets_failed_builds():
    node, _ = _node()
    node.failed_builds = 3
    node.build(_instance(), _spec(), {})
    assert node.report()["stats"]["failed_builds"] == 0


def test_fail_rate_is_a_probability():
    with pytest.raises(ValueError):
        fake.FakeComputeNode("h", fail_rate=1.5)
    node = fake.FakeComputeNode("h", fail_rate=0.5, rng=random.Random(7))
    outcomes = [node.build(_instance(str(i), "h", memory_mb=1), None, {})
                for i in range(200)]
    assert 60 < outcomes.count(fake.ERROR) < 140


def test_endpoint_dispatches_on_the_instance_host():
    rec = _Recorder()
    a = fake.FakeComputeNode("a", instance_store=rec)
    b = fake.FakeComputeNode("b", instance_store=rec)
    endpoint = fake.FakeComputeEndpoint({"a": a, "b": b}, rec)
    assert endpoint.target.version == "2.37"
    endpoint.run_instance({}, _instance("x", "b"), _spec(), {}, None, [], "pw",
                          True, node="b")
    endpoint.run_instance({}, _instance("y", "nowhere"), _spec(), {}, None, [],
                          "pw", True)
    assert set(b.instances) == {"x"} and not a.instances
    assert rec.active == [("x", "b", "b")]


def test_reporter_reports_at_start():
    class _Api:
        def __init__(self):
            self.reports = []

        def compute_node_update(self, ctxt, compute_node):
            self.reports.append(compute_node)

    api = _Api()
    nodes = [fake.FakeComputeNode("a"), fake.FakeComputeNode("b")]
    reporter = fake.NodeReporter(nodes, api, interval=60, context={})
    reporter.start()
    try:
        import time

        deadline = time.monotonic() + 5
        while len(api.reports) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        reporter.stop()
    assert {r["host"] for r in api.reports} == {"a", "b"}



# -- recording outcomes: instance rows only, behind an option ---------------

def _db_modules_imported(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name for name in names if name.startswith("nova_sched.db")}


def test_the_fake_compute_reaches_the_scheduler_only_through_rpc():
    assert _db_modules_imported(pathlib.Path(fake.__file__)) == set()
    # The process may record instance rows; it never touches claims.
    assert _db_modules_imported(pathlib.Path(fake_compute.__file__)) == {
        "nova_sched.db.instances"}


def test_outcomes_are_recorded_unless_the_option_is_off(db):
    assert CONF.fake_compute.record_instance_state is True  # today's behaviour
    assert isinstance(fake_compute._instance_store(),
                      fake_compute.DatabaseInstanceStore)
    CONF.set_override("record_instance_state", False, group="fake_compute")
    assert fake_compute._instance_store() is None


def test_outcomes_are_not_recorded_without_a_database(tmp_path):
    CONF.set_override("connection", f"sqlite:///{tmp_path}/missing.sqlite",
                      group="database")
    assert fake_compute._instance_store() is None
    CONF.set_override("connection", "sqlite://", group="database")
    assert fake_compute._instance_store() is None


def test_recorded_outcomes_touch_instance_rows_and_never_claims(db):
    node_id = db_nodes.upsert_report(compute_report.validate(node_report("h1")))
    db_instances.ensure_instances(["good", "bad"], {})
    store = fake_compute._instance_store()
    ok = fake.FakeComputeNode("h1", instance_store=store)
    broken = fake.FakeComputeNode("h1", fail_rate=1.0, instance_store=store)

    assert ok.build(_instance("good", "h1"), _spec(), {}) == fake.ACTIVE
    assert broken.build(_instance("bad", "h1"), _spec(), {}) == fake.ERROR

    good, bad = db_instances.get("good"), db_instances.get("bad")
    assert (good.vm_state, good.task_state, good.host, good.node) == (
        "active", None, "h1", "h1")
    assert bad.vm_state == "error"
    with db_api.session_scope() as session:
        faults = session.execute(sa.select(models.InstanceFault.message).where(
            models.InstanceFault.instance_uuid == "bad")).scalars().all()
        claims = session.execute(
            sa.select(sa.func.count()).select_from(models.Allocation)).scalar_one()
        claimed = session.execute(
            sa.select(models.ComputeNode.claimed_memory_mb,
                      models.ComputeNode.claimed_instances)
            .where(models.ComputeNode.id == node_id)).one()
    assert len(faults) == 1 and "Simulated build failure" in faults[0]
    assert claims == 0 and tuple(claimed) == (0, 0)
