"""What the scenario tests share: a fleet played by the test, its daemons, checks.

The scenario tests (crash safety, database outage, scale-out, overload)
report their compute nodes themselves and catch every ``run_instance`` cast
to them with one RPC server, so they can count casts per instance; they run
several scheduler daemons of one cloud, and check every instance's row,
casts, claims and faults the same way.
"""

from __future__ import annotations

import collections
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

__all__ = ["ComputeFleet", "Daemons", "evidence", "idle_report", "node_limit",
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
    cloud._engine = sa.create_engine(query_url or url)
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
    done = done or settled
    started = time.monotonic()
    deadline = started + timeout
    while True:
        rows = cloud.instances(uuids)
        casts = fleet.snapshot()
        if all(done(rows, casts, u) for u in uuids) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    took = time.monotonic() - started
    time.sleep(grace)
    return cloud.instances(uuids), fleet.snapshot(), took


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
