"""The daemon's exits: refusing a bad configuration, stopping on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
import sqlalchemy

import cloudlib

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def bare_cloud(rabbitmq, workdir):
    """A private vhost and a synced database, no processes yet."""
    c = cloudlib.Cloud(workdir("lifecycle"), "life")
    try:
        c.db_sync()
        yield c
    finally:
        c.close()


def test_unknown_filter_exits_2_with_one_line(bare_cloud):
    bad = bare_cloud.write_config(
        bare_cloud.workdir / "bad-filter.conf",
        {"filter_scheduler": {"enabled_filters": "RetryFilter,RamFilter,NoSuchFilter"}})
    cmd = cloudlib.entry_point("nova_sched.cmd.scheduler", "--config-file", str(bad))
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                              env=cloudlib.subprocess_env(), stdin=subprocess.DEVNULL,
                              cwd=str(bare_cloud.workdir))
    except subprocess.TimeoutExpired:
        pytest.fail("the daemon started with an unknown filter (still running after 60 s)")
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "NoSuchFilter" in lines[0]
    assert "Traceback" not in done.stdout + done.stderr


def test_sigterm_exits_0(bare_cloud):
    daemon = bare_cloud.start_daemon("sigterm-daemon")
    # Ready means consuming: a report cast by the contract client is stored.
    report = {
        "host": "lonely", "hypervisor_hostname": "lonely", "vcpus": 4,
        "memory_mb": 4096, "local_gb": 40, "vcpus_used": 0, "memory_mb_used": 0,
        "local_gb_used": 0, "free_ram_mb": 4096, "free_disk_gb": 40,
        "disk_available_least": 40, "running_vms": 0, "current_workload": 0,
        "hypervisor_type": "kvm", "hypervisor_version": 6002000,
        "cpu_info": "{}", "host_ip": "127.0.0.2",
        "supported_instances": [["x86_64", "kvm", "hvm"]],
        "stats": {"num_instances": 0, "io_workload": 0}, "metrics": [],
    }
    # A cast sent before the daemon declared its queue is dropped by the
    # broker, so repeat it until the row shows up.
    def _stored():
        bare_cloud.assert_running()
        bare_cloud.client.compute_node_update(cloudlib.request_context(), report)
        time.sleep(0.5)
        try:
            return bare_cloud.query("SELECT id FROM compute_nodes WHERE host = 'lonely'")
        except sqlalchemy.exc.OperationalError:
            return None

    cloudlib.wait_until(_stored, 90, 0.5, "the daemon to store a report")
    # A request in hand while the signal arrives.
    spec, fprops, _ = cloudlib.havana_request(cloudlib.named_flavor("m1.tiny"), 3)
    bare_cloud.client.run_instance(cloudlib.request_context(), spec, fprops)
    daemon.send_signal(signal.SIGTERM)
    try:
        code = daemon.wait(30)
    except subprocess.TimeoutExpired:
        daemon.kill()
        pytest.fail("the daemon did not exit within 30 s of SIGTERM\n"
                    + bare_cloud.log_tails(["sigterm-daemon"]))
    assert code == 0, bare_cloud.log_tails(["sigterm-daemon"])
    assert "Traceback" not in bare_cloud.log_text("sigterm-daemon")


@pytest.fixture
def workers_cloud(rabbitmq, workdir):
    c = cloudlib.Cloud(workdir("workers"), "workers")
    try:
        c.db_sync()
        yield c
    finally:
        c.close()


def test_two_workers_share_the_topic_and_stop_cleanly(workers_cloud):
    """[scheduler] workers = 2: two processes consume, both place, both exit 0."""
    bare_cloud = workers_cloud
    config = bare_cloud.write_config(bare_cloud.workdir / "workers.conf",
                                     {"scheduler": {"workers": 2}})
    daemon = bare_cloud.start_daemon("workers-daemon", config_file=config)
    bare_cloud.start_compute("wk-1", 8, 16384, 200)
    bare_cloud.start_compute("wk-2", 8, 16384, 200)
    bare_cloud.wait_for_nodes(["wk-1", "wk-2"])
    uuids = []
    for _ in range(10):
        spec, fprops, batch = cloudlib.havana_request(cloudlib.named_flavor("m1.small"), 2)
        bare_cloud.client.run_instance(cloudlib.request_context(), spec, fprops)
        uuids += batch
    rows = bare_cloud.wait_for_final(uuids, timeout=90)
    assert all(r["vm_state"] == "active" for r in rows.values()), rows
    # Both worker processes took requests: their pids differ in the log.
    log = bare_cloud.log_text("workers-daemon")
    pids = {line.split()[2] for line in log.splitlines()
            if "scheduled to" in line and len(line.split()) > 2}
    assert len(pids) == 2, pids
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, bare_cloud.log_tails(["workers-daemon"])
