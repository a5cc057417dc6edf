"""``explain`` over the real RabbitMQ: the CLI and a plain oslo.messaging client.

A small cloud of its own (the session cloud is filled by test_cloud): four
fake computes of different sizes, one of them in an availability zone of
its own, the default filters and the three resource weighers, so that
which filter removes which host and the weighed order are known exactly:

- ``small-3`` (2048 MB) cannot take 4096 MB even at ratio 1.5: RamFilter;
- ``zoned-4`` is in zone ``zone-x``: AvailabilityZoneFilter removes it
  from requests for the default zone, and keeps only it for ``zone-x``;
- ``big-1`` has twice of everything ``mid-2`` has: it weighs first, with
  every weigher contributing its whole multiplier (1.0), and ``mid-2``
  half of it (nova's resource weighers scale from 0).
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

import cloudlib

pytestmark = pytest.mark.integration

# host -> (vcpus, memory_mb, local_gb)
EXPLAIN_COMPUTES = {
    "big-1": (16, 32768, 400),
    "mid-2": (8, 16384, 200),
    "small-3": (2, 2048, 40),
    "zoned-4": (8, 8192, 100),
}
WEIGHERS = ["RAMWeigher", "CPUWeigher", "DiskWeigher"]
FILTERS = ["RetryFilter", "AvailabilityZoneFilter", "RamFilter", "CoreFilter",
           "DiskFilter", "ComputeFilter"]


@pytest.fixture(scope="module")
def explain_cloud(rabbitmq, workdir):
    c = cloudlib.Cloud(workdir("explain_cloud"), "explain")
    try:
        c.write_config(c.config_file, {"filter_scheduler": {
            "enabled_filters": FILTERS, "weight_classes": WEIGHERS}})
        c.db_sync()
        c.start_daemon()
        for host, (vcpus, ram, disk) in EXPLAIN_COMPUTES.items():
            c.start_compute(host, vcpus, ram, disk)
        c.wait_for_nodes(list(EXPLAIN_COMPUTES))
        # Made while the daemon runs: it must see them without a restart.
        for args in (("aggregate", "create", "agg-x", "--zone", "zone-x"),
                     ("aggregate", "add-host", "agg-x", "zoned-4")):
            done = c.run_manage(*args)
            assert done.returncode == 0, done.stderr
        yield c
    finally:
        codes = c.close()
    assert all(code == 0 for code in codes.values()), \
        f"processes that did not exit 0 on SIGTERM: {codes}"


def _cli_explain(cloud, *args, config_file=None):
    cmd = cloudlib.entry_point(
        "nova_sched.cmd.manage", "--config-file",
        str(config_file or cloud.config_file), "explain", *args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env=cloudlib.subprocess_env(), cwd=str(cloud.workdir),
                          stdin=subprocess.DEVNULL)


def _rpc_explain(cloud, request_spec, filter_properties, timeout=30):
    """explain through a plain oslo.messaging client (CONTRACT section 3)."""
    cctxt = cloud.client.client.prepare(version="2.10", timeout=timeout)
    return cctxt.call(cloudlib.request_context(), "explain",
                      request_spec=request_spec, filter_properties=filter_properties)


def _claims(cloud) -> dict:
    """What ``host list --json`` says is claimed, per node."""
    done = cloud.run_manage("host", "list", "--json")
    assert done.returncode == 0, done.stderr
    return {(h["host"], h["node"]): (h["claimed_memory_mb"], h["claimed_vcpus"],
                                     h["claimed_disk_mb"], h["instances"])
            for h in json.loads(done.stdout)}


def _removed(reply) -> dict:
    return {name: sorted(h for h, _node in pairs)
            for name, pairs in reply["removed"].items()}


def _assert_weights_add_up(reply):
    for h in reply["hosts"]:
        assert list(h["weights"]) == WEIGHERS, h
        assert h["weight"] == pytest.approx(sum(h["weights"].values())), h
    totals = [h["weight"] for h in reply["hosts"]]
    assert totals == sorted(totals, reverse=True), totals


def test_cli_json_names_what_each_filter_removed_and_claims_nothing(explain_cloud):
    c = explain_cloud
    before = _claims(c)
    instances_before = c.query("SELECT count(*) AS n FROM instances")[0]["n"]

    done = _cli_explain(c, "--flavor", "4096,2,20", "--az", "nova", "--json")

    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    # Every filter that ran, in the order it ran, even when it removed none.
    assert list(reply["removed"]) == FILTERS
    assert _removed(reply) == {
        "RetryFilter": [], "AvailabilityZoneFilter": ["zoned-4"],
        "RamFilter": ["small-3"], "CoreFilter": [], "DiskFilter": [],
        "ComputeFilter": []}
    assert [(h["host"], h["nodename"]) for h in reply["hosts"]] == [
        ("big-1", "big-1"), ("mid-2", "mid-2")]
    _assert_weights_add_up(reply)
    assert reply["hosts"][0]["weights"] == {w: 1.0 for w in WEIGHERS}
    # nova's resource weighers scale from 0 (minval): half of big-1's.
    assert reply["hosts"][1]["weights"] == {w: 0.5 for w in WEIGHERS}
    assert reply["reason"] == ("2/4 hosts available: AvailabilityZoneFilter "
                               "removed 1, RamFilter removed 1")

    assert _claims(c) == before
    assert c.query("SELECT count(*) AS n FROM instances")[0]["n"] == instances_before
    assert c.query("SELECT count(*) AS n FROM allocations")[0]["n"] == sum(
        v[3] for v in before.values())


def test_cli_zone_keeps_only_the_zone(explain_cloud):
    done = _cli_explain(explain_cloud, "--flavor", "1024,1,10", "--az", "zone-x",
                        "--json")
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert _removed(reply)["AvailabilityZoneFilter"] == ["big-1", "mid-2", "small-3"]
    assert [h["host"] for h in reply["hosts"]] == ["zoned-4"]


def test_cli_text_output(explain_cloud):
    done = _cli_explain(explain_cloud, "--flavor", "4096,2,20", "--az", "nova")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Request: 4096 MB RAM, 2 vCPUs, 20 GB disk; zone nova"
    assert lines[1].startswith("2/4 hosts available")
    rows = {ln.split()[0]: ln.split()[1:] for ln in lines
            if ln.strip() and ln.split()[0] in FILTERS}
    assert rows["RamFilter"] == ["1", "small-3"]
    assert rows["AvailabilityZoneFilter"] == ["1", "zoned-4"]
    assert rows["CoreFilter"] == ["0"]
    ranked = [ln.split() for ln in lines if ln.split()[:1] in (["1"], ["2"])]
    assert [r[1] for r in ranked] == ["big-1", "mid-2"]


def test_plain_client_sees_claims_but_makes_none(explain_cloud):
    c = explain_cloud
    # Fill most of big-1's RAM through run_instance (a claim): explain
    # must see it in the RAM weigher's share.
    itype = cloudlib.flavor("ram-heavy", memory_mb=30000, vcpus=1, root_gb=1)
    spec, fprops, uuids = cloudlib.havana_request(itype)
    c.client.run_instance(cloudlib.request_context(), spec, fprops)
    row = c.wait_for_final(uuids)[uuids[0]]
    assert (row["vm_state"], row["host"]) == ("active", "big-1")
    before = _claims(c)
    assert before[("big-1", "big-1")][0] == 30000

    spec, fprops, _ = cloudlib.havana_request(cloudlib.named_flavor("m1.medium"))
    reply = _rpc_explain(c, spec, fprops)

    by_host = {h["host"]: h["weights"] for h in reply["hosts"]}
    # Free RAM after the claim: big-1 2768 MB, mid-2 16384 MB (the most).
    assert by_host["mid-2"]["RAMWeigher"] == 1.0
    assert by_host["big-1"]["RAMWeigher"] == pytest.approx(2768 / 16384)
    # big-1 still has the most vCPUs and disk, and so still weighs first.
    assert by_host["big-1"]["CPUWeigher"] == by_host["big-1"]["DiskWeigher"] == 1.0
    assert [h["host"] for h in reply["hosts"]] == ["big-1", "mid-2", "zoned-4",
                                                   "small-3"]
    _assert_weights_add_up(reply)
    # Repeating it changes nothing: no claim was made by the first.
    assert _rpc_explain(c, spec, fprops)["hosts"] == reply["hosts"]
    assert _claims(c) == before
    assert not c.instances(spec["instance_uuids"])


def test_plain_client_no_valid_host(explain_cloud):
    itype = cloudlib.flavor("huge", memory_mb=10**6, vcpus=1, root_gb=1)
    spec, fprops, _ = cloudlib.havana_request(itype)
    reply = _rpc_explain(explain_cloud, spec, fprops)
    assert reply["hosts"] == []
    # No zone asked for: every zone will do (nova).
    assert _removed(reply)["AvailabilityZoneFilter"] == []
    assert _removed(reply)["RamFilter"] == sorted(EXPLAIN_COMPUTES)
    assert reply["reason"] == "0/4 hosts available: RamFilter removed 4"


def test_plain_client_forced_host_skips_filters(explain_cloud):
    spec, fprops, _ = cloudlib.havana_request(cloudlib.named_flavor("m1.tiny"))
    fprops["force_hosts"] = ["small-3"]
    reply = _rpc_explain(explain_cloud, spec, fprops)
    assert [h["host"] for h in reply["hosts"]] == ["small-3"]
    assert list(reply["removed"]) == ["force_hosts/force_nodes"]


def test_malformed_request_is_refused_and_daemon_serves_on(explain_cloud):
    import oslo_messaging as messaging

    spec, fprops, _ = cloudlib.havana_request(cloudlib.named_flavor("m1.tiny"))
    spec["instance_properties"]["memory_mb"] = -1
    spec["instance_type"]["memory_mb"] = -1
    with pytest.raises(messaging.RemoteError) as info:
        _rpc_explain(explain_cloud, spec, fprops)
    assert info.value.exc_type == "InvalidRequestSpec"
    assert "memory_mb" in info.value.value

    done = _cli_explain(explain_cloud, "--flavor", "512,1,1", "--json")
    assert done.returncode == 0, done.stderr


def test_cli_bad_flavor_exits_2_without_asking(explain_cloud):
    done = _cli_explain(explain_cloud, "--flavor", "512,one,1")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "ERROR: --flavor VCPUS must be a whole non-negative number, got 'one' "
        "in '512,one,1'"]


def test_cli_without_a_daemon_exits_1_after_the_timeout(explain_cloud):
    c = explain_cloud
    lonely = c.write_config(c.workdir / "no-daemon.conf",
                            {"DEFAULT": {"scheduler_topic": "nobody-listens"}})
    started = time.monotonic()
    done = _cli_explain(c, "--flavor", "512,1,1", "--timeout", "2",
                        config_file=lonely)
    assert done.returncode == 1
    assert time.monotonic() - started < 30
    assert done.stdout == ""
    [line] = [ln for ln in done.stderr.splitlines() if ln.startswith("ERROR: ")]
    assert "no scheduler answered on topic 'nobody-listens'" in line
    assert "within 2 s" in line
    assert "guest" not in done.stderr


def test_cli_with_the_broker_refusing_exits_1_fast(explain_cloud):
    c = explain_cloud
    url = c.broker.url.replace(f":{cloudlib.RABBIT_PORT}/", ":1/")
    dead = c.write_config(c.workdir / "no-broker.conf",
                          {"DEFAULT": {"transport_url": url}})
    started = time.monotonic()
    done = _cli_explain(c, "--flavor", "512,1,1", "--timeout", "2",
                        config_file=dead)
    assert done.returncode == 1
    assert time.monotonic() - started < 30
    assert done.stderr.strip().splitlines() == [
        "ERROR: cannot connect to the message broker at 127.0.0.1:1 "
        "(Connection refused): check [DEFAULT] transport_url"]
