"""Health verdicts, the /metrics and /healthz endpoint, and the host gauges."""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from nova_sched.health import HealthMonitor, RecentEvents, WorkerHealthFiles
from nova_sched.prometheus_endpoint import PrometheusEndpoint


def _monitor(problem=None, ping_error=None):
    def ping():
        if ping_error is not None:
            raise ping_error

    seen = []
    monitor = HealthMonitor(lambda: problem, ping, on_probe=[seen.append])
    return monitor, seen


def test_healthy_when_consuming_and_the_database_answers():
    monitor, seen = _monitor()
    assert monitor.reason() is not None, "not probed yet: not known to be healthy"
    monitor.probe()
    assert monitor.reason() is None
    assert seen == [None]


def test_the_database_error_is_the_reason_in_one_line():
    monitor, seen = _monitor(ping_error=RuntimeError("connection refused\nDETAIL: more"))
    monitor.probe()
    assert monitor.reason() == "database unreachable: RuntimeError: connection refused"
    assert seen == [monitor.reason()]


def test_a_consumer_that_does_not_consume_comes_first():
    monitor, _ = _monitor(problem="not consuming topic scheduler yet",
                          ping_error=RuntimeError("down"))
    monitor.probe()
    assert monitor.reason() == "not consuming topic scheduler yet"


def test_a_probe_that_stopped_answering_is_unhealthy(monkeypatch):
    monitor, _ = _monitor()
    monitor.probe()
    later = time.monotonic() + 60
    monkeypatch.setattr("nova_sched.health.time.monotonic", lambda: later)
    assert monitor.reason().startswith("database probe stuck for ")


def test_worker_files_say_which_worker_is_unhealthy(tmp_path):
    files = WorkerHealthFiles(str(tmp_path))
    me = os.getpid()
    assert files.reason([me]) == f"worker {me} has not reported its health yet"
    files.write(None)
    assert files.reason([me]) is None
    files.write("database unreachable: OperationalError")
    assert files.reason([me]) == f"worker {me}: database unreachable: OperationalError"
    files.write(None)
    old = time.time() - 120
    os.utime(tmp_path / f"health-{me}.txt", (old, old))
    assert files.reason([me]).startswith(f"worker {me} last reported ")
    assert files.reason([]) == "no worker is running"
    files.forget(me)
    assert not list(tmp_path.iterdir())


def _get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


@pytest.fixture
def endpoint():
    registry = CollectorRegistry()
    hits = Counter("test_hits", "hits", registry=registry)
    state = {"reason": None, "scrapes": 0}

    def before_scrape():
        state["scrapes"] += 1
        hits.inc()

    ep = PrometheusEndpoint("127.0.0.1", 0, registry, lambda: state["reason"],
                            before_scrape)
    ep.start()
    try:
        yield ep, state
    finally:
        ep.stop()


def test_endpoint_serves_metrics_sampled_at_each_scrape(endpoint):
    ep, state = endpoint
    status, ctype, body = _get(ep.port, "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    assert "test_hits_total 1.0" in body
    assert "test_hits_total 2.0" in _get(ep.port, "/metrics")[2]
    assert state["scrapes"] == 2


def test_endpoint_healthz_answers_200_or_503_with_the_reason(endpoint):
    ep, state = endpoint
    assert _get(ep.port, "/healthz")[::2] == (200, "ok\n")
    state["reason"] = "database unreachable: OperationalError: gone"
    assert _get(ep.port, "/healthz")[::2] == (
        503, "database unreachable: OperationalError: gone\n")
    assert _get(ep.port, "/other")[0] == 404


def test_endpoint_answers_500_when_sampling_fails(endpoint):
    ep, _ = endpoint
    ep.before_scrape = lambda: 1 / 0
    status, _, body = _get(ep.port, "/metrics")
    assert status == 500 and "ZeroDivisionError" in body
    assert _get(ep.port, "/healthz")[0] == 200, "the endpoint still serves"


def test_a_port_in_use_is_a_configuration_error(endpoint):
    from nova_sched import exception
    from nova_sched.conf import CONF
    from nova_sched.service import open_endpoint

    ep, _ = endpoint
    CONF.set_override("port", ep.port, group="prometheus")
    try:
        with pytest.raises(exception.ConfigurationError, match="cannot serve"):
            open_endpoint(CollectorRegistry(), lambda: None)
    finally:
        CONF.clear_override("port", group="prometheus")


def test_recent_events_count_repeats_and_keep_the_latest():
    events = RecentEvents(keep=2)
    assert events.lines() == []
    events.note("broker connection lost; consuming again through 127.0.0.1:5682 "
                "after 1.2 s")
    events.note("database transaction retried: deadlock")
    events.note("database transaction retried: deadlock")
    lines = events.lines()
    assert len(lines) == 2
    assert lines[0].endswith("through 127.0.0.1:5682 after 1.2 s")
    assert lines[1].endswith("database transaction retried: deadlock (x2)")
    events.note("a third event")
    assert "127.0.0.1:5682" not in " ".join(events.lines()), "only the latest kept"


def test_healthz_verbose_adds_what_happened_lately(endpoint):
    ep, state = endpoint
    events = RecentEvents()
    ep.details = events.lines
    assert _get(ep.port, "/healthz?verbose")[::2] == (200, "ok\nnothing happened lately\n")
    events.note("broker connection lost; consuming again through h:1 after 0.3 s")
    status, _, body = _get(ep.port, "/healthz?verbose")
    assert status == 200
    first, second = body.splitlines()
    assert first == "ok" and second.endswith("through h:1 after 0.3 s")
    assert _get(ep.port, "/healthz")[::2] == (200, "ok\n"), "plain stays one line"


def test_worker_files_carry_the_workers_recent_events(tmp_path):
    events = RecentEvents()
    files = WorkerHealthFiles(str(tmp_path), events.lines)
    me = os.getpid()
    events.note("database transaction retried: connection lost")
    files.write(None)
    assert files.reason([me]) is None, "the events are not the verdict"
    (detail,) = files.details([me])
    assert detail.startswith(f"worker {me}: ") and detail.endswith("connection lost")
