"""A three-node RabbitMQ cluster on quorum queues: nodes die, nothing is lost.

A private cluster (``clusters.RabbitCluster``, its own ports, beside the
machine's own broker) serves a cloud of two scheduler daemons sharing a
PostgreSQL database, a fleet of compute nodes played by the test (it
reports them and records every ``run_instance`` cast to them) and a
listener of the notifications. Every process names the three nodes in
``transport_url`` with ``rabbit_quorum_queue = true`` and
``kombu_failover_strategy = shuffle``, so the scheduler topic, the compute
topics and ``notifications.info`` are quorum queues replicated on the
three nodes.

Three scenarios, one cluster (each on a vhost of its own):

- the node leading the ``scheduler`` queue is SIGKILLed a moment into a
  burst of 300 requests, then started again;
- the node the daemons consume through is SIGKILLed mid-burst: their
  connections fail over, ``/healthz`` says so meanwhile;
- the whole cluster is stopped (gracefully) with requests queued and being
  handled, and started again: the daemons reconnect by themselves.

Each checks with ``scenario.Audit``: every instance placed once (or in
ERROR with a fault), none claimed twice, no cast lost, a ``scheduled``
notification for every placed instance, and prints the figures: requests
sent, placed, lost, claimed twice, cast twice, the longest pause.
A request in hand when its daemon's connection died is delivered again
and, if it was claimed but not yet marked cast, recast to the same host:
that is the one documented window (``SchedulingCycle._cast``), bounded by
the request threads in hand.
"""

from __future__ import annotations

import datetime
import json
import logging
import signal
import threading
import time
import uuid

import pytest

import cloudlib
import clusters
import scenario
from scenario import ComputeFleet, idle_report, temporary_database

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REQUESTS = 300
HOSTS = [f"rq-h{i:02d}" for i in range(10)]
DAEMONS = ("sched-a", "sched-b")
REQUEST_THREADS = 8
SETTLE = 120


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if not clusters.rabbitmq_available():
        pytest.skip("RabbitMQ's server is not installed (apt-get install "
                    "rabbitmq-server)")
    with clusters.RabbitCluster(tmp_path_factory.mktemp("rabbit-cluster")) as c:
        yield c


class _Cloud(scenario.BurstCloud):
    """One scenario's cloud on its own vhost of the cluster."""

    def __init__(self, cluster, workdir, name: str, db_url: str):
        self.cluster = cluster
        self.vhost = cluster.add_vhost(f"{name}_{uuid.uuid4().hex[:6]}")
        self.cloud = cloudlib.Cloud(workdir, name)
        rabbit = {"rabbit_quorum_queue": True,
                  "kombu_failover_strategy": "shuffle",
                  "rabbit_retry_interval": 1, "rabbit_retry_backoff": 1,
                  "rabbit_interval_max": 2, "kombu_reconnect_delay": 0.5}
        self.overrides = {
            "DEFAULT": {"transport_url": cluster.url(vhost=self.vhost)},
            "oslo_messaging_rabbit": rabbit,
            "scheduler": {"request_threads": REQUEST_THREADS,
                          "periodic_task_interval": 2}}
        scenario.use_database(self.cloud, db_url, self.overrides)
        self.fleet = ComputeFleet(self.cloud.config_file, self.cloud.scheduler_topic,
                                  self.cloud.compute_topic,
                                  {h: idle_report(h, 8, 16384, 400) for h in HOSTS})
        self.daemons, self.ports = scenario.daemons_with_endpoints(
            self.cloud, DAEMONS, self.overrides)
        self.uuids: list[str] = []
        self.evidence = clusters.FailureEvidence(f"{name}-{self.vhost}")
        self.evidence.folder(workdir)
        self.evidence.folder(cluster.workdir)
        self.evidence.probe("broker", lambda: cluster.queue_report(self.vhost))
        self.evidence.probe("requests", lambda: scenario.request_states(
            self.cloud, self.fleet, self.uuids))
        self.evidence.probe("daemons", self.endpoints_report)
        self.evidence.probe("sender", self.sender_report)
        # The test's own oslo.messaging (its client, the fleet's RPC server)
        # fails over too: what it said, e.g. a queue it deleted and
        # declared anew after a 404, belongs with the evidence.
        self.oslo_said = _Remembered()
        logging.getLogger("oslo_messaging").addHandler(self.oslo_said)
        self.evidence.probe("test-process-oslo-messaging", self.oslo_said.text)
        self.daemons.start_all()
        self.fleet.register(self.cloud, HOSTS, 2.0, 2.5)
        self.watch()

    def burst(self, count: int) -> list[tuple]:
        flavor = cloudlib.named_flavor("m1.tiny")
        requests = [cloudlib.havana_request(flavor) for _ in range(count)]
        self.uuids += [u for _, _, uuids in requests for u in uuids]
        return requests

    def send(self, requests) -> None:
        self.cast(requests, admin_password="cluster-secret")

    def consumer_node(self) -> str | None:
        """The node a consumer of the scheduler queue is connected through:
        consumer -> its channel -> its connection -> the server port."""
        node = next(n for n in self.cluster.node_names if self.cluster.is_running(n))

        def listed(*args):
            return json.loads(self.cluster.ctl(node, *args, "-p", self.vhost,
                                               "--formatter", "json") or "[]")

        channels = [row["channel_pid"] for row in listed(
            "list_consumers", "queue_name", "channel_pid")
            if row["queue_name"] == self.cloud.scheduler_topic]
        connections = {row["pid"]: row["connection"]
                       for row in listed("list_channels", "pid", "connection")}
        ports = {row["pid"]: row["port"]
                 for row in listed("list_connections", "pid", "port")}
        for channel in channels:
            port = ports.get(connections.get(channel))
            for name in self.cluster.node_names:
                if self.cluster.port_of(name) == port:
                    return name
        return None

    def settle(self, name: str, uuids: list[str], burst_start: float) -> scenario.Audit:
        return self.audit(name, uuids, burst_start, SETTLE,
                          "nova_sched_broker_reconnects_total")

    def check(self, audit: scenario.Audit) -> None:
        problems = audit.problems(cast_twice_allowed=REQUEST_THREADS * len(DAEMONS))
        assert not problems, "\n".join(problems) + "\n" + scenario.evidence(
            self.cloud, DAEMONS, audit.rows, audit.casts, audit.allocations,
            audit.lost + audit.unannounced)
        assert not audit.errors, {u: audit.faults[u] for u in audit.errors[:5]}
        assert all(self.daemons.alive().values()), self.daemons.alive()
        for name in DAEMONS:
            log = self.cloud.log_text(name)
            # oslo's notifier's words for a notification dropped, and ours.
            assert "Could not send notification" not in log
            assert "was not sent" not in log
            assert "cluster-secret" not in log

    def close(self) -> None:
        logging.getLogger("oslo_messaging").removeHandler(self.oslo_said)
        super().close()
        # The daemons' last lines (their shutdown) into what was kept.
        self.evidence.refresh()


class _Remembered(logging.Handler):
    """oslo.messaging's warnings and errors in the test process, timed."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.created:.3f} {record.levelname} {record.name}: "
                          f"{record.getMessage()[:500]}")

    def text(self) -> str:
        return "\n".join(self.lines)


def _cast_in_background(cloud: _Cloud, requests) -> threading.Thread:
    thread = threading.Thread(target=cloud.send, args=(requests,), daemon=True)
    thread.start()
    return thread


def test_the_scheduler_queue_leader_killed_mid_burst(cluster, workdir, rabbitmq):
    with temporary_database("postgresql") as db_url:
        c = _Cloud(cluster, workdir("rq-leader"), "rqleader", db_url)
        try:
            leader = cluster.leader_of(c.cloud.scheduler_topic, c.vhost)
            assert leader, "the scheduler queue should be a quorum queue with a leader"
            requests = c.burst(REQUESTS)
            uuids = [u for _, _, (u,) in requests]
            burst_start = time.monotonic()
            sender = _cast_in_background(c, requests)
            cloudlib.wait_until(lambda: c.fleet.count() >= REQUESTS // 5, 60, 0.05,
                                "a fifth of the burst placed")
            killed_at = time.monotonic()
            cluster.kill(leader)
            sender.join(120)
            assert not sender.is_alive(), "casting the burst never finished"
            audit = c.settle("rabbit-leader-killed", uuids, burst_start)
            new_leader = cluster.leader_of(c.cloud.scheduler_topic, c.vhost)
            cluster.start_node(leader)
            print(f"leader {leader} killed {killed_at - burst_start:.2f}s into the "
                  f"burst; new leader {new_leader}", flush=True)
            c.check(audit)
            assert new_leader and new_leader != leader
            assert audit.longest_pause < 20, audit.longest_pause
            # Back in the cluster, the node takes part again: a request after.
            (spec, fprops, (last,)), = c.burst(1)
            c.send([(spec, fprops, [last])])
            cloudlib.wait_until(lambda: scenario.settled(
                c.cloud.instances([last]), c.fleet.snapshot(), last), 30, 0.2,
                "a request after the node came back")
        except Exception as exc:
            c.evidence.keep(exc)
            raise
        finally:
            c.close()


def test_the_node_the_daemons_consume_through_killed_mid_burst(cluster, workdir,
                                                               rabbitmq):
    with temporary_database("postgresql") as db_url:
        c = _Cloud(cluster, workdir("rq-conn"), "rqconn", db_url)
        try:
            node = c.consumer_node()
            assert node in cluster.node_names, node
            requests = c.burst(REQUESTS)
            uuids = [u for _, _, (u,) in requests]
            burst_start = time.monotonic()
            sender = _cast_in_background(c, requests)
            cloudlib.wait_until(lambda: c.fleet.count() >= REQUESTS // 3, 60, 0.05,
                                "a third of the burst placed")
            cluster.kill(node)
            sender.join(120)
            assert not sender.is_alive(), "casting the burst never finished"
            audit = c.settle("rabbit-consumer-node-killed", uuids, burst_start)
            cluster.start_node(node)
            c.check(audit)
            assert audit.longest_pause < 20, audit.longest_pause
            reconnects = sum(scenario.metric_total(p, "nova_sched_broker_reconnects_total")
                             for p in c.ports.values())
            assert reconnects >= 1, "a daemon's consumer should have failed over"
            c.wait_healthy()
            # Failing over takes a fraction of a second: /healthz may never
            # have been polled meanwhile, but its verbose form tells.
            said = " ".join(scenario.http_get(p, "/healthz?verbose")[1]
                            for p in c.ports.values())
            print(f"/healthz?verbose: {said!r}; while failing over: "
                  f"{c.health.reasons(burst_start)[:4]}", flush=True)
            assert "broker connection lost; consuming again through" in said, said
        except Exception as exc:
            c.evidence.keep(exc)
            raise
        finally:
            c.close()


def test_the_whole_cluster_stopped_and_started_with_requests_queued(
        cluster, workdir, rabbitmq):
    """The daemons are frozen (SIGSTOP) while a burst is cast, so that it
    waits in the broker (in the queue, or taken and unacknowledged); the
    whole cluster is stopped and started; the daemons thawed find their
    connections gone, reconnect by themselves and place every request."""
    with temporary_database("postgresql") as db_url:
        c = _Cloud(cluster, workdir("rq-all"), "rqall", db_url)
        try:
            # A real fake compute process beside the test's fleet: its
            # reports and the casts to it cross the cluster too.
            c.cloud.start_compute("rq-fake", 8, 16384, 400, report_interval=1.0)
            c.cloud.wait_for_nodes(["rq-fake"])
            requests = c.burst(150)
            uuids = [u for _, _, (u,) in requests]
            for name in DAEMONS:
                c.cloud.procs[name].send_signal(signal.SIGSTOP)
            try:
                burst_start = time.monotonic()
                c.send(requests)
                held = cluster.queue_depth(c.cloud.scheduler_topic, c.vhost)
                stopped_at = time.monotonic()
                cluster.stop_all()
                time.sleep(2)
                cluster.start_all()
                queued = cluster.queue_depth(c.cloud.scheduler_topic, c.vhost)
                up_at = time.monotonic()
            finally:
                for name in DAEMONS:
                    c.cloud.procs[name].send_signal(signal.SIGCONT)
            audit = c.settle("rabbit-whole-cluster-restart", uuids, burst_start)
            first = min((t for u in uuids for _, _, t in audit.casts.get(u, [])
                         if t >= up_at), default=float("nan"))
            print(f"ready in the queue before the stop: {held}, after the restart: "
                  f"{queued} (the rest taken, unacknowledged, by the frozen "
                  f"daemons); cluster down and up in {up_at - stopped_at:.1f}s; "
                  f"first cast {first - up_at:.2f}s after the cluster was back",
                  flush=True)
            assert queued >= 150 - 2 * cloudlib_prefetch(), (held, queued)
            c.check(audit)
            c.wait_healthy()

            def fake_compute_reported_since_restart():
                (row,) = c.cloud.query(
                    "SELECT updated_at FROM compute_nodes WHERE host = 'rq-fake'")
                return row["updated_at"] is not None and row["updated_at"] > restarted

            # Naive UTC, as the daemon stamps its rows.
            restarted = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
            cloudlib.wait_until(fake_compute_reported_since_restart, 30, 0.5,
                                "the fake compute reporting again after the restart")
            c.cloud.assert_running()
        except Exception as exc:
            c.evidence.keep(exc)
            raise
        finally:
            c.close()


def cloudlib_prefetch() -> int:
    """What one daemon may hold unacknowledged (nova-sched's default)."""
    from nova_sched.conf.opts import DEFAULT_PREFETCH

    return DEFAULT_PREFETCH
