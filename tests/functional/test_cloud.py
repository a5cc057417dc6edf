"""The daemon and five fake computes, driven through the contract only.

The tests share one cloud and run in file order: the fill test comes last
because it leaves the cloud (nearly) full.
"""

from __future__ import annotations

import json
import random
import re
import uuid

import pytest

import cloudlib
from cloudlib import SESSION_COMPUTES

pytestmark = pytest.mark.integration


def _boot(cloud, itype, num=1, **kwargs):
    spec, fprops, uuids = cloudlib.havana_request(itype, num)
    cloud.client.run_instance(cloudlib.request_context(), spec, fprops, **kwargs)
    return uuids


def _for_request(uuids):
    wanted = set(uuids)

    def _matches(event):
        spec = (event["payload"] or {}).get("request_spec") or {}
        return bool(wanted & set(spec.get("instance_uuids") or []))

    return _matches


def _schedule_events(cloud, uuid_):
    actions = cloud.actions(uuid_)
    return actions, [e for a in actions for e in a["events"] if e["event"] == "schedule"]


# -- (e) notifications, and secrets kept out of everything ------------------
def test_notifications_and_secrets(cloud):
    secret = "S3cr3t-admin-pw-" + uuid.uuid4().hex
    file_body = "aW5qZWN0ZWQtZmlsZS1ib2R5-" + uuid.uuid4().hex
    uuids = _boot(cloud, cloudlib.named_flavor("m1.small"), 2,
                  admin_password=secret,
                  injected_files=[["/root/.ssh/authorized_keys", file_body]])
    rows = cloud.wait_for_final(uuids)
    assert {r["vm_state"] for r in rows.values()} == {"active"}

    mine = _for_request(uuids)
    publisher = f"scheduler.{cloud.scheduler_host}"

    def _complete(events):
        types = [e["event_type"] for e in events if mine(e)]
        scheduled = [e for e in events if e["event_type"] ==
                     "scheduler.run_instance.scheduled" and mine(e)]
        return ("scheduler.run_instance.end" in types and len(scheduled) >= 2
                and types)

    cloud.notifications.wait_for(_complete, 30, "start/scheduled/end notifications")
    events = [e for e in cloud.notifications.snapshot() if mine(e)]
    types = [e["event_type"] for e in events]
    assert types[0] == "scheduler.run_instance.start", types
    assert types[-1] == "scheduler.run_instance.end", types
    scheduled = [e for e in events if e["event_type"] == "scheduler.run_instance.scheduled"]
    assert sorted(e["payload"]["instance_id"] for e in scheduled) == sorted(uuids)
    for e in scheduled:
        assert e["payload"]["weighted_host"]["host"] in SESSION_COMPUTES
        assert "weight" in e["payload"]["weighted_host"]
        assert e["payload"]["weighted_host"]["host"] == rows[e["payload"]["instance_id"]]["host"]
    assert {e["publisher_id"] for e in events} == {publisher}
    assert {e["priority"] for e in events} == {"info"}

    everything = json.dumps([e["payload"] for e in cloud.notifications.snapshot()],
                            default=str)
    assert secret not in everything
    assert file_body not in everything
    for name in cloud.logs:
        text = cloud.log_text(name)
        assert secret not in text, f"admin_password in the log of {name}"
        assert file_body not in text, f"injected file in the log of {name}"
        assert ":guest@" not in text, f"broker credentials in the log of {name}"
    tables = cloud.dump_tables()
    assert secret not in tables and file_body not in tables


# -- (b) a request too big for any host --------------------------------------
def test_too_big_for_any_host_then_still_serving(cloud):
    huge = cloudlib.flavor("huge", memory_mb=1_000_000, vcpus=1, root_gb=1)
    (uuid_,) = _boot(cloud, huge)
    row = cloud.wait_for_final([uuid_])[uuid_]
    assert row["vm_state"] == "error"
    assert row["task_state"] is None
    assert row["host"] is None

    faults = cloud.faults(uuid_)
    assert faults, "no instance_faults row"
    message = faults[-1]["message"]
    assert message.startswith("No valid host was found"), message
    assert re.search(r"RamFilter removed \d+", message), message

    actions, events = _schedule_events(cloud, uuid_)
    assert [a["action"] for a in actions] == ["create"]
    assert [e["result"] for e in events] == ["Error"]

    def _error_event(evts):
        return [e for e in evts if e["priority"] == "error"
                and e["event_type"] == "scheduler.run_instance"
                and (e["payload"] or {}).get("instance_id") == uuid_]

    (note,) = cloud.notifications.wait_for(_error_event, 30, "the ERROR notification")
    assert note["payload"]["state"] == "error"
    assert note["payload"]["method"] == "run_instance"
    assert "RamFilter" in str(note["payload"]["reason"])

    (ok,) = _boot(cloud, cloudlib.named_flavor("m1.tiny"))
    assert cloud.wait_for_final([ok])[ok]["vm_state"] == "active"


# -- (c) malformed requests --------------------------------------------------
def _drop_instance_properties(spec, fprops):
    del spec["instance_properties"]


def _string_memory(spec, fprops):
    for where in (spec["instance_type"], spec["instance_properties"],
                  fprops["instance_type"]):
        where["memory_mb"] = "2048"


def _negative_memory(spec, fprops):
    for where in (spec["instance_type"], spec["instance_properties"],
                  fprops["instance_type"]):
        where["memory_mb"] = -512


def _huge_num_instances(spec, fprops):
    spec["num_instances"] = 10**9


@pytest.mark.parametrize("mutate, named", [
    (_drop_instance_properties, "instance_properties"),
    (_string_memory, "memory_mb"),
    (_negative_memory, "memory_mb"),
    (_huge_num_instances, "num_instances"),
], ids=["no-instance_properties", "string-memory_mb", "negative-memory_mb",
        "num_instances-10**9"])
def test_malformed_request_ends_in_error_with_a_fault(cloud, mutate, named):
    spec, fprops, uuids = cloudlib.havana_request(cloudlib.named_flavor("m1.tiny"))
    mutate(spec, fprops)
    cloud.client.run_instance(cloudlib.request_context(), spec, fprops)
    row = cloud.wait_for_final(uuids)[uuids[0]]
    assert row["vm_state"] == "error"
    faults = cloud.faults(uuids[0])
    assert faults, "no instance_faults row"
    assert named in faults[-1]["message"], faults[-1]["message"]


def test_malformed_without_uuid_is_survived(cloud):
    ctxt = cloudlib.request_context()
    for spec, fprops in (("not a dict", {}), ({}, None), ({"instance_uuids": 7}, [])):
        cloud.client.run_instance(ctxt, spec, fprops)
    (ok,) = _boot(cloud, cloudlib.named_flavor("m1.tiny"))
    assert cloud.wait_for_final([ok])[ok]["vm_state"] == "active"
    cloud.assert_running()


# -- (a) fill the cloud and check every placement ----------------------------
FILL_MIX = {"m1.tiny": 120, "m1.small": 60, "m1.medium": 45, "m1.large": 25}


def test_fill_the_cloud_within_capacity(cloud):
    rng = random.Random(20131017)  # Havana's release day
    names = [n for n, count in FILL_MIX.items() for _ in range(count)]
    rng.shuffle(names)
    uuids: list[str] = []
    requests = 0
    i = 0
    while i < len(names):
        # Havana's multi-create: one request for up to 5 of the same flavor.
        num = rng.choice((1, 1, 2, 3, 5))
        name = names[i]
        uuids += _boot(cloud, cloudlib.named_flavor(name), num)
        requests += 1
        i += num
    assert len(uuids) >= 200 and requests < len(uuids)

    rows = cloud.wait_for_final(uuids, timeout=150)
    placed = [r for r in rows.values() if r["vm_state"] == "active"]
    failed = [r for r in rows.values() if r["vm_state"] == "error"]
    # The bar: at least 200 instances booted through RabbitMQ
    # across the five fake compute processes.
    assert len(placed) >= 200, f"only {len(placed)} of {len(uuids)} placed"

    for r in placed:
        assert r["host"] in SESSION_COMPUTES and r["node"] == r["host"], r
        actions, events = _schedule_events(cloud, r["uuid"])
        assert "create" in [a["action"] for a in actions], r["uuid"]
        # A healthy cloud never reschedules: one attempt, a success.
        assert [e["result"] for e in events] == ["Success"], (r["uuid"], events)
    for r in failed:
        faults = cloud.faults(r["uuid"])
        assert faults and faults[-1]["message"].startswith("No valid host was found"), \
            (r["uuid"], faults)
        _, events = _schedule_events(cloud, r["uuid"])
        assert [e["result"] for e in events] == ["Error"], (r["uuid"], events)

    # Capacity, over every instance on each node (earlier tests' too).
    nodes = {n["hypervisor_hostname"]: n for n in cloud.query("SELECT * FROM compute_nodes")}
    usage = {name: {"ram": 0, "cpu": 0, "disk_mb": 0} for name in nodes}
    for r in cloud.query("SELECT * FROM instances WHERE vm_state = 'active'"):
        u = usage[r["node"]]
        u["ram"] += r["memory_mb"]
        u["cpu"] += r["vcpus"]
        u["disk_mb"] += ((r["root_gb"] or 0) + (r["ephemeral_gb"] or 0)) * 1024
    fullest = 0.0
    for name, n in nodes.items():
        ram_limit = n["memory_mb"] * cloudlib.RAM_RATIO - (n["reserved_host_memory_mb"] or 0)
        cpu_limit = n["vcpus"] * cloudlib.CPU_RATIO - (n["reserved_host_cpus"] or 0)
        disk_limit = (n["local_gb"] * 1024 * cloudlib.DISK_RATIO
                      - (n["reserved_host_disk_mb"] or 0))
        u = usage[name]
        assert u["ram"] <= ram_limit, (name, u, ram_limit)
        assert u["cpu"] <= cpu_limit, (name, u, cpu_limit)
        assert u["disk_mb"] <= disk_limit, (name, u, disk_limit)
        fullest = max(fullest, u["ram"] / ram_limit, u["disk_mb"] / disk_limit)
    # The capacity checks above mean something only if the cloud got full.
    print(f"fill: {len(placed)} placed, {len(failed)} failed, fullest {fullest:.2f}")
    assert fullest >= 0.8, usage
