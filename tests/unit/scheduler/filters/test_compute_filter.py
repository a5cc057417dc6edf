"""ComputeFilter: the node's service is enabled and reported recently."""

from __future__ import annotations

import time

import pytest

from nova_sched.conf import CONF
from nova_sched.scheduler.filters import compute_filter
from nova_sched.scheduler.filters.compute_filter import ComputeFilter
from tests.unit.scheduler import fakes

NOW = 1_700_000_000.0


@pytest.fixture
def frozen(monkeypatch):
    monkeypatch.setattr(compute_filter.time, "time", lambda: NOW)


def _passes(**node):
    table = fakes.make_table([dict(host="host1", memory_mb=1024, vcpus=1, **node)])
    return bool(fakes.passes(ComputeFilter(), table, fakes.make_spec()))


def test_enabled_and_up_passes():
    assert _passes(service_updated=time.time())


def test_disabled_fails():
    assert not _passes(service_updated=time.time(), disabled=True)


def test_never_reported_fails():
    assert not _passes(service_updated=0.0)


@pytest.mark.usefixtures("frozen")
def test_heartbeat_age_against_service_down_time():
    assert CONF.service_down_time == 60
    assert _passes(service_updated=NOW - 59)
    assert _passes(service_updated=NOW - 60)
    assert not _passes(service_updated=NOW - 61)


@pytest.mark.usefixtures("frozen")
def test_service_down_time_is_read_at_call_time():
    CONF.set_override("service_down_time", 300)
    assert _passes(service_updated=NOW - 299)
    assert not _passes(service_updated=NOW - 301)


@pytest.mark.usefixtures("frozen")
def test_heartbeat_from_the_future_counts_by_its_distance():
    # nova's servicegroup db driver: abs(elapsed) <= service_down_time.
    assert _passes(service_updated=NOW + 30)
    assert not _passes(service_updated=NOW + 61)


@pytest.mark.usefixtures("frozen")
def test_disabled_and_down():
    assert not _passes(service_updated=NOW - 1000, disabled=True)


@pytest.mark.usefixtures("frozen")
def test_a_daemon_behind_its_queue_judges_heartbeats_as_of_then():
    """Reports wait in the queue the requests fill: 40 s behind it, a report
    applied 90 s ago is as fresh as one 50 s old would be."""
    def passes(updated, lag):
        table = fakes.make_table([dict(host="host1", memory_mb=1024, vcpus=1,
                                       service_updated=updated)])
        table.report_lag = lag
        return bool(fakes.passes(ComputeFilter(), table, fakes.make_spec()))

    assert not passes(NOW - 90, 0.0)
    assert passes(NOW - 90, 40.0)
    assert not passes(NOW - 101, 40.0)
    # A fresh report stays up however far behind the daemon runs.
    assert passes(NOW - 1, 500.0)
