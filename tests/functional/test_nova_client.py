"""Today's nova as a client: nova's own SchedulerAPI calls the daemon (API 4.5).

nova pins its own dependencies, so it lives in a venv of its own, made by
``tools/nova_venv.sh`` (once; kept under ``$NOVA_SCHED_NOVA_VENV`` or
``~/.cache/nova-sched/nova-venv-<version>``). ``nova_client_driver.py``
runs there: it builds a RequestSpec as nova-conductor does and calls
``select_destinations(..., return_objects=True, return_alternates=True)``
through nova's ``SchedulerAPI`` over RabbitMQ, against a daemon of this
tree with fake compute nodes. Checked: a one-instance request gets a
``Selection`` (nova's own object, rebuilt by nova's serializer) with
alternates; a three-instance request three lists; an impossible one
nova's own ``NoValidHost``; an availability zone and ``ignore_hosts`` are
honoured; the claims are in the database.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

import cloudlib

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COMPUTES = {"n-1": (8, 8192, 100), "n-2": (8, 8192, 100), "n-3": (8, 8192, 100),
            "n-az": (8, 8192, 100)}
DRIVER = Path(__file__).with_name("nova_client_driver.py")


@pytest.fixture(scope="module")
def nova_cloud(rabbitmq, workdir):
    cloud = cloudlib.Cloud(workdir("nova_client"), "novaclient")
    if cloud.broker.isolated_topics:
        cloud.close()
        pytest.skip("needs a private RabbitMQ vhost: nova's topic is always 'scheduler'")
    try:
        cloud.db_sync()
        cloud.run_manage("aggregate", "create", "zoned", "--zone", "az-2")
        cloud.run_manage("aggregate", "add-host", "zoned", "n-az")
        cloud.start_daemon()
        for host, (vcpus, ram, disk) in COMPUTES.items():
            cloud.start_compute(host, vcpus, ram, disk)
        cloud.wait_for_nodes(list(COMPUTES))
        yield cloud
    finally:
        cloud.close()


def _ask(nova_python, cloud, count=1, **options) -> tuple[list[str], dict]:
    uuids = [str(uuid.uuid4()) for _ in range(count)]
    args = [str(nova_python), str(DRIVER), "--transport-url", cloud.broker.url,
            "--exchange", cloud.exchange, "--uuids", ",".join(uuids)]
    if options.get("az"):
        args += ["--az", options["az"]]
    for host in options.get("ignore_hosts", ()):
        args += ["--ignore-host", host]
    if options.get("memory_mb"):
        args += ["--memory-mb", str(options["memory_mb"])]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-4000:]
    return uuids, json.loads(done.stdout.strip().splitlines()[-1])


def _claimed_on(cloud, uuids) -> dict[str, str]:
    rows = cloud.query(
        "SELECT a.instance_uuid AS uuid, n.host AS host FROM allocations a "
        "JOIN compute_nodes n ON n.id = a.compute_node_id")
    return {row["uuid"]: row["host"] for row in rows if row["uuid"] in uuids}


def test_one_instance_gets_a_selection_with_alternates(nova_python, nova_cloud):
    uuids, answer = _ask(nova_python, nova_cloud)
    assert "selections" in answer, answer
    (choices,) = answer["selections"]
    # The choice and max_attempts - 1 (2) alternates, as nova's own objects.
    assert len(choices) == 3
    assert {c["object"] for c in choices} == {"Selection"}
    hosts = [c["service_host"] for c in choices]
    assert len(set(hosts)) == 3
    first = choices[0]
    assert uuid.UUID(first["compute_node_uuid"]) and uuid.UUID(first["cell_uuid"])
    assert first["nodename"] == first["service_host"]
    assert first["limits"]["memory_mb"] > 0
    assert first["allocation_request"] is None
    assert first["availability_zone"] == (
        "az-2" if first["service_host"] == "n-az" else "nova")
    # Only the choice is claimed.
    assert _claimed_on(nova_cloud, uuids) == {uuids[0]: first["service_host"]}


def test_three_instances_get_three_lists(nova_python, nova_cloud):
    uuids, answer = _ask(nova_python, nova_cloud, count=3)
    assert len(answer["selections"]) == 3, answer
    claimed = _claimed_on(nova_cloud, uuids)
    assert set(claimed) == set(uuids)
    assert [claimed[u] for u in uuids] == [s[0]["service_host"]
                                           for s in answer["selections"]]


def test_an_impossible_request_is_novas_own_no_valid_host(nova_python, nova_cloud):
    uuids, answer = _ask(nova_python, nova_cloud, memory_mb=10_000_000)
    error = answer.get("error")
    assert error and error["is_nova_no_valid_host"], answer
    assert "RamFilter removed" in error["message"]
    assert _claimed_on(nova_cloud, uuids) == {}


def test_availability_zone_and_ignore_hosts_are_honoured(nova_python, nova_cloud):
    _, answer = _ask(nova_python, nova_cloud, az="az-2")
    assert [c["service_host"] for c in answer["selections"][0]] == ["n-az"], answer
    assert answer["selections"][0][0]["availability_zone"] == "az-2"
    _, answer = _ask(nova_python, nova_cloud, ignore_hosts=["n-1", "n-2", "n-az"])
    hosts = {c["service_host"] for c in answer["selections"][0]}
    assert hosts == {"n-3"}, answer


def _cast(nova_python, cloud, *options) -> None:
    done = subprocess.run([str(nova_python), str(DRIVER), "--transport-url",
                           cloud.broker.url, "--exchange", cloud.exchange, *options],
                          capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-4000:]


def test_novas_aggregate_fanout_reaches_the_daemon(nova_python, nova_cloud):
    """update_aggregates and delete_aggregate, fanout casts on the
    scheduler_fanout exchange, change what the daemon decides."""
    def stored():
        rows = nova_cloud.query(
            "SELECT a.name AS name, h.host AS host FROM aggregates a "
            "JOIN aggregate_hosts h ON h.aggregate_id = a.id WHERE a.name = 'from-nova'")
        return sorted(row["host"] for row in rows)

    _cast(nova_python, nova_cloud, "--aggregate", "from-nova:n-3:az-nova")
    cloudlib.wait_until(lambda: stored() == ["n-3"], 30, what="the aggregate stored")
    # The daemon's cache picks the zone up at its next refresh.
    answer = cloudlib.wait_until(
        lambda: (lambda a: a if a.get("selections") else None)(
            _ask(nova_python, nova_cloud, az="az-nova")[1]),
        30, interval=1.0, what="a request for az-nova to be placed")
    assert [c["service_host"] for c in answer["selections"][0]] == ["n-3"]

    _cast(nova_python, nova_cloud, "--delete-aggregate", "from-nova")
    cloudlib.wait_until(lambda: stored() == [], 30, what="the aggregate deleted")
