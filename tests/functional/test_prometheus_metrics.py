"""Prometheus metrics and /healthz of a running daemon, over RabbitMQ.

A daemon with ``[prometheus] enabled`` (one process, and two workers whose
figures the parent adds up) schedules instances onto fake compute nodes;
the test scrapes ``/metrics`` before and after and checks that each
counter moved by what the requests did: five requests placed (six
instances), one that fits nowhere (NoValidHost, RamFilter removing the
three hosts), one decision per instance, the compute reports counted, the
hosts up. ``/healthz`` answers 200 while the daemon works and 503 with the
reason once its database is gone (PostgreSQL, dropped under it), and the
daemon keeps running.
"""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
import sqlalchemy as sa

import cloudlib
from scenario import temporary_database, use_database

pytestmark = pytest.mark.integration

COMPUTES = {"m-1": (8, 8192, 100), "m-2": (8, 8192, 100), "m-3": (8, 8192, 100)}
WAIT = 60


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    """Every sample of /metrics: (name, sorted labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    status, text = _get(port, "/metrics")
    assert status == 200, text
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples}


def _value(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def _start_cloud(workdir, workers: int, port: int, database_url: str | None = None):
    cloud = cloudlib.Cloud(workdir(f"metrics_w{workers}"), f"metrics{workers}")
    overrides = {"prometheus": {"enabled": True, "port": port},
                 "scheduler": {"workers": workers}}
    if database_url:
        use_database(cloud, database_url, overrides)
    else:
        cloud.write_config(cloud.config_file, overrides)
        cloud.db_sync()
    cloud.start_daemon()
    for host, (vcpus, ram, disk) in COMPUTES.items():
        cloud.start_compute(host, vcpus, ram, disk)
    cloud.wait_for_nodes(list(COMPUTES))
    return cloud


def _boot_and_check(cloud, port: int) -> None:
    """Requests through RabbitMQ; each counter moves by what they did."""
    cloudlib.wait_until(lambda: _get(port, "/healthz")[0] == 200, WAIT,
                        what="/healthz to answer 200")
    # Gauges are sampled every few seconds in each worker.
    cloudlib.wait_until(
        lambda: _value(_scrape(port), "nova_sched_hosts", state="up") == len(COMPUTES),
        WAIT, what="three hosts up in nova_sched_hosts")
    before = _scrape(port)

    client = cloudlib.request_context()
    small = cloudlib.flavor("m.small", 512, 1, 1)
    placed_uuids = []
    for count in (1, 1, 1, 1, 2):
        spec, props, uuids = cloudlib.havana_request(small, num_instances=count)
        cloud.client.run_instance(client, spec, props)
        placed_uuids += uuids
    huge = cloudlib.flavor("m.huge", 10_000_000, 1, 1)
    spec, props, failed_uuids = cloudlib.havana_request(huge)
    cloud.client.run_instance(client, spec, props)
    rows = cloud.wait_for_final(placed_uuids + failed_uuids, timeout=WAIT)
    assert all(rows[u]["host"] for u in placed_uuids), rows
    assert rows[failed_uuids[0]]["vm_state"] == "error"

    def moved():
        after = _scrape(port)
        return after if _value(after, "nova_sched_requests_total", method="run_instance",
                               outcome="no_valid_host") > _value(
            before, "nova_sched_requests_total", method="run_instance",
            outcome="no_valid_host") else None

    after = cloudlib.wait_until(moved, WAIT, what="the requests to be counted")

    def delta(name, **labels):
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert delta("nova_sched_requests_total", method="run_instance", outcome="ok") == 5
    assert delta("nova_sched_requests_total", method="run_instance",
                 outcome="no_valid_host") == 1
    assert delta("nova_sched_decision_seconds_count") == 7   # one per instance
    assert delta("nova_sched_decision_seconds_bucket", le="+Inf") == 7
    assert delta("nova_sched_no_valid_host_total") == 1
    assert delta("nova_sched_filter_removed_hosts_total", filter="RamFilter") == 3
    assert delta("nova_sched_claims_lost_total") == 0
    # The fake computes report every second: every report is counted, once
    # as a report and once as a request. The two counters move one after
    # the other, so a scrape can fall between them: the check is that they
    # meet, on a scrape after two more reports from each compute.
    def counted_twice():
        now = _scrape(port)
        accepted = _value(now, "nova_sched_compute_reports_total", outcome="accepted")
        ok = _value(now, "nova_sched_requests_total", method="compute_node_update",
                    outcome="ok")
        more = accepted >= _value(before, "nova_sched_compute_reports_total",
                                  outcome="accepted") + 2 * len(COMPUTES)
        return now if more and ok == accepted else None

    cloudlib.wait_until(counted_twice, WAIT,
                        what="every report counted as a report and as a request")
    assert _value(after, "nova_sched_hosts", state="down") == 0
    assert _value(after, "nova_sched_hosts", state="disabled") == 0
    assert _value(after, "nova_sched_parked_requests") == 0
    assert _value(after, "process_resident_memory_bytes") > 0
    assert _get(port, "/healthz") == (200, "ok\n")
    assert _get(port, "/nothing")[0] == 404


@pytest.mark.parametrize("workers", [1, 2])
def test_metrics_move_with_the_requests(rabbitmq, workdir, workers):
    port = cloudlib.free_port()
    cloud = _start_cloud(workdir, workers, port)
    try:
        _boot_and_check(cloud, port)
    finally:
        codes = cloud.close()
    assert all(code == 0 for code in codes.values()), codes


def test_healthz_says_why_when_the_database_is_gone(rabbitmq, workdir):
    port = cloudlib.free_port()
    with temporary_database("postgresql") as url:
        cloud = _start_cloud(workdir, 1, port, database_url=url)
        try:
            cloudlib.wait_until(lambda: _get(port, "/healthz")[0] == 200, WAIT,
                                what="/healthz to answer 200")
            name = url.rsplit("/", 1)[1]
            admin = sa.create_engine(url.rsplit("/", 1)[0] + "/postgres",
                                     isolation_level="AUTOCOMMIT")
            cloud.engine.dispose()
            with admin.connect() as conn:
                conn.exec_driver_sql(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    f"WHERE datname = '{name}' AND pid <> pg_backend_pid()")
                conn.exec_driver_sql(f"DROP DATABASE {name}")

            status, body = cloudlib.wait_until(
                lambda: (lambda answer: answer if answer[0] == 503 else None)(
                    _get(port, "/healthz")), WAIT, what="/healthz to answer 503")
            assert body.startswith("database unreachable: "), body
            assert body.count("\n") == 1, "one line"
            cloud.assert_running()

            # The database answers again: so does the daemon's health.
            with admin.connect() as conn:
                conn.exec_driver_sql(f"CREATE DATABASE {name}")
            admin.dispose()
            cloudlib.wait_until(lambda: _get(port, "/healthz") == (200, "ok\n"), WAIT,
                                what="/healthz to answer 200 again")
            cloud.assert_running()
        finally:
            cloud.close()
