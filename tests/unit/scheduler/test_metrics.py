"""What the manager and the cycle count, and the hosts-by-state gauge."""

from __future__ import annotations

import time

from nova_sched.conf import CONF
from nova_sched.scheduler.metrics import host_states
from tests.unit.scheduler.conftest import boot_request, compute_report


def _value(metrics, name, **labels):
    return metrics.registry.get_sample_value(name, labels) or 0.0


def _fleet(manager, ctxt, count=3):
    for n in range(count):
        manager.compute_node_update(ctxt, compute_report(f"h{n}"))
    manager.reports.flush()


def test_requests_and_decisions_are_counted_by_outcome(manager, ctxt):
    _fleet(manager, ctxt)
    m = manager.metrics
    manager.run_instance(ctxt, boot_request(count=2), None, [], None, True, {})
    manager.run_instance(ctxt, boot_request(memory_mb=10_000_000), None, [], None,
                         True, {})
    manager.run_instance(ctxt, boot_request(memory_mb=-1), None, [], None, True, {})

    assert _value(m, "nova_sched_requests_total", method="run_instance", outcome="ok") == 1
    assert _value(m, "nova_sched_requests_total", method="run_instance",
                  outcome="no_valid_host") == 1
    assert _value(m, "nova_sched_requests_total", method="run_instance",
                  outcome="invalid") == 1
    assert _value(m, "nova_sched_decision_seconds_count") == 3   # per instance
    # Claimed: the two placed instances, not the one no host fits.
    assert _value(m, "nova_sched_claim_seconds_count") == 2
    assert _value(m, "nova_sched_no_valid_host_total") == 1
    assert _value(m, "nova_sched_filter_removed_hosts_total", filter="RamFilter") == 3
    assert _value(m, "nova_sched_compute_reports_total", outcome="accepted") == 3
    assert _value(m, "nova_sched_requests_total", method="compute_node_update",
                  outcome="ok") == 3


def test_an_invalid_report_is_counted_apart(manager, ctxt):
    manager.compute_node_update(ctxt, {"host": "h1", "vcpus": "many"})
    assert _value(manager.metrics, "nova_sched_compute_reports_total",
                  outcome="invalid") == 1
    assert _value(manager.metrics, "nova_sched_compute_reports_total",
                  outcome="accepted") == 0


def test_select_destinations_counts_its_no_valid_host(manager, ctxt):
    import oslo_messaging as messaging
    import pytest

    _fleet(manager, ctxt, 1)
    # Wrapped for oslo.messaging's dispatcher, which sends NoValidHost back.
    with pytest.raises(messaging.ExpectedException):
        manager.select_destinations(ctxt, boot_request(memory_mb=10_000_000), {})
    manager.select_destinations(ctxt, boot_request(), {})
    m = manager.metrics
    assert _value(m, "nova_sched_requests_total", method="select_destinations",
                  outcome="no_valid_host") == 1
    assert _value(m, "nova_sched_requests_total", method="select_destinations",
                  outcome="ok") == 1


def test_hosts_by_state_judge_heartbeats_as_computefilter_does(manager, ctxt):
    _fleet(manager, ctxt, 4)
    hm = manager.host_manager
    assert host_states(hm) == {"up": 4, "down": 0, "disabled": 0}
    table = hm.table
    stale = time.time() - CONF.service_down_time - 30
    table.col("service_updated")[table.row_of("h1", "h1")] = stale
    table.col("disabled")[table.row_of("h2", "h2")] = True
    assert host_states(hm) == {"up": 2, "down": 1, "disabled": 1}
    # Reports wait behind a backlog of this long: h1's is not late after all.
    hm.set_report_lag(60)
    assert host_states(hm) == {"up": 3, "down": 0, "disabled": 1}

    manager.metrics.sample(hm, parked=2)
    assert _value(manager.metrics, "nova_sched_hosts", state="up") == 3
    assert _value(manager.metrics, "nova_sched_parked_requests") == 2


def test_a_broker_outage_does_not_take_the_fleet_for_down(manager, ctxt, monkeypatch):
    """No heartbeat could arrive while the daemon was without the broker:
    for service_down_time after it came back, heartbeats are judged as of
    the outage's length ago; after that, as usual."""
    _fleet(manager, ctxt, 3)
    hm = manager.host_manager
    table = hm.table
    # h1 last reported just before a 40 s outage; h2 long before it.
    now = time.time()
    table.col("service_updated")[table.row_of("h1", "h1")] = \
        now - CONF.service_down_time - 35
    table.col("service_updated")[table.row_of("h2", "h2")] = \
        now - CONF.service_down_time - 300
    assert host_states(hm)["down"] == 2
    hm.note_broker_outage(40)
    assert host_states(hm) == {"up": 2, "down": 1, "disabled": 0}
    hm.set_report_lag(0)  # the queue's backlog sampled meanwhile: no effect
    assert host_states(hm)["up"] == 2
    later = time.monotonic() + CONF.service_down_time + 41
    monkeypatch.setattr(time, "monotonic", lambda: later)
    hm.set_report_lag(0)
    assert host_states(hm)["down"] == 2, "the grace ends"
