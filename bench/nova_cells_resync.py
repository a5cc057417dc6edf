"""What the nova_cells source's reads cost at 10,000 compute nodes: a read by
change against a reconciliation (every node and instance read whole), and
whether decisions wait for either.

    python bench/nova_cells_resync.py                      # 10,000 nodes, 10 instances each
    python bench/nova_cells_resync.py --nodes 1000 --instances-per-node 5 --rounds 3
    python bench/nova_cells_resync.py --json

nova's API database and one cell database on the local MariaDB (root, no
password, 127.0.0.1:3306; throw-away databases, dropped after), with the
columns nova 34 gives the tables the source reads
(tests/unit/scheduler/sources/nova_tables.py). ``--nodes`` nova-compute
services and compute nodes, inserted in bulk, with descriptive columns of
the size a libvirt host writes (cpu_info about 1.2 KB, two NUMA cells
about 3 KB, stats, PCI pools), mapped in ``host_mappings``; ``--instances-
per-node`` instances on each; Placement is in-memory
(tests/unit/scheduler/fake_placement.py). A heartbeat thread rewrites every
service's ``updated_at`` and ``last_seen_up`` every 10 s, as nova's
servicegroup does.

The daemon's threads, as in nova-sched: a poller (``NovaCellsSource.poll``
every ``--refresh-interval`` s), the host table's refresher
(``HostManager.refresh_changes`` every 0.5 s), and one thread making
decisions back to back (``SchedulingCycle.schedule`` of 1 vCPU / 512 MB /
1 GB with its claim in Placement, released after). Polls alternate: ``--
rounds`` rounds of ``--by-change`` reads by change then one
reconciliation. Measured per poll: wall time and the poller thread's CPU
time (``time.thread_time``); per decision: its latency, grouped by
whether a reconciliation, a read by change, or no poll overlapped it.
Prints a table (or ``--json``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import sys
import tempfile
import threading
import time
import uuid as uuidlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import sqlalchemy as sa  # noqa: E402

from bench.e2e_bench import percentile  # noqa: E402

CPU_INFO = json.dumps({
    "arch": "x86_64", "model": "Cascadelake-Server-noTSX", "vendor": "Intel",
    "topology": {"cells": 2, "sockets": 2, "cores": 16, "threads": 2},
    "features": sorted(f"feature-{i:03d}" for i in range(110))})


def _numa() -> str:
    def cell(i):
        cpus = list(range(i * 32, i * 32 + 32))
        return {"nova_object.name": "NUMACell", "nova_object.namespace": "nova",
                "nova_object.version": "1.5", "nova_object.data": {
                    "id": i, "cpuset": cpus, "pcpuset": [], "memory": 196608,
                    "cpu_usage": 0, "memory_usage": 0, "pinned_cpus": [],
                    "siblings": [[c, c + 16] for c in cpus[:16]],
                    "mempages": [{"nova_object.name": "NUMAPagesTopology",
                                  "nova_object.data": {"size_kb": 4, "total": 49152000,
                                                       "used": 0, "reserved": 0}}],
                    "network_metadata": {}, "socket": i}}
    return json.dumps({"nova_object.name": "NUMATopology", "nova_object.namespace": "nova",
                       "nova_object.version": "1.2",
                       "nova_object.data": {"cells": [cell(0), cell(1)]}})


def populate(tables, cell: str, nodes: int, per_node: int, first: int = 0,
             stamp: dt.datetime | None = None) -> list[str]:
    """Services, compute nodes, host mappings and instances, in bulk, all
    stamped ``stamp`` (default now); returns the nodes' uuids."""
    now = stamp or dt.datetime.now(dt.timezone.utc).replace(tzinfo=None, microsecond=0)
    engine = tables.cells[cell]
    numa = _numa()
    hosts = [f"node-{i:05d}" for i in range(first, first + nodes)]
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO services (host, `binary`, topic, last_seen_up, created_at, "
            "updated_at, deleted) VALUES (:h, 'nova-compute', 'compute', :t, :t, :t, 0)"),
            [{"h": h, "t": now} for h in hosts])
        conn.execute(sa.text(
            "INSERT INTO compute_nodes (uuid, host, hypervisor_hostname, vcpus, memory_mb, "
            "local_gb, current_workload, hypervisor_type, hypervisor_version, cpu_info, "
            "host_ip, supported_instances, stats, metrics, pci_stats, numa_topology, "
            "created_at, updated_at, deleted) VALUES (:u, :h, :h, 64, 393216, 2000, 0, "
            "'QEMU', 8002000, :cpu, '10.0.0.1', :si, :st, '[]', :pci, :numa, :t, :t, 0)"),
            [{"u": str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, h)), "h": h, "cpu": CPU_INFO,
              "si": json.dumps([["x86_64", "kvm", "hvm"], ["i686", "kvm", "hvm"]]),
              "st": json.dumps({"num_instances": str(per_node), "num_vm_active":
                                str(per_node), "num_task_None": str(per_node),
                                "num_os_type_linux": str(per_node), "io_workload": "0",
                                f"num_proj_{uuidlib.uuid4().hex}": str(per_node)}),
              "pci": json.dumps({"nova_object.name": "PciDevicePoolList",
                                 "nova_object.data": {"objects": []}}),
              "numa": numa, "t": now} for h in hosts])
        instances = [{"u": str(uuidlib.uuid4()), "h": h, "t": now}
                     for h in hosts for _ in range(per_node)]
        for start in range(0, len(instances), 20000):
            conn.execute(sa.text(
                "INSERT INTO instances (uuid, host, node, vm_state, created_at, updated_at, "
                "deleted) VALUES (:u, :h, :h, 'active', :t, :t, 0)"),
                instances[start:start + 20000])
    cell_id = tables._cell_ids[cell]
    with tables.api.begin() as conn:
        conn.execute(sa.text("INSERT INTO host_mappings (cell_id, host) VALUES (:c, :h)"),
                     [{"c": cell_id, "h": h} for h in hosts])
    return [str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, h)) for h in hosts]


def heartbeats(engine, stop: threading.Event, every: float = 10.0) -> None:
    while not stop.wait(every):
        now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None, microsecond=0)
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE services SET updated_at = :t, last_seen_up = :t, "
                                 "report_count = report_count + 1"), {"t": now})


def locked_placement():
    """The tests' in-memory Placement, safe for the poller and the deciding
    thread at once (a real Placement serialises them itself)."""
    from tests.unit.scheduler.fake_placement import FakePlacement

    class LockedPlacement(FakePlacement):
        def __init__(self):
            super().__init__()
            self.lock = threading.Lock()

    for name in ("allocations_of", "put_allocations", "delete_allocations", "usages",
                 "inventories", "provider_summaries"):
        def locked(self, *args, _method=getattr(FakePlacement, name), **kwargs):
            with self.lock:
                return _method(self, *args, **kwargs)
        setattr(LockedPlacement, name, locked)
    return LockedPlacement()


def time_queries(cell, repeats: int = 3) -> dict:
    """Each read of a poll alone, best of ``repeats``: (rows, wall s, CPU s)."""
    since = cell.now()
    earlier = since - dt.timedelta(seconds=60)
    with cell.engine.begin() as conn:
        # Heartbeats every 10 s: a read every refresh_interval = 5 s finds
        # half the services rewritten since the last one.
        conn.execute(sa.text("UPDATE services SET updated_at = CASE WHEN MOD(id, 2) = 0 "
                             "THEN :now ELSE :earlier END"),
                     {"now": since + dt.timedelta(seconds=1), "earlier": earlier})
        highest = {table: conn.execute(sa.text(f"SELECT MAX(id) FROM {table}")).scalar()
                   for table in ("compute_nodes", "instances")}
    reads = {
        "services whole (every refresh now)": lambda: cell.services(),
        "services by change (before)": lambda: cell.services(since),
        "compute_nodes by change and id": lambda: cell.compute_nodes(
            since, highest["compute_nodes"]),
        "instances by change and id": lambda: cell.instances(since, highest["instances"]),
        "compute_nodes whole (reconciliation)": lambda: cell.compute_nodes(None),
        "instances whole (reconciliation)": lambda: cell.instances(None),
    }
    timed = {}
    for name, read in reads.items():
        best = None
        for _ in range(repeats):
            wall, cpu = time.monotonic(), time.thread_time()
            rows = len(read())
            figures = (rows, time.monotonic() - wall, time.thread_time() - cpu)
            best = figures if best is None or figures[1] < best[1] else best
        timed[name] = {"rows": best[0], "wall_s": round(best[1], 3),
                       "cpu_s": round(best[2], 3)}
    return timed


def run(args) -> dict:
    from nova_sched.conf import CONF
    from nova_sched.scheduler import driver as drivers
    from nova_sched.scheduler.claim_stores.placement import PlacementClaims
    from nova_sched.scheduler.cloud.sources.nova_cells import NovaCellsSource
    from nova_sched.scheduler.cloud.sources.nova_db import NovaDatabases
    from nova_sched.scheduler.decision.cycle import SchedulingCycle
    from nova_sched.scheduler.host_manager import HostManager
    from nova_sched.scheduler.wire import request
    from tests.db_backends import scheduler_database, temporary_database
    from tests.unit.scheduler.conftest import boot_request
    from tests.unit.scheduler.sources.nova_tables import NovaTables

    CONF([], project="nova-sched")
    CONF.set_override("host_source", "nova_cells", "scheduler")
    CONF.set_override("claims", "placement", "scheduler")
    CONF.set_override("enabled_filters", ["AvailabilityZoneFilter", "RamFilter",
                                          "CoreFilter", "DiskFilter", "ComputeFilter"],
                      "filter_scheduler")
    CONF.set_override("resync_interval", 1e9, "nova_cells")
    with contextlib.ExitStack() as stack:
        work = stack.enter_context(tempfile.TemporaryDirectory())
        stack.enter_context(scheduler_database(f"sqlite:///{work}/nova_sched.sqlite"))
        tables = NovaTables(work, lambda _n: stack.enter_context(temporary_database("mysql")))
        stack.callback(tables.dispose)
        cell = tables.add_cell("cell1")
        started = time.monotonic()
        populate(tables, cell, args.nodes, args.instances_per_node)
        populated = time.monotonic() - started
        placement = locked_placement()
        with tables.cells[cell].connect() as conn:
            for (uuid,) in conn.execute(sa.text("SELECT uuid FROM compute_nodes")):
                placement.add_provider(uuid, 64, 393216, 2000)
        source = NovaCellsSource(NovaDatabases(tables.api_url), placement)
        stack.callback(source.databases.dispose)
        host_manager = HostManager(source)
        claims = PlacementClaims(placement, host_manager.provider_host)
        cycle = SchedulingCycle(drivers.load_driver("filter_scheduler", host_manager),
                                host_manager, claims, compute_api=None, notifier=None)
        t0, c0 = time.monotonic(), time.thread_time()
        host_manager.full_resync()  # the first poll: a whole read
        source.stop()  # its own poller; this one's below is timed
        first = {"wall_s": time.monotonic() - t0, "cpu_s": time.thread_time() - c0,
                 "hosts": len(host_manager.table.index)}
        host_manager.refreshed_elsewhere = True

        stop = threading.Event()
        polls: list[dict] = []
        decisions: list[tuple[float, float]] = []  # (start, end), monotonic

        def poller():
            kinds = (["change"] * args.by_change + ["reconcile"]) * args.rounds
            for kind in kinds:
                if stop.wait(args.refresh_interval):
                    return
                CONF.set_override("resync_interval", 1.0 if kind == "reconcile" else 1e9,
                                  "nova_cells")
                begun, cpu = time.monotonic(), time.thread_time()
                source.poll()
                polls.append({"kind": kind, "start": begun, "end": time.monotonic(),
                              "cpu_s": time.thread_time() - cpu})
            stop.set()

        late: dict = {}

        def register_late():
            """Nodes registered in bulk while the daemon runs, stamped a
            minute before they become visible (tooling, a writer's clock
            behind): candidates once the host table has them."""
            if not args.late_nodes or stop.wait(args.refresh_interval * 1.5):
                return
            stamped = (dt.datetime.now(dt.timezone.utc).replace(tzinfo=None, microsecond=0)
                       - dt.timedelta(seconds=60))
            names = {f"node-{i:05d}" for i in range(args.nodes, args.nodes + args.late_nodes)}
            for name in names:
                with placement.lock:
                    placement.add_provider(str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, name)),
                                           64, 393216, 2000)
            populate(tables, cell, args.late_nodes, 0, first=args.nodes, stamp=stamped)
            visible = time.monotonic()
            while not stop.wait(0.05):
                with host_manager.lock:
                    known = sum(1 for (host, _node) in host_manager.table.index
                                if host in names)
                if known == len(names):
                    late["candidates_after_s"] = round(time.monotonic() - visible, 2)
                    return
            late["candidates_after_s"] = None
            late["known_at_end"] = known

        def refresher():
            while not stop.wait(0.5):
                host_manager.refresh_changes(may_rebuild=False)

        def decider():
            while not stop.is_set():
                spec = request.parse(boot_request(vcpus=1, memory_mb=512, root_gb=1), {})
                begun = time.monotonic()
                outcomes = list(cycle.schedule(None, spec))
                decisions.append((begun, time.monotonic()))
                cycle.release([o.instance_uuid for o in outcomes if o.error is None])

        threads = [threading.Thread(target=f, daemon=True)
                   for f in (poller, refresher, decider, register_late)]
        threads.append(threading.Thread(target=heartbeats, args=(tables.cells[cell], stop),
                                        daemon=True))
        for thread in threads:
            thread.start()
        threads[0].join()
        stop.set()
        for thread in threads[1:]:
            thread.join(30)
        queries = time_queries(source.databases.cells[cell])

    def overlapping(kind):
        spans = [(p["start"], p["end"]) for p in polls if p["kind"] == kind]
        return [(e - s) * 1000 for s, e in decisions
                if any(s < pe and e > ps for ps, pe in spans)]

    any_poll = [(p["start"], p["end"]) for p in polls]
    quiet = [(e - s) * 1000 for s, e in decisions
             if not any(s < pe and e > ps for ps, pe in any_poll)]
    result = {"nodes": args.nodes, "instances": args.nodes * args.instances_per_node,
              "populate_s": round(populated, 1), "first_read": first, "polls": {},
              "decisions_ms": {}, "queries": queries,
              "late_nodes": dict(late, n=args.late_nodes)}
    for kind in ("change", "reconcile"):
        mine = [p for p in polls if p["kind"] == kind]
        result["polls"][kind] = {
            "n": len(mine),
            "wall_s_p50": percentile([p["end"] - p["start"] for p in mine], 50),
            "wall_s_max": max((p["end"] - p["start"] for p in mine), default=None),
            "cpu_s_p50": percentile([p["cpu_s"] for p in mine], 50),
            "cpu_s_max": max((p["cpu_s"] for p in mine), default=None)}
    for label, values in (("no poll", quiet), ("read by change", overlapping("change")),
                          ("reconciliation", overlapping("reconcile"))):
        result["decisions_ms"][label] = {
            "n": len(values), "p50": percentile(values, 50), "p99": percentile(values, 99),
            "max": max(values, default=None)}
    return result


def report(result: dict) -> str:
    lines = [f"{result['nodes']:,} compute nodes, {result['instances']:,} instances "
             f"(populated in {result['populate_s']} s)",
             "first read (whole, table built): {wall_s:.2f} s wall, {cpu_s:.2f} s CPU, "
             "{hosts} hosts".format(**result["first_read"]),
             "poll             n   wall p50   wall max   CPU p50   CPU max"]
    for kind, p in result["polls"].items():
        if p["n"]:
            lines.append(f"{kind:<12} {p['n']:>5}   {p['wall_s_p50']:7.3f} s "
                         f"{p['wall_s_max']:7.3f} s  {p['cpu_s_p50']:6.3f} s  "
                         f"{p['cpu_s_max']:6.3f} s")
    late = result["late_nodes"]
    if late["n"]:
        lines.append(f"{late['n']:,} nodes registered in bulk during the run, stamped a "
                     f"minute before: all in the host table after "
                     f"{late.get('candidates_after_s')} s")
    lines.append("read alone (best of 3)                     rows    wall s    CPU s")
    for name, q in result["queries"].items():
        lines.append(f"{name:<38} {q['rows']:>9,}  {q['wall_s']:7.3f}  {q['cpu_s']:7.3f}")
    lines.append("decisions overlapping      n     p50 ms    p99 ms    max ms")
    for label, d in result["decisions_ms"].items():
        if d["n"]:
            lines.append(f"{label:<20} {d['n']:>7}  {d['p50']:8.1f}  {d['p99']:8.1f}  "
                         f"{d['max']:8.1f}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10000)
    parser.add_argument("--instances-per-node", type=int, default=10)
    parser.add_argument("--refresh-interval", type=float, default=5.0)
    parser.add_argument("--by-change", type=int, default=3,
                        help="reads by change before each reconciliation")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--late-nodes", type=int, default=1000,
                        help="nodes registered in bulk during the run, stamped a "
                        "minute before they are visible (0: none)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args)
    print(json.dumps(result, indent=1) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
