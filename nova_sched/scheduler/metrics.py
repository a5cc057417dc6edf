"""The scheduler's Prometheus instruments.

One ``SchedulerMetrics`` per daemon process, on a registry of its own (a
test or the embedded demo gets a fresh one; nothing is kept in module
globals). The code that knows an event counts it here: the manager counts
requests and reports, the scheduling cycle decisions, filter removals,
NoValidHost and lost claims. Gauges that describe state (hosts by state,
parked requests) are sampled by ``sample``, which the daemon calls before
each scrape and from its periodic task.

With ``[scheduler] workers > 1`` each worker's instruments write to
prometheus_client's multiprocess files (``multiprocess.enable`` before the
instruments are made) and the parent serves their sum
(``prometheus_endpoint``).
"""

from __future__ import annotations

import functools
import os
import time

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, values

from nova_sched import exception

# Decisions take from a fraction of a millisecond (a few hundred hosts) to
# tens of milliseconds (100,000 hosts, every filter enabled); claims lost
# to other daemons push the tail further.
_DECISION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                     0.25, 0.5, 1.0, 2.5)
HOST_STATES = ("up", "down", "disabled")


class SchedulerMetrics:
    """Counters, histogram and gauges of one scheduler process."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        self.requests = Counter(
            "nova_sched_requests", "RPC requests handled, by method and outcome.",
            ["method", "outcome"], registry=reg)
        self.decision_seconds = Histogram(
            "nova_sched_decision_seconds",
            "CPU time of the deciding thread inside the driver per instance: "
            "filters and weighers (lock and interpreter waits excluded).",
            buckets=_DECISION_BUCKETS, registry=reg)
        self.claim_seconds = Histogram(
            "nova_sched_claim_seconds",
            "Wall time of the claim in its store (database or Placement), "
            "per claimed instance.",
            buckets=_DECISION_BUCKETS, registry=reg)
        self.filter_removed = Counter(
            "nova_sched_filter_removed_hosts",
            "Hosts each filter removed, summed over decisions.",
            ["filter"], registry=reg)
        self.no_valid_host = Counter(
            "nova_sched_no_valid_host", "Instances for which no host fit.",
            registry=reg)
        self.claims_lost = Counter(
            "nova_sched_claims_lost",
            "Claims lost to another scheduler (the node was decided again).",
            registry=reg)
        self.compute_reports = Counter(
            "nova_sched_compute_reports", "Compute node reports, by outcome.",
            ["outcome"], registry=reg)
        self.database_retries = Counter(
            "nova_sched_database_retries",
            "Database transactions run again, by reason (deadlock: a Galera "
            "certification conflict or a lock cycle; connection lost, cannot "
            "connect, cluster node not ready: a database node failing over).",
            ["reason"], registry=reg)
        self.broker_reconnects = Counter(
            "nova_sched_broker_reconnects",
            "Times the topic consumer came back after losing the broker.",
            registry=reg)
        self.broker_away_seconds = Counter(
            "nova_sched_broker_away_seconds",
            "Seconds the topic consumer spent without the broker, summed.",
            registry=reg)
        self.slow_publishes = Counter(
            "nova_sched_slow_publishes",
            "Compute casts and notifications that waited more than 2 s for "
            "the broker to confirm them (a node failing over).",
            registry=reg)
        # Every worker sees the same fleet: the parent shows the most
        # recent worker's view; parked requests add up over live workers.
        self.hosts = Gauge(
            "nova_sched_hosts", "Compute nodes known, by state.", ["state"],
            registry=reg, multiprocess_mode="livemostrecent")
        self.parked_requests = Gauge(
            "nova_sched_parked_requests",
            "Requests held until the database answers again.",
            registry=reg, multiprocess_mode="livesum")
        for state in HOST_STATES:
            self.hosts.labels(state)
        # (instrument, label values) -> its child: ``labels()`` checks and
        # locks on every call, several times the increment's cost, and a
        # daemon counts a thousand reports a second. The label values are
        # few (methods, outcomes, filter names), so the dict stays small.
        self._children: dict[tuple, object] = {}

    def _child(self, instrument, *label_values: str):
        child = self._children.get((instrument, label_values))
        if child is None:
            child = self._children[(instrument, label_values)] = (
                instrument.labels(*label_values))
        return child

    # -- what the code counts ------------------------------------------------
    def request(self, method: str, outcome: str) -> None:
        self._child(self.requests, method, outcome).inc()

    def decided(self, decision_s: float, claim_s: float | None = None) -> None:
        self.decision_seconds.observe(decision_s)
        if claim_s is not None:
            self.claim_seconds.observe(claim_s)

    def filtered(self, removed_counts) -> None:
        """A decision's (filter, hosts removed) pairs."""
        for name, count in removed_counts:
            self._child(self.filter_removed, name).inc(count)

    def report(self, outcome: str) -> None:
        self._child(self.compute_reports, outcome).inc()

    def database_retry(self, reason: str) -> None:
        self._child(self.database_retries, reason).inc()

    def reconnected(self, seconds_away: float) -> None:
        self.broker_reconnects.inc()
        self.broker_away_seconds.inc(seconds_away)

    def slow_publish(self, _what: str, _seconds: float) -> None:
        self.slow_publishes.inc()

    # -- sampled state -------------------------------------------------------------
    def sample(self, host_manager, parked: int) -> None:
        """Set the gauges from the host table and the parked requests."""
        counts = host_states(host_manager)
        for state in HOST_STATES:
            self.hosts.labels(state).set(counts[state])
        self.parked_requests.set(parked)


def outcome_of(err: BaseException) -> str:
    """The metrics' name for what made a request or an instance fail."""
    if isinstance(err, (exception.NoValidHost, exception.NovaNoValidHost)):
        return "no_valid_host"
    if isinstance(err, exception.InvalidRequestSpec):
        return "invalid"
    return "error"


def counted(method):
    """Count each call of an RPC method of an endpoint (which has a
    ``metrics``) in ``nova_sched_requests_total``: outcome ``ok``, or what
    its exception says (``outcome_of``)."""
    name = method.__name__

    @functools.wraps(method)
    def counting(self, *args, **kwargs):
        try:
            result = method(self, *args, **kwargs)
        except Exception as err:
            self.metrics.request(name, outcome_of(err))
            raise
        self.metrics.request(name, "ok")
        return result

    return counting


def host_states(host_manager, now: float | None = None) -> dict[str, int]:
    """Known nodes by state: disabled, else up or down as ComputeFilter
    judges their heartbeat."""
    from nova_sched.scheduler.filters.compute_filter import heartbeat_fresh

    with host_manager.lock:
        table = host_manager.table
        active = table.col("active").copy()
        disabled = table.col("disabled")[active]
        fresh = heartbeat_fresh(table, table.col("service_updated")[active],
                                time.time() if now is None else now)
    return {"disabled": int(np.count_nonzero(disabled)),
            "up": int(np.count_nonzero(~disabled & fresh)),
            "down": int(np.count_nonzero(~disabled & ~fresh))}


def enable_multiprocess(directory: str) -> None:
    """Make this process's instruments write to ``directory``'s files.

    For a worker forked by a multi-worker daemon, before it makes its
    ``SchedulerMetrics``: prometheus_client chooses how values are kept
    when an instrument is made, from this module-level setting.
    """
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    values.ValueClass = values.MultiProcessValue()
