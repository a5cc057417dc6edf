"""An aggregate's allocation ratio lets its hosts take more than the option.

With AggregateRamFilter enabled, the filter, the claim and the limits sent
to the compute node all judge a host in an aggregate with
``ram_allocation_ratio = 3.0`` by that ratio, although the option says 1.0:
the instances land there, the claims are taken (nothing is "lost to
another scheduler") and the compute node builds them under the limits it
was sent.
"""

from __future__ import annotations

import pytest

import cloudlib

pytestmark = pytest.mark.integration

RAM_MB = 4096
FLAVOR = cloudlib.flavor("m1.ratio", 1024, 1, 1)


@pytest.fixture(scope="module")
def ratio_cloud(rabbitmq, workdir):
    c = cloudlib.Cloud(workdir("aggregate-ratios"), "ratios")
    try:
        c.write_config(c.config_file, {
            "filter_scheduler": {
                "enabled_filters": ["AggregateRamFilter", "CoreFilter", "DiskFilter",
                                    "ComputeFilter"],
                "ram_allocation_ratio": 1.0,
                # Spread, so both hosts are used while both have room.
                "weight_classes": ["RAMWeigher"],
            },
        })
        c.db_sync()
        for args in (["aggregate", "create", "dense"],
                     ["aggregate", "add-host", "dense", "dense-1"],
                     ["aggregate", "set-metadata", "dense",
                      "ram_allocation_ratio=3.0"]):
            done = c.run_manage(*args)
            assert done.returncode == 0, done.stdout + done.stderr
        c.start_daemon()
        for host in ("dense-1", "plain-1"):
            c.start_compute(host, vcpus=64, memory_mb=RAM_MB, local_gb=1000)
        c.wait_for_nodes(["dense-1", "plain-1"])
        yield c
    finally:
        codes = c.close()
    assert all(code == 0 for code in codes.values()), codes


def test_instances_fill_an_aggregate_host_past_the_options_ratio(ratio_cloud):
    c = ratio_cloud
    # 4 x 1024 MB fit plain-1 (ratio 1.0); dense-1 takes 3 x 4096 MB.
    spec, fprops, uuids = cloudlib.havana_request(FLAVOR, 16)
    c.client.run_instance(cloudlib.request_context(), spec, fprops)
    rows = c.wait_for_final(uuids, timeout=90)
    by_host: dict[str, int] = {}
    for row in rows.values():
        assert row["vm_state"] == "active", (row, c.faults(row["uuid"]))
        by_host[row["host"]] = by_host.get(row["host"], 0) + 1
    assert by_host == {"dense-1": 12, "plain-1": 4}

    nodes = {n["host"]: n for n in c.query(
        "SELECT host, memory_mb, claimed_memory_mb FROM compute_nodes")}
    assert nodes["dense-1"]["claimed_memory_mb"] == 12 * 1024 > RAM_MB
    assert nodes["plain-1"]["claimed_memory_mb"] == RAM_MB
    assert "Lost the claim" not in c.log_text("scheduler")

    # Full now, under each host's own ratio: the next one has no valid host.
    spec, fprops, (extra,) = cloudlib.havana_request(FLAVOR, 1)
    c.client.run_instance(cloudlib.request_context(), spec, fprops)
    row = c.wait_for_final([extra], timeout=60)[extra]
    assert row["vm_state"] == "error"
    assert "AggregateRamFilter removed 2" in c.faults(extra)[-1]["message"]
