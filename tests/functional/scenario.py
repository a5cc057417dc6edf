"""What the scenario tests share: a fleet played by the test, its daemons, checks.

The scenario tests (crash safety, database outage, scale-out, overload)
report their compute nodes themselves and catch every ``run_instance`` cast
to them with one RPC server, so they can count casts per instance; they run
several scheduler daemons of one cloud, and check every instance's row,
casts, claims and faults the same way.
"""

from __future__ import annotations

import collections
import contextlib
import re
import signal
import threading
import time
from pathlib import Path

import cloudlib

try:
    from tests.db_backends import temporary_database
except ImportError:  # pytest run from elsewhere than the repository root
    import sys

    sys.path.insert(0, str(cloudlib.REPO))
    from tests.db_backends import temporary_database

__all__ = ["Audit", "BurstCloud", "ComputeFleet", "Daemons", "HealthPoller", "Supervisor",
           "broker_report", "claim_sums", "daemons_with_endpoints", "evidence", "free_port", "http_get",
           "idle_report", "metric_total", "node_limit", "request_states", "scheduled_instances",
           "settled", "temporary_database", "use_database", "wait_settled"]

READY_LINE = "consuming topic"  # logged by a daemon consuming its topic
READY_TIMEOUT = 30


def use_database(cloud: cloudlib.Cloud, url: str, overrides: dict | None = None,
                 query_url: str | None = None) -> None:
    """Point the cloud at the server database ``url`` and migrate it; the
    test's own queries go to ``query_url`` (default: the same database)."""
    import sqlalchemy as sa

    cloud.db_url = url
    cloud.write_config(cloud.config_file, overrides)
    # Checked out connections are tested first: a database node killed by
    # the test leaves the pool's connections dead.
    cloud._engine = sa.create_engine(query_url or url, pool_pre_ping=True)
    cloud.db_sync()


def idle_report(host: str, vcpus: int, memory_mb: int, local_gb: int,
                reserved_mb: int = 0) -> dict:
    """A compute_node dict (CONTRACT section 3) of an idle node."""
    return {
        "host": host, "hypervisor_hostname": host, "vcpus": vcpus,
        "memory_mb": memory_mb, "local_gb": local_gb, "vcpus_used": 0,
        "memory_mb_used": 0, "local_gb_used": 0, "free_ram_mb": memory_mb,
        "free_disk_gb": local_gb, "disk_available_least": local_gb,
        "running_vms": 0, "current_workload": 0, "hypervisor_type": "kvm",
        "hypervisor_version": 6002000, "cpu_info": "{}", "host_ip": "192.0.2.10",
        "supported_instances": [["x86_64", "kvm", "hvm"]],
        "stats": {"num_instances": 0, "io_workload": 0}, "metrics": [],
        "reserved_host_memory_mb": reserved_mb, "reserved_host_disk_mb": 0,
        "reserved_host_cpus": 0,
    }


class ComputeFleet:
    """Every compute node at once: reports them, records the casts to them."""

    def __init__(self, config_file: Path, scheduler_topic: str, compute_topic: str,
                 reports: dict[str, dict]):
        import oslo_messaging as messaging

        self.reports = dict(reports)
        # uuid -> [(host, node, monotonic time of arrival)]
        self.casts: dict[str, list[tuple[str | None, str | None, float]]] = \
            collections.defaultdict(list)
        self.arrivals: list[float] = []
        self.unnamed = 0
        self.report_failures = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.conf = cloudlib.client_conf(config_file)
        self.transport = messaging.get_rpc_transport(self.conf)
        self.reporter = cloudlib.ContractClient(config_file, topic=scheduler_topic)
        fleet = self

        class Endpoint:
            # Any 2.x: the scheduler casts run_instance at 2.37.
            target = messaging.Target(version="2.99")

            def run_instance(self, ctxt, **kwargs):
                instance = kwargs.get("instance") or {}
                now = time.monotonic()
                with fleet._lock:
                    if not instance.get("uuid"):
                        fleet.unnamed += 1
                        return
                    fleet.casts[instance["uuid"]].append(
                        (instance.get("host"), kwargs.get("node"), now))
                    fleet.arrivals.append(now)

        # The binding compute.* catches the cast to compute.<host> of every
        # host (host names without dots), as bench/e2e_peers.py's Recorder.
        self.server = messaging.get_rpc_server(
            self.transport, messaging.Target(topic=compute_topic, server="*"),
            [Endpoint()])
        self.server.start()
        self._thread: threading.Thread | None = None

    def add(self, host: str, report: dict) -> None:
        with self._lock:
            self.reports[host] = report

    def register(self, cloud: cloudlib.Cloud, hosts: list[str], interval: float,
                 settle: float) -> None:
        """Report until every host is stored (a report cast before a daemon
        has declared its queue is dropped), then every ``interval`` seconds;
        wait ``settle`` seconds for every daemon's table to read the rows
        the others stored."""
        def registered():
            self.report_all()
            time.sleep(0.5)
            rows = cloud.query("SELECT host FROM compute_nodes")
            return set(hosts) <= {r["host"] for r in rows}

        cloudlib.wait_until(registered, 30, 0.1, "the fleet's reports stored")
        self.start_reporting(interval)
        time.sleep(settle)

    def report_all(self) -> None:
        with self._lock:
            reports = list(self.reports.values())
        for report in reports:
            self.reporter.compute_node_update(cloudlib.request_context(), report)

    def start_reporting(self, interval: float) -> None:
        """Keep every host's heartbeat fresh."""
        def loop():
            while not self._stop.wait(interval):
                try:
                    self.report_all()
                except Exception as err:  # counted, shown by the tests
                    self.report_failures += 1
                    print(f"report round failed: {err}", flush=True)

        self._thread = threading.Thread(target=loop, name="reports", daemon=True)
        self._thread.start()

    def snapshot(self) -> dict[str, list[tuple[str | None, str | None, float]]]:
        with self._lock:
            return {u: list(c) for u, c in self.casts.items()}

    def count(self) -> int:
        with self._lock:
            return len(self.casts)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        try:
            self.server.stop()
            self.server.wait()
        finally:
            self.reporter.cleanup()
            self.transport.cleanup()


class Daemons:
    """Scheduler daemons of one cloud, each with its own config and host name:
    start, wait for, kill and restart."""

    def __init__(self, cloud: cloudlib.Cloud, names: tuple[str, ...],
                 overrides: dict):
        self.cloud = cloud
        self.names = tuple(names)
        self.configs: dict[str, Path] = {}
        self.kills: list[tuple[str, float]] = []
        self.restarts = 0
        self._starts: dict[str, int] = {}
        for name in self.names:
            sections = {group: dict(values) for group, values in overrides.items()}
            sections.setdefault("DEFAULT", {})["host"] = \
                f"{name}-{cloud.tag}".replace("_", "-")
            self.configs[name] = cloud.write_config(cloud.workdir / f"{name}.conf",
                                                    sections)

    def start(self, name: str) -> None:
        self._starts[name] = self.cloud.log_text(name).count(READY_LINE) + 1
        self.cloud.start_daemon(name, config_file=self.configs[name])

    def ready(self, name: str) -> bool:
        proc = self.cloud.procs[name]
        if proc.poll() is not None:
            raise AssertionError(f"daemon {name} exited with {proc.returncode}\n"
                                 + self.cloud.log_tails([name], 60))
        return self.cloud.log_text(name).count(READY_LINE) >= self._starts[name]

    def wait_ready(self, name: str) -> None:
        try:
            cloudlib.wait_until(lambda: self.ready(name), READY_TIMEOUT, 0.1,
                                f"daemon {name} to consume its topic")
        except TimeoutError as err:
            raise AssertionError(f"{err}\n{self.cloud.log_tails([name], 60)}") from None

    def start_all(self) -> None:
        for name in self.names:
            self.start(name)
        for name in self.names:
            self.wait_ready(name)

    def kill_and_restart(self, name: str) -> None:
        proc = self.cloud.procs[name]
        assert proc.poll() is None, f"{name} died by itself"
        proc.send_signal(signal.SIGKILL)
        self.kills.append((name, time.monotonic()))
        proc.wait(10)
        self.start(name)
        self.restarts += 1

    def alive(self) -> dict[str, bool]:
        return {name: self.cloud.procs[name].poll() is None for name in self.names}

    def log_lines(self, marker: str) -> list[str]:
        return [line for name in self.names
                for line in self.cloud.log_text(name).splitlines() if marker in line]


def settled(rows: dict, casts: dict, uuid: str) -> bool:
    """In ERROR, or placed and its cast arrived."""
    row = rows.get(uuid)
    if row is None:
        return False
    if row["vm_state"] == "error":
        return True
    return row["host"] is not None and uuid in casts


def wait_settled(cloud: cloudlib.Cloud, fleet: ComputeFleet, uuids: list[str],
                 timeout: float, grace: float = 0.5,
                 done=None) -> tuple[dict, dict, float]:
    """Until every instance is settled (``done(rows, casts, uuid)``, by
    default ``settled``) or ``timeout`` passes, then ``grace`` seconds more
    for a late cast still on its way: (rows, casts, seconds it took)."""
    import sqlalchemy as sa

    done = done or settled
    started = time.monotonic()
    deadline = started + timeout
    while True:
        try:
            rows = cloud.instances(uuids)
        except sa.exc.OperationalError:  # the test's database node just died
            time.sleep(0.3)
            continue
        casts = fleet.snapshot()
        if all(done(rows, casts, u) for u in uuids) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    took = time.monotonic() - started
    time.sleep(grace)
    return cloud.instances(uuids), fleet.snapshot(), took


def claim_sums(allocations: list[dict]) -> dict[int, list[int]]:
    """node id -> [memory_mb, vcpus, disk_mb, instances] summed over the
    allocation rows given: what the node's running totals must say."""
    sums: dict[int, list[int]] = collections.defaultdict(lambda: [0, 0, 0, 0])
    for a in allocations:
        s = sums[a["compute_node_id"]]
        s[0] += a["memory_mb"]
        s[1] += a["vcpus"]
        s[2] += a["disk_mb"]
        s[3] += 1
    return sums


def node_limit(node: dict, resource: str) -> float:
    """A compute_nodes row's limit for ``resource`` (ram, vcpu, disk in MB)."""
    if resource == "ram":
        ratio = node["ram_allocation_ratio"] or cloudlib.RAM_RATIO
        return node["memory_mb"] * ratio - (node["reserved_host_memory_mb"] or 0)
    if resource == "vcpu":
        ratio = node["cpu_allocation_ratio"] or cloudlib.CPU_RATIO
        return node["vcpus"] * ratio - (node["reserved_host_cpus"] or 0)
    ratio = node["disk_allocation_ratio"] or cloudlib.DISK_RATIO
    return node["local_gb"] * 1024 * ratio - (node["reserved_host_disk_mb"] or 0)


def evidence(cloud: cloudlib.Cloud, names: tuple[str, ...], rows: dict, casts: dict,
             allocs: dict, uuids: list[str], limit: int = 5) -> str:
    """Rows, casts, claims, faults and daemon log lines of some instances."""
    out = []
    for u in uuids[:limit]:
        out.append(f"== instance {u}\n  row: {rows.get(u)}\n  casts: {casts.get(u)}\n"
                   f"  allocations: {allocs.get(u)}\n  faults: "
                   f"{[f['message'][:300] for f in cloud.faults(u)]}")
        for name in names:
            lines = [line for line in cloud.log_text(name).splitlines() if u in line]
            out.append(f"  {name} log ({cloud.logs[name]}):\n    "
                       + "\n    ".join(lines[-12:]))
    return "\n".join(out)


def broker_report(cloud: cloudlib.Cloud) -> str:
    """The scheduler queue on the machine's broker (a passive declare):
    messages ready and consumers, for a failed scenario's kept evidence."""
    probe = cloudlib.BrokerProbe(cloud.broker.vhost)
    try:
        return (f"{cloud.scheduler_topic} on vhost {cloud.broker.vhost}: "
                f"(ready, consumers) = {probe.queue(cloud.scheduler_topic)}")
    finally:
        probe.close()


def request_states(cloud: cloudlib.Cloud, fleet: ComputeFleet, uuids: list[str]) -> str:
    """Every request of a burst as the database and the fleet saw it, the
    unsettled first: its row (or that none was ever recorded), the casts
    that reached the fleet, its claims, faults and redelivery count. Text,
    for a failed scenario's kept evidence."""
    rows = cloud.instances(uuids)
    casts = fleet.snapshot()
    claims = collections.Counter(
        a["instance_uuid"] for a in cloud.query("SELECT instance_uuid FROM allocations"))
    unsettled = [u for u in uuids if not settled(rows, casts, u)]
    lines = [f"{len(uuids)} requests: {sum(1 for u in uuids if u in rows)} recorded, "
             f"{sum(1 for u in uuids if u not in rows)} never recorded, "
             f"{len(unsettled)} unsettled (listed first)"]
    for u in unsettled + [u for u in uuids if u not in unsettled]:
        row = rows.get(u)
        if row is None:
            lines.append(f"{u} NEVER RECORDED casts={len(casts.get(u, []))}")
            continue
        lines.append(
            f"{u} {'UNSETTLED ' if u in unsettled else ''}vm_state={row['vm_state']} "
            f"task_state={row['task_state']} host={row['host']} node={row['node']} "
            f"created_at={row['created_at']} scheduled_at={row['scheduled_at']} "
            f"cast_at={row['cast_at']} updated_at={row['updated_at']} "
            f"claims={claims.get(u, 0)} casts={[(h, round(t, 3)) for h, _, t in casts.get(u, [])]}")
        if u in unsettled or row["vm_state"] == "error":
            for fault in cloud.faults(u):
                lines.append(f"    fault: {fault['message'][:300]}")
    with contextlib.suppress(Exception):  # older schemas have no such table
        for d in cloud.query("SELECT * FROM request_deliveries"):
            lines.append(f"delivery: {d}")
    return "\n".join(lines)


class Audit:
    """What a burst left behind, checked the same way by every scenario.

    ``problems()`` lists what must never happen: an instance lost (neither
    ERROR nor placed and cast), cast to another host than its row names or
    cast while in ERROR, claimed twice or not at all, a node's totals
    apart from its allocations or past its limits, a placed instance
    without its ``scheduled`` notification. ``line()`` is the figures the
    issue notes quote: sent, placed, lost, claimed twice, cast twice and
    the longest pause between two casts during the burst.
    """

    def __init__(self, cloud: cloudlib.Cloud, fleet: ComputeFleet, uuids: list[str],
                 rows: dict, casts: dict, scheduled: set[str] | None = None,
                 burst: tuple[float, float] | None = None):
        self.uuids = list(uuids)
        self.rows, self.casts = rows, casts
        allocs = cloud.query(
            "SELECT a.instance_uuid, a.compute_node_id, a.memory_mb, a.vcpus, "
            "a.disk_mb, n.host AS node_host, n.hypervisor_hostname AS node_name "
            "FROM allocations a JOIN compute_nodes n ON n.id = a.compute_node_id")
        by_instance = collections.defaultdict(list)
        for a in allocs:
            by_instance[a["instance_uuid"]].append(a)
        # For ``evidence``: an instance's claims as they are, so that a
        # placed instance whose cast never arrived does not read as one
        # whose claim was released.
        self.allocations = {u: [(a["node_host"], a["memory_mb"]) for a in held]
                            for u, held in by_instance.items()}
        self.errors = [u for u in uuids if (rows.get(u) or {}).get("vm_state") == "error"]
        self.placed = [u for u in uuids if u not in self.errors
                       and (rows.get(u) or {}).get("host")]
        self.lost = [u for u in uuids if not settled(rows, casts, u)]
        self.cast_twice = [u for u in uuids if len(casts.get(u, [])) > 1]
        self.elsewhere = [u for u in self.placed if u in casts
                          and {c[0] for c in casts[u]} != {rows[u]["host"]}]
        self.error_cast = [u for u in self.errors if u in casts]
        self.claimed_twice = [u for u, held in by_instance.items() if len(held) > 1]
        self.no_claim = [u for u in self.placed if u not in by_instance]
        self.stray_claims = [u for u, held in by_instance.items() if u in rows and (
            rows[u]["vm_state"] == "error" or (held[0]["node_host"], held[0]["node_name"])
            != (rows[u]["host"], rows[u]["node"]))]
        sums = claim_sums(allocs)
        self.drift, self.over = [], []
        for n in cloud.query("SELECT * FROM compute_nodes"):
            claimed = [n["claimed_memory_mb"], n["claimed_vcpus"], n["claimed_disk_mb"],
                       n["claimed_instances"]]
            if claimed != sums.get(n["id"], [0, 0, 0, 0]):
                self.drift.append((n["host"], claimed, sums.get(n["id"])))
            for res, value in (("ram", claimed[0]), ("vcpu", claimed[1]),
                               ("disk", claimed[2])):
                if value > node_limit(n, res):
                    self.over.append((n["host"], res, value, node_limit(n, res)))
        self.unannounced = ([] if scheduled is None
                            else [u for u in self.placed if u not in scheduled])
        arrivals = sorted(t for u in uuids for _, _, t in casts.get(u, []))
        if burst is not None:
            arrivals = [burst[0]] + [t for t in arrivals if t >= burst[0]]
        self.longest_pause = max((b - a for a, b in zip(arrivals, arrivals[1:])),
                                 default=0.0)
        self.faults = {u: (cloud.faults(u) or [{"message": "(no fault)"}])[-1]["message"]
                       for u in self.errors}

    def line(self, name: str) -> str:
        return (f"{name}: sent={len(self.uuids)} placed={len(self.placed)} "
                f"error={len(self.errors)} lost={len(self.lost)} "
                f"claimed_twice={len(self.claimed_twice) + len(self.drift)} "
                f"cast_twice={len(self.cast_twice)} "
                f"longest_pause={self.longest_pause:.2f}s")

    def problems(self, cast_twice_allowed: int = 0) -> list[str]:
        found = []
        for label, items in (("lost", self.lost), ("cast elsewhere", self.elsewhere),
                             ("cast while in ERROR", self.error_cast),
                             ("claimed twice", self.claimed_twice),
                             ("placed without a claim", self.no_claim),
                             ("claims of instances not placed there", self.stray_claims),
                             ("node totals apart from allocations", self.drift),
                             ("nodes past their limits", self.over),
                             ("placed without a scheduled notification",
                              self.unannounced)):
            if items:
                found.append(f"{len(items)} {label}: {items[:5]}")
        if len(self.cast_twice) > cast_twice_allowed:
            found.append(f"{len(self.cast_twice)} cast twice (at most "
                         f"{cast_twice_allowed} allowed): {self.cast_twice[:5]}")
        unexplained = {u: m for u, m in self.faults.items() if m == "(no fault)"}
        if unexplained:
            found.append(f"instances in ERROR without a fault: {list(unexplained)[:5]}")
        return found


def scheduled_instances(collector: cloudlib.NotificationCollector) -> set[str]:
    """Instances a ``scheduler.run_instance.scheduled`` notification named."""
    return {e["payload"].get("instance_id") for e in collector.snapshot()
            if e["event_type"] == "scheduler.run_instance.scheduled"}


class Supervisor:
    """Restarts daemons that exit, as systemd's ``Restart=always`` does."""

    def __init__(self, daemons: Daemons):
        self.daemons = daemons
        self.deaths: list[tuple[str, int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Supervisor":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            for name in self.daemons.names:
                proc = self.daemons.cloud.procs.get(name)
                if proc is not None and proc.poll() is not None:
                    self.deaths.append((name, proc.returncode, time.monotonic()))
                    self.daemons.start(name)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


free_port = cloudlib.free_port


def http_get(port: int, path: str) -> tuple[int, str]:
    """(status, body) of ``GET path`` on a daemon's endpoint; (0, why) when
    nothing answers."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}",
                                    timeout=2) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError as err:
        return 0, str(err)


def metric_total(port: int, name: str) -> float:
    """The sum of a metric's samples on a daemon's /metrics (0 if absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    status, text = http_get(port, "/metrics")
    if status != 200:
        return 0.0
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples if sample.name == name)


class HealthPoller:
    """Polls every daemon's /healthz a few times a second; keeps what was
    not ``200 ok`` (time, daemon, status, body)."""

    def __init__(self, ports: dict[str, int], interval: float = 0.2):
        self.ports = dict(ports)
        self.interval = interval
        self.unhealthy: list[tuple[float, str, int, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "HealthPoller":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for name, port in self.ports.items():
                status, body = http_get(port, "/healthz")
                if status != 200:
                    self.unhealthy.append((time.monotonic(), name, status,
                                           body.strip()[:200]))

    def reasons(self, since: float = 0.0) -> list[str]:
        """Distinct reasons seen since ``since``, in order."""
        seen: list[str] = []
        for t, name, status, body in self.unhealthy:
            line = f"{name}: {status} {body}"
            if t >= since and line not in seen:
                seen.append(line)
        return seen

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def daemons_with_endpoints(cloud: cloudlib.Cloud, names: tuple[str, ...],
                           overrides: dict, per_daemon: dict | None = None
                           ) -> tuple[Daemons, dict[str, int]]:
    """Daemons of ``cloud``, each serving /metrics and /healthz on a port of
    its own, with ``per_daemon[name]``'s options over ``overrides``;
    (daemons, name -> port)."""
    daemons = Daemons(cloud, names, overrides)
    ports = {}
    for name in names:
        ports[name] = free_port()
        sections = {group: dict(values) for group, values in overrides.items()}
        for group, values in ((per_daemon or {}).get(name) or {}).items():
            sections.setdefault(group, {}).update(values)
        sections.setdefault("DEFAULT", {})["host"] = \
            f"{name}-{cloud.tag}".replace("_", "-")
        sections["prometheus"] = {"enabled": True, "port": ports[name]}
        cloud.write_config(daemons.configs[name], sections)
    return daemons, ports


class BurstCloud:
    """What the cluster scenarios share once their cloud is up: cast a
    burst, settle and audit it, wait for the daemons' health.

    A subclass sets ``cloud``, ``fleet``, ``daemons``, ``ports`` (daemon ->
    its /healthz port), then calls ``watch()``.
    """

    cloud: cloudlib.Cloud
    fleet: ComputeFleet
    daemons: Daemons
    ports: dict[str, int]

    def watch(self) -> None:
        """Start listening to notifications and polling /healthz."""
        self.collector = cloudlib.NotificationCollector(self.cloud.config_file)
        self.health = HealthPoller(self.ports).start()

    # A cast oslo.messaging's client could not get confirmed by the broker
    # raises; a sender that wants it delivered casts it again (docs/
    # guarantees.md, "Delivery"). Each such failure is kept: the request
    # is the sender's until a cast of it is confirmed, not the daemons'.
    CAST_TRIES = 10

    def cast(self, requests, **extra) -> None:
        failures = self.__dict__.setdefault("unconfirmed", [])
        for spec, fprops, uuids in requests:
            for attempt in range(1, self.CAST_TRIES + 1):
                try:
                    self.cloud.client.run_instance(cloudlib.request_context(), spec,
                                                   fprops, **extra)
                    break
                except Exception as err:
                    failures.append((time.monotonic(), list(uuids), attempt,
                                     f"{type(err).__name__}: {err}"))
                    print(f"cast of {uuids} not confirmed (try {attempt}): "
                          f"{type(err).__name__}: {err}", flush=True)
                    if attempt == self.CAST_TRIES:
                        raise
                    time.sleep(0.5)

    def sender_report(self) -> str:
        """The casts the sender had to make again, for the kept evidence."""
        failures = getattr(self, "unconfirmed", [])
        return "\n".join([f"{len(failures)} casts not confirmed (each cast again)"]
                         + [f"{t:.3f} {uuids} try {n}: {err}"
                            for t, uuids, n, err in failures])

    def audit(self, name: str, uuids: list[str], burst_start: float,
              timeout: float, metric: str) -> Audit:
        """Settle the burst, wait for the notifications, audit, print the
        figures with each daemon's total of ``metric``."""
        rows, casts, took = wait_settled(self.cloud, self.fleet, uuids, timeout)
        placed = {u for u in uuids if (rows.get(u) or {}).get("host")
                  and rows[u]["vm_state"] != "error"}
        try:
            cloudlib.wait_until(lambda: scheduled_instances(self.collector) >= placed,
                                30, 0.3, "a scheduled notification for every placed one")
        except TimeoutError:
            pass  # the audit names the missing ones
        audit = Audit(self.cloud, self.fleet, uuids, rows, casts,
                      scheduled_instances(self.collector),
                      (burst_start, time.monotonic()))
        self._count_daemon_casts(audit)
        totals = {n: metric_total(p, metric) for n, p in self.ports.items()}
        print("\n" + audit.line(name) + f" settled_in={took:.1f}s "
              f"delivered_twice={len(audit.delivered_twice)} "
              f"casts_not_confirmed={len(getattr(self, 'unconfirmed', []))} {metric}={totals} "
              f"unhealthy={self.health.reasons(burst_start)[:4]}", flush=True)
        return audit

    def _count_daemon_casts(self, audit: Audit) -> None:
        """Count as cast twice only what the daemons cast twice.

        The fleet's RPC server (oslo.messaging, as nova-compute's) has a
        cast delivered again when its connection dies before the broker
        has its acknowledgement, and its duplicate filter remembers only
        the last 16 messages: such a cast arrives twice though the daemon
        cast it once. Every cast a daemon makes logs "Instance <uuid>
        scheduled to"; the other arrivals are ``delivered_twice``.
        """
        logs = "\n".join(self.cloud.log_text(n) for n in self.daemons.names)
        made = collections.Counter(re.findall(r"Instance (\S{36}) scheduled to ", logs))
        audit.delivered_twice = [u for u in audit.cast_twice if made[u] < 2]
        audit.cast_twice = [u for u in audit.cast_twice if made[u] >= 2]

    def endpoints_report(self) -> str:
        """Each daemon's /healthz?verbose and /metrics now, and what the
        poller saw unhealthy: text for a failed scenario's evidence."""
        parts = [f"unhealthy seen: {self.health.reasons()}"]
        for name, port in self.ports.items():
            parts.append(f"--- {name} /healthz?verbose: {http_get(port, '/healthz?verbose')}")
            parts.append(http_get(port, "/metrics")[1])
        return "\n".join(parts)

    def wait_healthy(self, timeout: float = 60) -> None:
        for name, port in self.ports.items():
            cloudlib.wait_until(lambda p=port: http_get(p, "/healthz")[0] == 200,
                                timeout, 0.2, f"{name} healthy again")

    def close(self) -> None:
        for closing in (getattr(self, "health", None), getattr(self, "collector", None),
                        getattr(self, "fleet", None)):
            if closing is not None:
                (closing.stop if isinstance(closing, HealthPoller) else closing.close)()
        self.cloud.close()
