"""How soon a restarted daemon serves, against a database of many nodes.

    python bench/startup_bench.py [--hosts 100000] [--repeats 2] [--smoke]

Fills a fresh SQLite file database with ``--hosts`` compute nodes and their
services (``nova-sched-manage db sync``, then the nodes' reports stored in
batches the way the daemon stores them), then starts ``nova-sched`` on a
private vhost of the local RabbitMQ and times, from the process start, the
first answer to a ``select_destinations`` call naming no instance (a whole
decision over every node, nothing claimed). It
also prints, measured in this process, how long loading every node into
the host table takes and how much memory the table then holds (tracemalloc).
Figures, not pass/fail; a daemon that does not answer within the deadline
is an error.
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys
import time
import tracemalloc
import tempfile
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
for path in (_ROOT, _ROOT / "tests" / "functional"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import cloudlib  # noqa: E402  (selects oslo.service's threading backend first)
import oslo_messaging  # noqa: E402

import nova_sched  # noqa: E402,F401
from nova_sched.conf import CONF  # noqa: E402
from nova_sched.db import api as db_api  # noqa: E402
from nova_sched.db import compute_nodes as db_nodes  # noqa: E402
from nova_sched.scheduler.cloud import compute_report
from nova_sched.scheduler.host_manager import HostManager  # noqa: E402

# Seconds a started daemon has to answer before the run is an error.
_DEADLINE = 120.0
_BATCH = 2000


def _report(i: int) -> dict:
    """Node i's report: hosts of five models, each with its own figures."""
    host = f"startup-host-{i:06d}"
    model = i % 5
    return {
        "host": host, "hypervisor_hostname": host, "vcpus": 32 + 16 * model,
        "memory_mb": 131072 * (1 + model), "local_gb": 2000,
        "vcpus_used": 0, "memory_mb_used": 0, "local_gb_used": 0,
        "free_ram_mb": 131072, "free_disk_gb": 2000, "disk_available_least": 2000,
        "running_vms": 0, "current_workload": i % 3,
        "hypervisor_type": "kvm", "hypervisor_version": 6002000,
        "cpu_info": f'{{"arch": "x86_64", "model": "model-{model}", '
                    '"features": ["sse4_2", "avx2"]}',
        "host_ip": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}",
        "supported_instances": [["x86_64", "kvm", "hvm"]],
        "stats": {"io_workload": i % 3, "num_instances": 0,
                  "rack": f"r{i % 40}"},
        "metrics": [],
    }


def fill(cloud: cloudlib.Cloud, hosts: int) -> float:
    """Store ``hosts`` nodes in the cloud's database; seconds it took."""
    cloud.db_sync()
    CONF([], project="nova-sched", default_config_files=[])
    CONF.set_override("connection", cloud.db_url, "database")
    db_api.configure(cloud.db_url)
    started = time.perf_counter()
    batch = []
    for i in range(hosts):
        batch.append(compute_report.validate(_report(i)))
        if len(batch) == _BATCH:
            db_nodes.store_reports(batch)
            batch = []
    if batch:
        db_nodes.store_reports(batch)
    return time.perf_counter() - started


def load_in_process() -> tuple[float, float]:
    """Seconds to load every node into a host table, and its MiB.

    Timed and measured in two loads: tracemalloc slows the one it watches.
    """
    gc.collect()
    manager = HostManager()
    started = time.perf_counter()
    manager.full_resync()
    seconds = time.perf_counter() - started
    del manager
    gc.collect()
    tracemalloc.start()
    manager = HostManager()
    manager.full_resync()
    size, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del manager
    return seconds, size / 2**20


def first_answer(cloud: cloudlib.Cloud) -> float:
    """Seconds from starting the daemon to its first decision's answer.

    A ``select_destinations`` for a request naming no instance: a whole
    decision over every node, nothing claimed.
    """
    spec, fprops, _ = cloudlib.havana_request(cloudlib.named_flavor("m1.small"))
    spec["instance_uuids"] = []
    client = cloud.client
    started = time.monotonic()
    proc = cloud.start_daemon()
    try:
        while time.monotonic() - started < _DEADLINE:
            if proc.poll() is not None:
                raise SystemExit("the daemon exited:\n" + cloud.log_tails(["scheduler"]))
            try:
                reply = client.client.prepare(version="2.7", timeout=2).call(
                    cloudlib.request_context(), "select_destinations",
                    request_spec=spec, filter_properties=fprops)
            except oslo_messaging.MessagingTimeout:  # not consuming yet
                continue
            if len(reply) != 1:
                raise SystemExit(f"select_destinations answered {reply!r}")
            return time.monotonic() - started
        raise SystemExit(f"no answer within {_DEADLINE:.0f} s:\n"
                         + cloud.log_tails(["scheduler"]))
    finally:
        cloud.stop("scheduler")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=2,
                        help="daemon starts timed (default: %(default)s)")
    parser.add_argument("--smoke", action="store_true",
                        help="2,000 hosts, one start: seconds, for CI")
    args = parser.parse_args(argv)
    if args.smoke:
        args.hosts, args.repeats = 2000, 1
    if not cloudlib.rabbit_reachable():
        raise SystemExit("RabbitMQ is not reachable at 127.0.0.1:5672")
    with tempfile.TemporaryDirectory(prefix="nova-sched-startup-") as workdir:
        cloud = cloudlib.Cloud(Path(workdir), "startup")
        # Nodes stay up without heartbeats for as long as the run lasts.
        cloud.write_config(cloud.config_file, {"DEFAULT": {"service_down_time": 3600}})
        try:
            print(f"python {sys.version.split()[0]}; {args.hosts:,} compute nodes "
                  f"in a SQLite file database; {time.strftime('%Y-%m-%d')}")
            print(f"  stored the nodes' reports in {fill(cloud, args.hosts):.1f} s")
            seconds, mib = load_in_process()
            print(f"  host table loaded in {seconds:.2f} s, holding {mib:,.0f} MiB "
                  f"({mib * 2**20 / args.hosts:,.0f} bytes per node)")
            for attempt in range(args.repeats):
                print(f"  daemon start {attempt + 1}: first answer after "
                      f"{first_answer(cloud):.2f} s")
        finally:
            cloud.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
