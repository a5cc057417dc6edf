"""A three-node MariaDB Galera cluster: a node dies, writers conflict, claims stay exact.

A private Galera cluster (``clusters.GaleraCluster``, its own ports and
data, beside the machine's own MariaDB) with an haproxy of its own in
front, as OpenStack deployments run it: node 1 active, nodes 2 and 3
backups, health-checked every 500 ms. The broker is the machine's own
RabbitMQ (a private vhost); the test plays the compute fleet.

- **The active node SIGKILLed mid-burst.** Two daemons write through the
  haproxy; node 1 dies a moment into a burst of 300 requests. Their
  connections to it fail at once (2013), every writer on the other nodes
  stalls while the cluster drops the dead member, and the haproxy sends
  new connections to node 2. Every instance placed once, no node past its
  limits, the claims exact when read on each surviving node, and the
  daemons back within seconds. Node 1 then rejoins.
- **Writers on different nodes.** Daemon A writes to node 1, daemon B to
  node 2, 30 requests in a burst for 24 slots on three hosts: Galera
  rejects the loser of every conflicting pair of claims at certification
  (error 1213); each is retried whole. Exactly 24 placed, 6 in ERROR with
  NoValidHost, no claim leaked or doubled. The retries are the cost, and
  the test prints them.
"""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

import cloudlib
import clusters
import scenario
from scenario import ComputeFleet, idle_report

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DAEMONS = ("sched-a", "sched-b")
REQUEST_THREADS = 8
DATABASE = "nova_sched"


@pytest.fixture(scope="module")
def galera(tmp_path_factory):
    if not clusters.galera_available():
        pytest.skip("MariaDB's server with galera-4 is not installed "
                    "(apt-get install mariadb-server galera-4 rsync)")
    if not clusters.haproxy_available():
        pytest.skip("haproxy is not installed (tools/ensure_cluster_packages.sh)")
    with clusters.GaleraCluster(tmp_path_factory.mktemp("galera")) as g:
        g.start_haproxy()
        yield g


class _Cloud(scenario.BurstCloud):
    """One scenario's cloud: its own database on the cluster."""

    def __init__(self, galera, workdir, name: str, hosts: dict[str, tuple],
                 per_daemon_node: dict[str, int] | None = None):
        for node in range(1, galera.nodes + 1):
            if not galera.is_running(node):  # an earlier scenario failed early
                galera.start_node(node)
        self.galera = galera
        self.database = f"{DATABASE}_{name}"
        galera.create_database(self.database)
        self.cloud = cloudlib.Cloud(workdir, name)
        self.overrides = {"scheduler": {"request_threads": REQUEST_THREADS,
                                        "periodic_task_interval": 2}}
        scenario.use_database(self.cloud, galera.haproxy_url(self.database),
                              self.overrides)
        self.fleet = ComputeFleet(self.cloud.config_file, self.cloud.scheduler_topic,
                                  self.cloud.compute_topic,
                                  {h: idle_report(h, *shape) for h, shape in hosts.items()})
        per_daemon = {name: {"database": {"connection": galera.url(node, self.database)}}
                      for name, node in (per_daemon_node or {}).items()}
        self.daemons, self.ports = scenario.daemons_with_endpoints(
            self.cloud, DAEMONS, self.overrides, per_daemon)
        self.uuids: list[str] = []
        self.evidence = clusters.FailureEvidence(f"{name}-{self.cloud.tag}")
        self.evidence.folder(workdir)
        self.evidence.folder(galera.workdir)
        self.evidence.probe("galera", self.galera_report)
        self.evidence.probe("broker", lambda: scenario.broker_report(self.cloud))
        self.evidence.probe("requests", lambda: scenario.request_states(
            self.cloud, self.fleet, self.uuids))
        self.evidence.probe("daemons", self.endpoints_report)
        self.evidence.probe("sender", self.sender_report)
        self.daemons.start_all()
        self.fleet.register(self.cloud, list(hosts), 2.0, 2.5)
        self.watch()

    def galera_report(self) -> str:
        lines = []
        for node in range(1, self.galera.nodes + 1):
            if not self.galera.is_running(node):
                lines.append(f"g{node}: not running")
                continue
            status = self.galera.status(node)
            lines.append(f"g{node}: " + " ".join(
                f"{k}={status.get(k)}" for k in (
                    "wsrep_cluster_size", "wsrep_cluster_status", "wsrep_ready",
                    "wsrep_local_state_comment", "wsrep_last_committed",
                    "wsrep_local_cert_failures", "wsrep_local_bf_aborts")))
        return "\n".join(lines)

    def close(self) -> None:
        super().close()
        self.evidence.refresh()

    def settle(self, name: str, uuids: list[str], burst_start: float,
               timeout: float = 120) -> scenario.Audit:
        return self.audit(name, uuids, burst_start, timeout,
                          "nova_sched_database_retries_total")

    def audit_on_node(self, node: int, uuids: list[str]) -> scenario.Audit:
        """The same audit read straight from one node of the cluster."""
        engine = sa.create_engine(self.galera.url(node, self.database))
        kept = self.cloud._engine
        self.cloud._engine = engine
        try:
            rows = self.cloud.instances(uuids)
            return scenario.Audit(self.cloud, self.fleet, uuids, rows,
                                  self.fleet.snapshot(),
                                  scenario.scheduled_instances(self.collector))
        finally:
            self.cloud._engine = kept
            engine.dispose()


def test_the_active_node_killed_mid_burst(galera, workdir, rabbitmq):
    hosts = {f"gl-h{i:02d}": (8, 16384, 400) for i in range(10)}
    c = _Cloud(galera, workdir("galera-kill"), "glkill", hosts)
    try:
        flavor = cloudlib.named_flavor("m1.tiny")
        requests = [cloudlib.havana_request(flavor) for _ in range(300)]
        uuids = [u for _, _, (u,) in requests]
        c.uuids = uuids
        burst_start = time.monotonic()
        sender = threading.Thread(target=c.cast, args=(requests,), daemon=True)
        sender.start()
        cloudlib.wait_until(lambda: c.fleet.count() >= 60, 60, 0.05,
                            "a fifth of the burst placed")
        killed_at = time.monotonic()
        galera.kill(1)
        sender.join(60)
        audit = c.settle("galera-active-node-killed", uuids, burst_start)
        print(f"node 1 killed {killed_at - burst_start:.2f}s into the burst", flush=True)
        problems = audit.problems(cast_twice_allowed=0)
        assert not problems, "\n".join(problems) + "\n" + scenario.evidence(
            c.cloud, DAEMONS, audit.rows, audit.casts, audit.allocations, audit.lost)
        assert not audit.errors, {u: audit.faults[u] for u in audit.errors[:5]}
        assert audit.longest_pause < 20, audit.longest_pause
        for node in (2, 3):
            on_node = c.audit_on_node(node, uuids)
            assert not on_node.problems(), (node, on_node.problems())
            assert set(on_node.placed) == set(audit.placed), node
        assert all(c.daemons.alive().values()), c.daemons.alive()
        galera.start_node(1)
        on_node = c.audit_on_node(1, uuids)
        assert not on_node.problems() and set(on_node.placed) == set(audit.placed)
    except Exception as exc:
        c.evidence.keep(exc)
        raise
    finally:
        c.close()


def test_writers_on_different_nodes_conflict_and_are_retried(galera, workdir,
                                                             rabbitmq):
    # 8 m1.small fit each host (2731 MB x 1.5 = 4096 MB): 24 slots.
    hosts = {f"gw-h{i}": (4, 2731, 100) for i in range(3)}
    c = _Cloud(galera, workdir("galera-writers"), "glwriters", hosts,
               per_daemon_node={"sched-a": 1, "sched-b": 2})
    try:
        flavor = cloudlib.named_flavor("m1.small")
        requests = [cloudlib.havana_request(flavor) for _ in range(30)]
        uuids = [u for _, _, (u,) in requests]
        c.uuids = uuids
        burst_start = time.monotonic()
        c.cast(requests)
        audit = c.settle("galera-writers-on-two-nodes", uuids, burst_start, 60)
        deadlocks = sum(
            scenario.metric_total(p, "nova_sched_database_retries_total")
            for p in c.ports.values())
        print(f"transactions retried after a certification conflict or "
              f"deadlock: {deadlocks:.0f}", flush=True)
        problems = audit.problems()
        assert not problems, "\n".join(problems)
        assert len(audit.placed) == 24, (len(audit.placed), audit.faults)
        assert all(m.startswith("No valid host") for m in audit.faults.values()), \
            audit.faults
        for node in (1, 2, 3):
            on_node = c.audit_on_node(node, uuids)
            assert not on_node.problems(), (node, on_node.problems())
        for name in DAEMONS:
            assert "Deadlock found" not in " ".join(
                line for line in c.cloud.log_text(name).splitlines()
                if "ERROR" in line), c.cloud.log_tails([name], 40)
    except Exception as exc:
        c.evidence.keep(exc)
        raise
    finally:
        c.close()

