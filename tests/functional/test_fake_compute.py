"""nova-sched-fake-compute as a real process, with the test playing the scheduler.

No scheduler daemon and no database: a plain oslo.messaging RPC server on
the scheduler topic receives the node's reports and the run_instance casts
it sends back, and a plain client casts run_instance to ``compute.<host>``
at version 2.37 as the scheduler does.
"""

from __future__ import annotations

import queue
import signal
import uuid

import pytest

import cloudlib

pytestmark = pytest.mark.integration

REPORT_KEYS = {
    "host", "hypervisor_hostname", "vcpus", "memory_mb", "local_gb",
    "vcpus_used", "memory_mb_used", "local_gb_used", "free_ram_mb",
    "free_disk_gb", "disk_available_least", "running_vms", "current_workload",
    "hypervisor_type", "hypervisor_version", "cpu_info", "host_ip",
    "supported_instances", "stats", "metrics", "reserved_host_memory_mb",
    "reserved_host_disk_mb", "reserved_host_cpus",
}


class _SchedulerStandIn:
    """Records what reaches the scheduler topic."""

    def __init__(self, messaging):
        self.target = messaging.Target(namespace=None, version="2.10")
        self.reports: queue.Queue = queue.Queue()
        self.runs: queue.Queue = queue.Queue()

    def compute_node_update(self, ctxt, compute_node):
        self.reports.put(compute_node)

    def run_instance(self, ctxt, request_spec, admin_password, injected_files,
                     requested_networks, is_first_time, filter_properties,
                     legacy_bdm_in_spec=True):
        self.runs.put(dict(ctxt=ctxt, request_spec=request_spec,
                           admin_password=admin_password,
                           injected_files=injected_files,
                           requested_networks=requested_networks,
                           is_first_time=is_first_time,
                           filter_properties=filter_properties,
                           legacy_bdm_in_spec=legacy_bdm_in_spec))


@pytest.fixture(scope="module")
def bench(rabbitmq, workdir):
    import oslo_messaging as messaging

    cloud = cloudlib.Cloud(workdir("fake_compute"), "fakecpu")
    conf = cloudlib.client_conf(cloud.config_file)
    transport = messaging.get_rpc_transport(conf)
    standin = _SchedulerStandIn(messaging)
    server = messaging.get_rpc_server(
        transport, messaging.Target(topic=cloud.scheduler_topic, server="standin"),
        [standin], access_policy=messaging.DefaultRPCAccessPolicy)
    server.start()
    compute = messaging.get_rpc_client(
        transport, messaging.Target(topic=cloud.compute_topic, version="2.0"))
    cloud.start_compute("good-1", vcpus=8, memory_mb=8192, local_gb=100,
                        report_interval=0.5)
    cloud.start_compute("bad-1", vcpus=8, memory_mb=8192, local_gb=100,
                        fail_builds=1.0, report_interval=0.5)
    try:
        yield cloud, standin, compute
    finally:
        cloud.close()
        server.stop()
        server.wait()
        transport.cleanup()


def _next_report(standin, host, timeout=30, predicate=lambda r: True):
    import time

    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no matching report from {host}")
        try:
            report = standin.reports.get(timeout=left)
        except queue.Empty:
            continue
        if report["host"] == host and predicate(report):
            return report


def _cast_build(compute, host, uuid_, memory_mb=1024, vcpus=2, root_gb=10,
                retry=True, password="pw-never-logged"):
    itype = cloudlib.flavor("t", memory_mb, vcpus, root_gb)
    spec, fprops, _ = cloudlib.havana_request(itype, 3)
    spec["instance_uuids"][0] = uuid_
    spec["instance_properties"]["uuid"] = uuid_
    if retry:
        fprops["retry"] = {"num_attempts": 1, "hosts": [[host, host]]}
    fprops["limits"] = {"memory_mb": 8192 * 1.5, "disk_gb": 100.0, "vcpu": 128.0}
    instance = {"uuid": uuid_, "host": host, "node": host, "vm_state": "building",
                "task_state": "scheduling", "launch_index": 0,
                "memory_mb": memory_mb, "vcpus": vcpus, "root_gb": root_gb,
                "ephemeral_gb": 0, "project_id": "p1"}
    compute.prepare(server=host, version="2.37").cast(
        cloudlib.request_context(), "run_instance", instance=instance,
        request_spec=spec, filter_properties=fprops, requested_networks=None,
        injected_files=[["/etc/motd", "c2VjcmV0"]], admin_password=password,
        is_first_time=True, node=host, legacy_bdm_in_spec=True)
    return spec, fprops


def test_reports_at_start_with_every_contract_key(bench):
    cloud, standin, _ = bench
    report = _next_report(standin, "good-1")
    assert REPORT_KEYS <= set(report)
    assert report["hypervisor_hostname"] == "good-1"
    assert report["memory_mb"] == 8192 and report["vcpus"] == 8
    assert report["local_gb"] == 100
    assert report["supported_instances"] == [["x86_64", "kvm", "hvm"]]
    assert isinstance(report["hypervisor_version"], int)
    assert report["stats"]["num_instances"] == 0
    assert "io_workload" in report["stats"]
    assert report["metrics"] == []


def test_build_grows_reported_usage(bench):
    cloud, standin, compute = bench
    _cast_build(compute, "good-1", str(uuid.uuid4()))
    report = _next_report(standin, "good-1",
                          predicate=lambda r: r["running_vms"] >= 1)
    assert report["memory_mb_used"] >= 1024
    assert report["vcpus_used"] >= 2
    assert report["local_gb_used"] >= 10
    assert report["free_ram_mb"] == report["memory_mb"] - report["memory_mb_used"]
    assert report["stats"]["num_instances"] == report["running_vms"]
    assert standin.runs.empty(), "a good build must not come back"


def test_failed_build_is_sent_back_like_havana(bench):
    cloud, standin, compute = bench
    uuid_ = str(uuid.uuid4())
    _cast_build(compute, "bad-1", uuid_, password="pw-bad-host")
    back = standin.runs.get(timeout=30)
    assert back["request_spec"]["instance_uuids"] == [uuid_]
    # Havana leaves num_instances alone and narrows instance_uuids only.
    assert back["request_spec"]["num_instances"] == 3
    assert back["is_first_time"] is False
    assert back["admin_password"] == "pw-bad-host"
    assert back["injected_files"] == [["/etc/motd", "c2VjcmV0"]]
    assert back["legacy_bdm_in_spec"] is True
    retry = back["filter_properties"]["retry"]
    assert retry["hosts"] == [["bad-1", "bad-1"]]
    assert retry["num_attempts"] == 1
    assert "Simulated build failure" in retry["exc"]
    assert uuid_ in retry["exc"]
    # The failure shows in the node's stats (BuildFailureWeigher reads it).
    report = _next_report(standin, "bad-1",
                          predicate=lambda r: r["stats"]["failed_builds"] >= 1)
    assert report["running_vms"] == 0


def test_failed_build_without_retry_is_not_sent_back(bench):
    cloud, standin, compute = bench
    _cast_build(compute, "bad-1", str(uuid.uuid4()), retry=False)
    report = _next_report(standin, "bad-1",
                          predicate=lambda r: r["stats"]["failed_builds"] >= 2)
    assert report["running_vms"] == 0
    assert standin.runs.empty()


def test_build_beyond_the_limits_is_refused(bench):
    cloud, standin, compute = bench
    uuid_ = str(uuid.uuid4())
    _cast_build(compute, "good-1", uuid_, memory_mb=100000)
    back = standin.runs.get(timeout=30)
    assert back["request_spec"]["instance_uuids"] == [uuid_]
    assert "Insufficient compute resources" in back["filter_properties"]["retry"]["exc"]


def test_secrets_never_logged_and_sigterm_exits_zero(bench):
    cloud, standin, _ = bench
    for host in ("good-1", "bad-1"):
        assert cloud.stop(host, signal.SIGTERM) == 0, cloud.log_tails([host])
        text = cloud.log_text(host)
        assert "pw-never-logged" not in text and "pw-bad-host" not in text
        assert "c2VjcmV0" not in text
        assert ":guest@" not in text
        assert "Traceback" not in text, text
