"""Rescheduling after failed builds, in a small cloud of its own.

The failing hosts run ``--fail-builds 1.0``. ``fail-big`` is the largest
node on every resource, so every weigher puts it first and a small request
lands there on its first attempt; its compute sends the request back
(``retry.exc``) and the second attempt must go elsewhere. ``fail-b`` and
``fail-c`` are small but have the most disk after ``fail-big``: a request
for more disk than the healthy hosts have can only go to the three failing
hosts, and must end in ERROR once ``max_attempts`` (3) is used up.

``force_hosts`` cannot steer these tests: like nova, the scheduler turns
retries off for a forced host.
"""

from __future__ import annotations

import json

import pytest

import cloudlib

pytestmark = pytest.mark.integration

# host -> (vcpus, memory_mb, local_gb, fail rate)
RETRY_COMPUTES = {
    "fail-big": (64, 65536, 2000, 1.0),
    "ok-1": (16, 16384, 200, 0.0),
    "ok-2": (16, 16384, 200, 0.0),
    "fail-b": (4, 4096, 600, 1.0),
    "fail-c": (4, 4096, 600, 1.0),
}


@pytest.fixture(scope="module")
def retry_cloud(rabbitmq, workdir):
    c = cloudlib.Cloud(workdir("retry_cloud"), "retry")
    try:
        c.db_sync()
        c.start_daemon()
        for host, (vcpus, ram, disk, fail) in RETRY_COMPUTES.items():
            c.start_compute(host, vcpus, ram, disk, fail_builds=fail)
        c.wait_for_nodes(list(RETRY_COMPUTES))
        yield c
    finally:
        codes = c.close()
    assert all(code == 0 for code in codes.values()), \
        f"processes that did not exit 0 on SIGTERM: {codes}"


def _schedule_results(cloud, uuid_):
    return [e["result"] for a in cloud.actions(uuid_) for e in a["events"]
            if e["event"] == "schedule"]


def test_failed_builds_are_rescheduled_to_other_hosts(retry_cloud):
    # Runs first: fail-big has no failed builds yet, so it weighs best and
    # both instances of this multi-create land there first. Each comes back
    # as Havana's compute sends it: instance_uuids narrowed to that one
    # instance, num_instances left at 2.
    spec, fprops, uuids = cloudlib.havana_request(cloudlib.named_flavor("m1.small"), 2)
    retry_cloud.client.run_instance(cloudlib.request_context(), spec, fprops,
                                    admin_password="retry-pw")
    rows = retry_cloud.wait_for_final(uuids, timeout=60)
    failing_log = retry_cloud.log_text("fail-big")
    for uuid_ in uuids:
        row = rows[uuid_]
        assert row["vm_state"] == "active", (row, retry_cloud.faults(uuid_))
        assert row["host"] in ("ok-1", "ok-2"), row
        # The first attempt went to fail-big, which sent it back.
        assert f"Build of instance {uuid_} failed on fail-big" in failing_log
        assert _schedule_results(retry_cloud, uuid_) == ["Success", "Success"]


def test_every_host_failing_ends_in_error(retry_cloud):
    big_disk = cloudlib.flavor("big-disk", memory_mb=512, vcpus=1, root_gb=500)
    spec, fprops, (uuid_,) = cloudlib.havana_request(big_disk)
    retry_cloud.client.run_instance(cloudlib.request_context(), spec, fprops)
    row = retry_cloud.wait_for_final([uuid_], timeout=60)[uuid_]
    assert row["vm_state"] == "error", row
    faults = retry_cloud.faults(uuid_)
    assert faults, "no instance_faults row"
    assert "Exceeded max scheduling attempts" in faults[-1]["message"], faults
    tried = [h for h in ("fail-big", "fail-b", "fail-c")
             if f"Build of instance {uuid_} failed" in retry_cloud.log_text(h)]
    assert sorted(tried) == ["fail-b", "fail-big", "fail-c"]
    for host in ("ok-1", "ok-2"):
        assert uuid_ not in retry_cloud.log_text(host)
    results = _schedule_results(retry_cloud, uuid_)
    assert results[-1] == "Error" and results.count("Success") == 3, results
    retry_cloud.assert_running()


def test_claims_on_failed_hosts_are_released(retry_cloud):
    # Runs last: every build on a failing host was sent back, so none of
    # them may still hold a claim (CONTRACT: a retry releases the claim).
    done = retry_cloud.run_manage("host", "list", "--json")
    assert done.returncode == 0, done.stderr
    hosts = {h["host"]: h for h in json.loads(done.stdout)}
    assert set(RETRY_COMPUTES) <= set(hosts)
    for name, (*_, fail) in RETRY_COMPUTES.items():
        entry = hosts[name]
        claimed = {k: v for k, v in entry.items() if k.startswith("claimed_")}
        if fail:
            assert entry["instances"] == 0, entry
            assert not any(claimed.values()), entry
    placed = sum(hosts[h]["instances"] for h in ("ok-1", "ok-2"))
    active = retry_cloud.query("SELECT COUNT(*) AS n FROM instances WHERE vm_state = 'active'")
    assert placed == active[0]["n"]
