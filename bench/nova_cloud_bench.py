"""nova-sched and nova-scheduler side by side in one test cloud of today's nova.

    python bench/nova_cloud_bench.py                       # 1,000 and 10,000 nodes, both schedulers
    python bench/nova_cloud_bench.py --sizes 1000 --calls 50
    python bench/nova_cloud_bench.py --operations boot      # boots only (before issue 40)
    python bench/nova_cloud_bench.py --schedulers nova-scheduler
    python bench/nova_cloud_bench.py --py-spy              # plus a profile of nova-sched at the largest size
    python bench/nova_cloud_bench.py --json                # one JSON object on stdout, the table on stderr
    python bench/nova_cloud_bench.py --shapes varied --flavors varied   # issue 39's clouds and flavors
    python bench/nova_cloud_bench.py --shapes varied --sizes 10000 --schedulers nova-sched \
        --keep-up 60                                       # plus the reader's cost under 20 claims/s

One cloud of nova 34 and Placement 16 (tests/functional/novacloud.py: a
private RabbitMQ vhost, four databases on the local MariaDB, Placement's
WSGI app; no nova-api, conductor or nova-compute process: nothing here
needs them), then, per fleet size in increasing order:

1. registers nodes up to the size as nova-compute with the fake driver
   leaves them (bench/nova_cloud_register.py, bulk SQL: services,
   compute_nodes, host_mappings, resource providers with inventories and
   the driver's traits, OWNER_NOVA among them); a background process
   refreshes the services' heartbeats every 10 s so they stay up;
2. per scheduler, one at a time (the other stopped: they never share the
   2 cores), the same nodes and the same Placement: starts it, waits for
   its ``scheduler`` queue consumer, fanout-casts ``sync_instance_info``
   twice for every node (what nova-compute sends; without it nova-scheduler
   reads every candidate's instances on every request) and waits until
   the broker has delivered them, then bench/nova_select_driver.py (nova's
   own SchedulerAPI in the nova venv) makes ``--warmup`` then ``--calls``
   sequential ``select_destinations`` calls (4.5, conductor's arguments,
   a RequestSpec for 1 vCPU / 512 MB / 1 GB as nova-api builds it, a fresh
   instance uuid each; the scheduler claims in Placement);
3. checks every call's claim in Placement's database: exactly one
   allocation, on the node the call returned, of exactly the flavor's
   VCPU / MEMORY_MB / DISK_GB (lost: none; doubled: more than one provider
   or amount; wrong node: another provider than the Selection's; stray:
   allocations of consumers no call made);
4. steps 2 (the calls) and 3 again for each move of ``--operations``
   (issue 40), on the same start of the scheduler, the boots' claims left
   in place: ``live-migration`` and ``targeted``, below; then stops the
   scheduler and deletes the allocations (Placement's REST API) before
   the next one.

The moves are what nova-conductor 34's ``LiveMigrationTask`` sends for an
instance booted before (bench/nova_select_driver.py ``--operation`` says
how it is built): per call, untimed, the driver claims the instance on a
source node (node ``i * 7919`` mod the fleet) as a boot's scheduler did,
then moves that allocation to a new migration consumer with nova's own
``move_allocations`` (conductor's ``replace_allocation_with_migration``),
so the scheduler must claim the instance as a new consumer; timed, one
``select_destinations`` with ``return_alternates=False``, ``ignore_hosts``
the source and ``requested_destination`` a ``Destination`` holding the
instance's ``CellMapping`` (from the API database). ``targeted`` also
names a host and node (half the fleet away from the source), as nova-api
does for a live migration to a host without ``force`` (nova-scheduler
then asks Placement with ``in_tree``); cold migration and evacuation to a
named host send the same destination. The check adds, per move: the
returned node is not the source (``on_source``), is the named one when
targeted (``not_target``), and the migration's allocation is still
exactly the flavor's on the source alone (``migration_changed``). The
moves take the plain flavor whatever ``--flavors`` says. Their
Placement CPU per call includes the set-up's five requests (a read and
the boot's claim, two reads and the move), more than the call's own two
or three. ``--py-spy`` and ``--keep-up`` come after every operation.

Latency is the client's, from the call to nova's deserialised Selections;
p50/p99 are nearest-rank over ``--calls`` (warm-up calls excluded). Also
the scheduler's CPU per call (its process tree's user + system time over
the timed calls) and memory (PSS) after them.

Issue 39 (``bench/placement_rows.py`` says what exactly): ``--shapes
varied`` registers nodes as libvirt's nova-compute leaves them (80-130
traits a root, Placement aggregates, one node in ten with GPU or PCI child
providers or PCPU inventory and a NUMA topology); ``--flavors varied``
makes the calls take in turn a plain flavor, one requiring
``HW_CPU_X86_AVX512F``, a dedicated-CPU one (PCPU), one asking a VGPU and
one a PCI device (a child provider's resource class). The check then
also requires every allocation of a claim inside the returned node's
provider tree, the child classes on a child provider, the exact amounts
of the flavor's resource request, and the required trait on the root;
figures are given per flavor as well. ``--keep-up S``, after nova-sched's
timed calls at the largest size: for S seconds a side process claims
through Placement's REST API at ``--churn-rate`` (20) a second on random
nodes while the heartbeats go on; nova-sched's CPU per second (whole, and
per thread by its kernel name: the Placement reader's thread apart) and
the rows its Placement reader reports (its /metrics, where it exposes
them) are the figures.

With ``--py-spy``, after nova-sched's timed calls at the largest size, a
further ``--calls`` calls run under ``py-spy record`` (figures kept apart,
not in the table) and one ``py-spy dump``; the top functions are printed
and the raw profile kept in the work directory.

Exit status: 0; 1 when a claim was lost, doubled, wrong or stray, a timed
call failed or a scheduler died; 2 when the benchmark could not run (no nova venv,
MariaDB or RabbitMQ). The work directory (configs, every process's log,
the driver's per-call lines, profiles) is printed and kept with ``--keep``
or when something failed.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime as dt
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests" / "functional"))

import cloudlib  # noqa: E402  (tests/functional/cloudlib.py)
import novacloud  # noqa: E402  (tests/functional/novacloud.py)
import placement_rows  # noqa: E402
import pyspy  # noqa: E402
from e2e_bench import (_stat_fields, _TICK, cpu_seconds, memory_mb,  # noqa: E402
                       percentile, process_tree)
from nova_select_driver import OPERATIONS  # noqa: E402

SCHEDULERS = ("nova-scheduler", "nova-sched")
PREFIX = "bench-node-"
FLAVOR = {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}
HEARTBEAT_S = 10
READY_TIMEOUT = 300


class BenchError(Exception):
    """The benchmark cannot go on; the message says why."""


def say(msg: str) -> None:
    print(f"nova-cloud-bench: {msg}", file=sys.stderr, flush=True)


class Phases:
    """Wall time of each step, in the order they ran."""

    def __init__(self):
        self.rows: list[dict] = []

    @contextlib.contextmanager
    def timed(self, name: str, **labels):
        started = time.monotonic()
        row = {"phase": name, **labels}
        try:
            yield row
        finally:
            row["seconds"] = round(time.monotonic() - started, 2)
            self.rows.append(row)
            extra = " ".join(f"{k}={v}" for k, v in labels.items())
            say(f"{name} {extra}: {row['seconds']:.1f} s")


class Bench:
    def __init__(self, args):
        self.args = args
        self.workdir = Path(args.workdir or tempfile.mkdtemp(prefix="nova-cloud-bench-"))
        self.cloud = novacloud.NovaCloud(self.workdir / "cloud", name="bench",
                                         debug=False)
        self.python = str(self.cloud.bin / "python")
        self.phases = Phases()
        # size -> scheduler -> operation -> figures
        self.results: dict[int, dict[str, dict[str, dict]]] = {}
        self.profile: dict | None = None
        self.started = dt.datetime.now(dt.timezone.utc)
        self.info: dict = {}
        self.log_offset = 0

    # -- the cloud -----------------------------------------------------------
    def open(self) -> None:
        if not Path(self.python).exists():
            raise BenchError(f"no nova venv at {self.cloud.venv} "
                             "(tools/nova_venv.sh '34.*' DIR; NOVA_SCHED_NOVA_VENV)")
        if not novacloud.mysql_reachable():
            raise BenchError("no MariaDB on 127.0.0.1:3306")
        if not cloudlib.rabbit_reachable():
            raise BenchError("no RabbitMQ on 127.0.0.1:5672")
        with self.phases.timed("cloud: vhost, databases, schemas, cells"):
            self.cloud.open()
            self.cloud.deploy()
        with self.phases.timed("cloud: placement up"):
            # Only Placement: the benchmark plays conductor and the computes.
            self.cloud.spawn("placement", [self.python, str(novacloud.HERE / "novacloud_stubs.py"),
                                           "wsgi", "placement", "--port",
                                           str(self.cloud.ports["placement"])])
            self.cloud.wait_for_port("placement")
            # Placement fills its traits and resource classes at start-up.
            self.cloud.placement.get("/traits?name=in:OWNER_NOVA")

    # More arguments of nova_cloud_register.py's registering run.
    register_args: tuple[str, ...] = ()

    def register(self, size: int) -> dict:
        with self.phases.timed("register nodes", nodes=size) as row:
            out = self.cloud.run("register", [
                self.python, str(HERE / "nova_cloud_register.py"),
                "--api-db", self.cloud.dbs.url("api"),
                "--cell-db", self.cloud.dbs.url("cell1"),
                "--placement-db", self.cloud.dbs.url("placement"),
                "--nova-conf", str(self.cloud.nova_conf),
                "--prefix", PREFIX, "--total", str(size),
                "--shapes", self.args.shapes, *self.register_args],
                timeout=1800)
            done = json.loads(out.strip().splitlines()[-1])
            row["added"] = done["added"]
            if done.get("providers"):
                say(f"registered {done['providers']}")
        if "heartbeat" not in self.cloud.procs:
            self.cloud.spawn("heartbeat", [
                self.python, str(HERE / "nova_cloud_register.py"),
                "--api-db", self.cloud.dbs.url("api"),
                "--cell-db", self.cloud.dbs.url("cell1"),
                "--prefix", PREFIX, "--heartbeat-every", str(HEARTBEAT_S)])
        return done

    # -- the schedulers ------------------------------------------------------
    def nova_sched_overrides(self) -> dict:
        overrides = {
            "DEFAULT": {"debug": False},
            "scheduler": {"cell_uuid": self.cloud.cell1_uuid},
            # The operator's default, not the functional tests' 1 s.
            "nova_cells": {"refresh_interval": 5},
        }
        for setting in self.args.nova_sched_set:
            key, _, value = setting.partition("=")
            group, _, name = key.rpartition(".")
            overrides.setdefault(group or "DEFAULT", {})[name] = value
        return overrides

    def start(self, kind: str, size: int) -> None:
        log = self.cloud.workdir / f"{kind}.log"
        self.log_offset = log.stat().st_size if log.exists() else 0
        with self.phases.timed("scheduler start until its queue has a consumer",
                               scheduler=kind, nodes=size):
            self.cloud.start_scheduler(kind, self.nova_sched_overrides())
            probe = cloudlib.BrokerProbe(self.cloud.broker.vhost)
            try:
                self.cloud._wait(lambda: ((probe.queue("scheduler") or (0, 0))[1]) >= 1,
                                 READY_TIMEOUT, f"{kind} consuming from 'scheduler'")
            finally:
                probe.close()

    def stop(self, kind: str) -> None:
        code = self.cloud.stop(kind, timeout=30)
        # Gone on purpose: the cloud's liveness checks must not count it.
        self.cloud.procs.pop(kind, None)
        say(f"{kind} stopped (exit {code})")

    def sync_instances(self, kind: str, size: int) -> None:
        if self.args.no_instance_sync:
            self._settled(kind)
            return
        with self.phases.timed("sync_instance_info casts x2, handled",
                               scheduler=kind, nodes=size):
            self.driver(["--calls=0", "--warmup=0", f"--sync-count={size}"],
                        f"sync-{kind}-{size}")
            self._drained(f"{kind}'s fanout queues")
            # Delivered is not handled: a scheduler that took the casts into
            # its own thread pool may still be working through them.
            self._settled(kind)

    def _settled(self, kind: str, window: float = 3.0, busy: float = 0.3,
                 timeout: float = 600) -> None:
        """Until the scheduler's processes use less than ``busy`` of a core
        over ``window`` seconds (their background reads stay below it)."""
        pid = self.cloud.procs[kind].pid
        deadline = time.monotonic() + timeout
        last = cpu_seconds(pid)
        while time.monotonic() < deadline:
            time.sleep(window)
            self.cloud.assert_running()
            now = cpu_seconds(pid)
            if now - last < busy * window:
                return
            last = now
        say(f"{kind} still busy after {timeout:.0f} s: measuring anyway")

    def _drained(self, what: str, timeout: float = 600) -> None:
        def _empty():
            self.cloud.assert_running()
            out = subprocess.run(["rabbitmqctl", "-q", "list_queues", "-p",
                                  self.cloud.broker.vhost, "name", "messages",
                                  "messages_unacknowledged", "consumers"],
                                 capture_output=True, text=True, timeout=60).stdout
            rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
            # A queue nobody consumes is a stopped scheduler's fanout queue
            # (it outlives its consumer until its expiry, and got the casts
            # too): 20,000 messages at 10,000 nodes that never drain.
            return all(r[1:3] == ["0", "0"] for r in rows if len(r) == 4 and r[3] != "0")
        self.cloud._wait(_empty, timeout, f"{what} drained")

    def driver(self, extra: list[str], name: str, on_line=None) -> list[dict]:
        """bench/nova_select_driver.py in the nova venv; its JSON lines."""
        cmd = [self.python, str(HERE / "nova_select_driver.py"),
               "--transport-url", self.cloud.transport_url, "--sync-prefix", PREFIX,
               *extra]
        log = self.workdir / f"driver-{name}.jsonl"
        lines: list[dict] = []
        with open(log, "w") as out, open(self.workdir / f"driver-{name}.err", "w") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                    env=self.cloud._env(), cwd=str(self.workdir))
            for text in proc.stdout:
                out.write(text)
                with contextlib.suppress(ValueError):
                    line = json.loads(text)
                    lines.append(line)
                    if on_line:
                        on_line(line)
            proc.wait()
        if proc.returncode != 0 or not lines or "done" not in lines[-1] and "synced" not in lines[-1]:
            raise BenchError(f"the driver failed ({proc.returncode}): "
                             f"{(self.workdir / f'driver-{name}.err').read_text()[-3000:]}")
        return lines

    # -- one measurement -------------------------------------------------------
    def measure(self, kind: str, size: int) -> dict[str, dict]:
        """Each of ``--operations`` in turn on one start of the scheduler:
        its figures and its check, by operation."""
        self.start(kind, size)
        results: dict[str, dict] = {}
        try:
            self.sync_instances(kind, size)
            made: frozenset = frozenset()
            for operation in self.args.operations:
                results[operation], calls = self.operation(kind, size, operation, made)
                # Still allocated: the next operations' checks must not call
                # them stray.
                made |= consumers(calls)
            first = results[self.args.operations[0]]
            # After every operation: the churn's claims are no call's.
            if (self.args.py_spy and kind == "nova-sched"
                    and size == max(self.args.sizes)):
                self.profile = self.profiled(kind, size, made)
                first["check_profiled"] = self.profile.pop("check")
            if (self.args.keep_up and kind == "nova-sched"
                    and size == max(self.args.sizes)):
                first["keep_up"] = self.keep_up(kind, size)
            first["log_errors"] = self.log_errors(kind)
        finally:
            self.stop(kind)
        with self.phases.timed("delete claims", scheduler=kind, nodes=size):
            self.clean()
        return results

    def operation(self, kind: str, size: int, operation: str,
                  earlier: frozenset) -> tuple[dict, list[dict]]:
        """``--warmup`` then ``--calls`` calls of one operation, summarised
        and checked (``earlier``: the consumers of the operations before);
        also the driver's lines of the calls."""
        pid = self.cloud.procs[kind].pid
        if operation == "boot":
            name, extra = f"calls-{kind}-{size}", self.flavor_args()
        else:
            # The moves take the one plain flavor (their source claim is
            # written on a root provider).
            name = f"calls-{operation}-{kind}-{size}"
            extra = [f"--operation={operation}", f"--nova-conf={self.cloud.nova_conf}",
                     f"--nodes={size}", f"--cell-uuid={self.cloud.cell1_uuid}"]
        with self.phases.timed("warm-up and timed calls", scheduler=kind, nodes=size,
                               operation=operation):
            # The scheduler's and Placement's CPU over the timed calls only.
            placement = self.cloud.procs["placement"].pid
            cpu: dict[str, tuple[float, float]] = {}

            def mark(line=None):
                cpu["start"] = (cpu_seconds(pid), cpu_seconds(placement))

            def on_line(line):
                if line.get("i") == self.args.warmup - 1:
                    mark()
            if self.args.warmup == 0:
                mark()
            load0 = os.getloadavg()[0]
            hist0 = self.histograms(kind)
            placement_log = self.cloud.workdir / "placement.log"
            log0 = placement_log.stat().st_size
            lines = self.driver([f"--calls={self.args.calls}",
                                 f"--warmup={self.args.warmup}", *extra],
                                name, on_line=on_line)
            end = (cpu_seconds(pid), cpu_seconds(placement))
        calls = [line for line in lines if "i" in line]
        start = cpu.get("start", end)
        result = self.summarise(calls, end[0] - start[0], memory_mb(pid))
        result["placement_cpu_ms_per_call"] = round(
            (end[1] - start[1]) * 1000 / max(1, result["calls"]), 1)
        result["load"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
        result["placement_requests"] = placement_requests(placement_log, log0)
        result["daemon_histograms"] = histogram_quantiles(hist0, self.histograms(kind))
        with self.phases.timed("check claims in Placement", scheduler=kind, nodes=size,
                               operation=operation):
            result["check"] = self.check(calls, earlier)
        return result, calls

    def summarise(self, calls: list[dict], cpu: float, pss: float) -> dict:
        timed = [c for c in calls if not c["warmup"]]
        ok = [c["ms"] for c in timed if "error" not in c]
        warm = [None if "error" in c else c["ms"] for c in calls if c["warmup"]]
        return {
            "calls": len(timed), "errors": sum(1 for c in timed if "error" in c),
            "warmup_errors": [c["error"] for c in calls if c["warmup"] and "error" in c],
            "first_errors": [c["error"] for c in timed if "error" in c][:3],
            "p50_ms": percentile(ok, 50), "p90_ms": percentile(ok, 90),
            "p99_ms": percentile(ok, 99),
            "mean_ms": round(sum(ok) / len(ok), 1) if ok else None,
            "min_ms": min(ok, default=None), "max_ms": max(ok, default=None),
            "warmup_ms": warm,
            "cpu_ms_per_call": round(cpu * 1000 / len(timed), 1) if timed else None,
            "memory_mb": round(pss),
            "alternates": collections.Counter(c.get("alternates") for c in timed
                                              if "error" not in c).most_common(1)[0][0]
            if ok else None,
            "distinct_nodes": len({c.get("node_uuid") for c in timed if "error" not in c}),
            "by_flavor": {
                kind: {"calls": len(mine),
                       "errors": sum(1 for c in mine if "error" in c),
                       "p50_ms": percentile([c["ms"] for c in mine if "error" not in c], 50),
                       "p99_ms": percentile([c["ms"] for c in mine if "error" not in c], 99)}
                for kind in dict.fromkeys(c["flavor"] for c in timed if "flavor" in c)
                for mine in [[c for c in timed if c.get("flavor") == kind]]},
        }

    def flavor_args(self) -> list[str]:
        kinds = placement_rows.FLAVOR_SETS[self.args.flavors]
        return [] if kinds == ("plain",) else [f"--flavors={','.join(kinds)}"]

    def check(self, calls: list[dict], earlier: frozenset = frozenset()) -> dict:
        """Each call's claim, from Placement's own tables (``earlier``: the
        consumers of calls already checked, still allocated, not stray):
        inside the returned node's tree, the flavor's resource request
        exactly (child classes on a child provider, the rest on the root),
        a required trait on the root. For a move (a line naming its
        ``migration``): the returned node is not the source, is the named
        one when targeted, and the migration's allocation is still the
        flavor's on the source alone, as conductor left it."""
        rows = self.cloud.dbs.query("placement", """
            SELECT a.consumer_id AS consumer, rp.uuid AS rp, root.uuid AS root,
                   rc.name AS rc, a.used AS used
            FROM allocations a
            JOIN resource_providers rp ON rp.id = a.resource_provider_id
            JOIN resource_providers root ON root.id = rp.root_provider_id
            JOIN resource_classes rc ON rc.id = a.resource_class_id""")
        by_consumer: dict[str, list[dict]] = collections.defaultdict(list)
        for row in rows:
            by_consumer[row["consumer"]].append(row)
        trait = placement_rows.REQUIRED_TRAIT
        with_trait = {r["uuid"] for r in self.cloud.dbs.query("placement", """
            SELECT rp.uuid AS uuid FROM resource_provider_traits rpt
            JOIN resource_providers rp ON rp.id = rpt.resource_provider_id
            JOIN traits t ON t.id = rpt.trait_id WHERE t.name = %s""", trait)}
        lost, doubled, wrong, resources, no_trait, answered = [], [], [], [], [], 0
        fallback, on_source, not_target, migration_changed = [], [], [], []
        for call in calls:
            if "migration" in call:
                held = {(r["rp"], r["rc"], r["used"]) for r in by_consumer.get(
                    call["migration"], [])}
                if held != {(call["source_uuid"], rc, n) for rc, n in FLAVOR.items()}:
                    migration_changed.append({"migration": call["migration"],
                                              "source": call["source_uuid"],
                                              "allocations": sorted(held)})
            if "error" in call:
                continue
            if call.get("node_uuid") == call.get("source_uuid"):
                on_source.append({"uuid": call["uuid"], "source": call["source"]})
            if "target_uuid" in call and call["node_uuid"] != call["target_uuid"]:
                not_target.append({"uuid": call["uuid"], "target": call["target_uuid"],
                                   "returned": call["node_uuid"]})
            answered += 1
            held = by_consumer.get(call["uuid"], [])
            if not held:
                lost.append(call["uuid"])
                continue
            kind = call.get("flavor", "plain")
            _, specs, wanted = placement_rows.FLAVORS[kind]
            if kind == "plain" and not call.get("flavor"):
                wanted = FLAVOR
            amounts = collections.Counter()
            providers_of = collections.defaultdict(set)
            for r in held:
                amounts[r["rc"]] += r["used"]
                providers_of[r["rc"]].add(r["rp"])
            roots = {r["root"] for r in held}
            misplaced = [r for r in held
                         if (r["rc"] in placement_rows.CHILD_CLASSES) == (r["rp"] == r["root"])]
            if any(len(p) > 1 for p in providers_of.values()) or any(
                    amounts[rc] > n for rc, n in wanted.items()):
                doubled.append({"uuid": call["uuid"], "flavor": kind, "allocations": held})
            elif roots != {call["node_uuid"]}:
                wrong.append({"uuid": call["uuid"], "flavor": kind,
                              "returned": call["node_uuid"], "claimed": sorted(roots)})
            elif kind == "pcpu" and not misplaced and dict(amounts) == _as_vcpu(wanted):
                # nova's fallback query ([workarounds]
                # disable_fallback_pcpu_query = False): Placement allows it.
                fallback.append(call["uuid"])
            elif dict(amounts) != wanted or misplaced:
                resources.append({"uuid": call["uuid"], "flavor": kind,
                                  "wanted": wanted, "allocations": held})
            elif any(k.startswith("trait:") and k.endswith(trait) for k in specs) and \
                    call["node_uuid"] not in with_trait:
                no_trait.append({"uuid": call["uuid"], "node": call["node_uuid"]})
        stray = sorted(set(by_consumer) - consumers(calls) - earlier)
        return {"answered": answered, "claimed": answered - len(lost),
                "lost": lost, "doubled": doubled, "wrong_node": wrong,
                "wrong_resources": resources, "missing_trait": no_trait, "stray": stray,
                "pcpu_claimed_as_vcpu": fallback, "on_source": on_source,
                "not_target": not_target, "migration_changed": migration_changed}

    def clean(self) -> None:
        consumers = [r["consumer_id"] for r in self.cloud.dbs.query(
            "placement", "SELECT DISTINCT consumer_id FROM allocations")]
        for consumer in consumers:
            self.cloud.placement.delete(f"/allocations/{consumer}")
        left = self.cloud.dbs.query("placement", "SELECT COUNT(*) AS n FROM allocations")
        if left[0]["n"]:
            raise BenchError(f"{left[0]['n']} allocations left after deleting them")

    def log_errors(self, kind: str) -> list[str]:
        text = self.cloud.log_text(kind)[self.log_offset:].splitlines()
        return [line for line in text if " ERROR " in line or "Traceback" in line][:20]

    # -- the cost of keeping up --------------------------------------------------
    def keep_up(self, kind: str, size: int) -> dict:
        """``--keep-up`` seconds of claims written through Placement's REST
        API at ``--churn-rate`` a second (a side process) while the
        heartbeats go on: the scheduler's CPU per second, by thread, and
        what its Placement reader reports."""
        pid = self.cloud.procs[kind].pid
        seconds, rate = self.args.keep_up, self.args.churn_rate
        shadow = ShadowReader(self.cloud.dbs.url("placement"))
        shadow.start()
        with self.phases.timed("keep up: claims through Placement's API",
                               scheduler=kind, nodes=size, rate=rate):
            time.sleep(5)  # the shadow's first (whole) read
            idle0 = (time.monotonic(), threads_cpu(pid), self.reader_metrics(kind),
                     shadow.sample())
            time.sleep(min(30.0, seconds / 2))
            idle1 = (time.monotonic(), threads_cpu(pid), self.reader_metrics(kind),
                     shadow.sample())
            churn = self.cloud.spawn("churn", [
                self.python, str(HERE / "nova_cloud_register.py"),
                "--api-db", self.cloud.dbs.url("api"), "--cell-db", self.cloud.dbs.url("cell1"),
                "--placement-db", self.cloud.dbs.url("placement"),
                "--prefix", PREFIX, "--total", str(size),
                "--churn-url", self.cloud.placement_url, "--churn-rate", str(rate),
                "--churn-seconds", str(seconds + 5)])
            time.sleep(3)  # the writer's start-up
            load0 = os.getloadavg()[0]
            t0 = (time.monotonic(), threads_cpu(pid), self.reader_metrics(kind),
                  shadow.sample())
            time.sleep(seconds)
            t1 = (time.monotonic(), threads_cpu(pid), self.reader_metrics(kind),
                  shadow.sample())
            load1 = os.getloadavg()[0]
            churn.wait(timeout=60)
            self.cloud.procs.pop("churn", None)
            out = self.cloud.log_text("churn").strip().splitlines()
            written = json.loads(out[-1]) if out and out[-1].startswith("{") else {}
        shadow.stop()
        return {"shadow_reader": shadow.describe(),"seconds": seconds, "rate": rate, "written": written,
                "load": [round(load0, 2), round(load1, 2)],
                "idle": _per_second(idle0, idle1), "churn": _per_second(t0, t1)}

    def histograms(self, kind: str) -> dict[str, float]:
        """nova-sched's decision and claim histograms' buckets (/metrics)."""
        return self._metrics(kind, lambda line: line.startswith(
            ("nova_sched_decision_seconds_bucket", "nova_sched_claim_seconds_bucket")))

    def reader_metrics(self, kind: str) -> dict[str, float]:
        """nova-sched's /metrics samples about its Placement reader (any
        whose name says placement_db or placement_database)."""
        return self._metrics(kind, lambda line: not line.startswith("#")
                             and "placement_d" in line)

    def _metrics(self, kind: str, wanted) -> dict[str, float]:
        """nova-sched's /metrics samples whose line ``wanted`` accepts
        (nothing for nova-scheduler, or when the endpoint does not answer)."""
        if kind != "nova-sched":
            return {}
        try:
            import requests
            text = requests.get(
                f"http://127.0.0.1:{self.cloud.prometheus_port()}/metrics", timeout=10).text
        except Exception:
            return {}
        found = {}
        for line in text.splitlines():
            if wanted(line):
                name, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    found[name] = float(value)
        return found

    # -- profile -------------------------------------------------------------------
    def profiled(self, kind: str, size: int, earlier: frozenset) -> dict:
        """Further calls under py-spy record, and one py-spy dump among them."""
        pid = self.cloud.procs[kind].pid
        raw = self.workdir / f"py-spy-{kind}-{size}.txt"
        recording = pyspy.Recording(pid, raw).start()
        dumps = []
        half = self.args.calls // 2

        def maybe_dump(line):
            if line.get("i") == half:
                out = subprocess.run(["py-spy", "dump", "--pid", str(pid),
                                      "--subprocesses", "--nonblocking"],
                                     capture_output=True, text=True, timeout=60)
                dumps.append(out.stdout + out.stderr)
        with self.phases.timed("profiled calls (py-spy record)", scheduler=kind, nodes=size):
            lines = self.driver([f"--calls={self.args.calls}", "--warmup=0",
                                 *self.flavor_args()],
                                f"profiled-{kind}-{size}", on_line=maybe_dump)
        top = recording.stop()
        calls = [line for line in lines if "i" in line]
        (self.workdir / f"py-spy-dump-{kind}-{size}.txt").write_text("\n".join(dumps))
        ok = [c["ms"] for c in calls if "error" not in c]
        return {"calls": len(calls), "p50_ms": percentile(ok, 50),
                "p99_ms": percentile(ok, 99), "raw": str(raw),
                "top": top,
                "dump": dumps[0] if dumps else None,
                "check": self.check(calls, earlier)}

    # -- the run -----------------------------------------------------------------
    def run(self) -> None:
        self.started = dt.datetime.now(dt.timezone.utc)
        self.open()
        self.info = {"nova": _version(self.python, "nova"),
                     "placement": _version(self.python, "openstack-placement")}
        for size in sorted(self.args.sizes):
            self.register(size)
            self.results[size] = {}
            for kind in self.args.schedulers:
                say(f"{kind}, {size:,} nodes")
                self.results[size][kind] = self.measure(kind, size)

    def report(self) -> dict:
        """What was measured so far."""
        return {
            "date": self.started.strftime("%Y-%m-%d %H:%M UTC"),
            "command": " ".join(shlex.quote(a) for a in [
                "python", "bench/nova_cloud_bench.py", *sys.argv[1:]]),
            "machine": {"cores": os.cpu_count(), "load_at_start": os.getloadavg()[0]},
            "nova_sched_config": self.nova_sched_overrides() if self.cloud.cell1_uuid else None,
            **self.info, "calls": self.args.calls, "warmup": self.args.warmup,
            "operations": self.args.operations,
            # operation -> size -> scheduler -> figures
            "results": {operation: {str(size): {kind: by_op[operation]
                                                for kind, by_op in by.items()
                                                if operation in by_op}
                                    for size, by in self.results.items()}
                        for operation in self.args.operations},
            "ratios": self.ratios(), "phases": self.phases.rows,
            "profile": self.profile, "workdir": str(self.workdir),
        }

    def ratios(self) -> dict:
        """operation -> size -> nova-scheduler's p50 and p99 over nova-sched's."""
        out: dict[str, dict] = {}
        for operation in self.args.operations:
            mine = out.setdefault(operation, {})
            for size, by in self.results.items():
                a = by.get("nova-scheduler", {}).get(operation)
                b = by.get("nova-sched", {}).get(operation)
                if a and b and b["p50_ms"] and b["p99_ms"] and a["p50_ms"] and a["p99_ms"]:
                    mine[str(size)] = {"p50": round(a["p50_ms"] / b["p50_ms"], 1),
                                       "p99": round(a["p99_ms"] / b["p99_ms"], 1)}
        return out

    def close(self) -> None:
        self.cloud.close()


def histogram_quantiles(before: dict[str, float], after: dict[str, float]) -> dict:
    """p50 and p99 of each histogram's observations between two scrapes,
    as the upper bound of the bucket they fall in (warm-up calls
    included), in ms."""
    out = {}
    for metric in ("nova_sched_decision_seconds", "nova_sched_claim_seconds"):
        buckets = []
        for name, value in after.items():
            match = re.match(metric + r'_bucket\{le="([^"]+)"\}', name)
            if match:
                buckets.append((float(match.group(1)), value - before.get(name, 0.0)))
        buckets.sort()
        if not buckets or not buckets[-1][1]:
            continue
        total = buckets[-1][1]
        quantiles = {}
        for pct in (50, 99):
            le = next(le for le, n in buckets if n >= total * pct / 100)
            quantiles[f"p{pct}_ms_at_most"] = None if le == float("inf") else le * 1000
        out[metric.replace("nova_sched_", "")] = {"count": int(total), **quantiles}
    return out


def _as_vcpu(wanted: dict[str, int]) -> dict[str, int]:
    """A PCPU request as nova's fallback query asks it (VCPU instead)."""
    out = dict(wanted)
    out["VCPU"] = out.pop("PCPU")
    return out


def consumers(calls: list[dict]) -> frozenset:
    """Placement consumers the calls made: the instances, and the
    migrations a move's set-up wrote."""
    return frozenset(c[k] for c in calls for k in ("uuid", "migration") if k in c)


def threads_cpu(root: int) -> dict[str, float]:
    """CPU seconds (user + system) of ``root``'s tree per kernel thread
    name (nova_sched.os_thread_names names its threads; numbered ones
    counted together)."""
    out: dict[str, float] = collections.defaultdict(float)
    for pid in process_tree(root):
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                fields = _stat_fields(f"{pid}/task/{tid}")
                with contextlib.suppress(OSError):
                    comm = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
                    if fields:
                        out[re.sub(r"-\d+$", "-N", comm)] += (
                            int(fields[11]) + int(fields[12])) / _TICK
    return dict(out)


def _per_second(a: tuple, b: tuple) -> dict:
    """CPU ms per second by thread name, and reader metrics' deltas per
    second, between two (time, threads_cpu, reader_metrics) samples."""
    span = max(1e-6, b[0] - a[0])
    cpu = {name: round((b[1].get(name, 0.0) - a[1].get(name, 0.0)) * 1000 / span, 1)
           for name in b[1]}
    return {"cpu_ms_per_s": round(sum(cpu.values()), 1),
            "cpu_ms_per_s_by_thread": {k: v for k, v in sorted(
                cpu.items(), key=lambda kv: -kv[1]) if v > 0},
            "metrics_per_s": {k: round((v - a[2].get(k, 0.0)) / span, 2)
                              for k, v in b[2].items() if v != a[2].get(k, 0.0)},
            "metrics": b[2],
            "shadow_rows_per_s": {k: round((v - a[3][0].get(k, 0)) / span, 1)
                                  for k, v in b[3][0].items()},
            "shadow_polls": b[3][1] - a[3][1],
            "shadow_cpu_ms_per_s": round((b[3][2] - a[3][2]) * 1000 / span, 1)}


class ShadowReader:
    """nova-sched's own Placement reader (PlacementModelReader over
    PlacementDatabase), run in this process beside the daemon on the same
    database at the daemon's ``refresh_interval`` and ``resync_interval``
    (their defaults), counting every row its queries return: the daemon
    exposes no such count, and MariaDB's per-session counters need
    performance_schema, off on these machines. Its thread's CPU is
    measured apart from the daemon's."""

    def __init__(self, url: str):
        from nova_sched.conf import CONF
        from nova_sched.scheduler.cloud.sources import placement_db

        with contextlib.suppress(Exception):
            CONF([], project="nova-sched", default_config_files=[],
                 default_config_dirs=[])
        CONF.set_override("connection", url, group="placement_database")
        self.refresh = CONF.placement_database.refresh_interval
        self.resync = CONF.placement_database.resync_interval
        self.rows: collections.Counter = collections.Counter()
        self.polls = 0
        self.reader = placement_db.PlacementModelReader(placement_db.PlacementDatabase(url))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shadow-reader",
                                        daemon=True)
        self._cpu = 0.0

    def _run(self) -> None:
        while True:
            started = time.thread_time()
            self.reader.poll()
            self._cpu += time.thread_time() - started
            # What the reader counts of each read it made (its ReadStats).
            self.rows.update(self.reader.database.last_read.rows)
            self.polls += 1
            if self._stop.wait(self.refresh):
                return

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        self.reader.database.dispose()

    def sample(self) -> tuple[dict, int, float]:
        return dict(self.rows), self.polls, self._cpu

    def describe(self) -> dict:
        return {"refresh_interval": self.refresh, "resync_interval": self.resync,
                "providers": len(self.reader.model.providers)
                if hasattr(self.reader.model, "providers") else None}


def _version(python: str, dist: str) -> str | None:
    out = subprocess.run([python, "-c", "import importlib.metadata as m, sys; "
                          f"print(m.version({dist!r}))"], capture_output=True, text=True)
    return out.stdout.strip() or None


def placement_requests(log: Path, offset: int) -> dict[str, int]:
    """Placement's requests logged after ``offset``, by method and first
    path segment (``GET /allocation_candidates``: 1 per nova-scheduler call;
    nova-sched's come from its background usage reads)."""
    with open(log, "rb") as fh:
        fh.seek(offset)
        text = fh.read().decode(errors="replace")
    found = re.findall(r'placement\.requestlog .*?"(GET|PUT|POST|DELETE) (/[a-z_]*)', text)
    return dict(collections.Counter(f"{m} {p}" for m, p in found).most_common())


# -- output -------------------------------------------------------------------
# What each operation's section of the table is headed with.
TITLES = {
    "boot": "boot: select_destinations with alternates, a new instance",
    "live-migration": "live migration: no host named, no alternates, the source "
                      "ignored, the instance's cell",
    "targeted": "targeted move: a named host and node (Placement's in_tree), no "
                "alternates, the source ignored, the instance's cell",
}


def each(report: dict):
    """(operation, size, scheduler, figures) of the report, in its order."""
    for operation, sizes in report["results"].items():
        for size, by in sizes.items():
            for kind, r in by.items():
                yield operation, size, kind, r


def table(report: dict) -> str:
    def f(x, digits=1):
        return "-" if x is None else f"{x:,.{digits}f}"
    lines = []
    for operation, sizes in report["results"].items():
        lines += [f"{TITLES[operation]}:" if not lines else f"\n{TITLES[operation]}:",
                  *_rows(sizes, report["ratios"].get(operation, {}), f)]
    out = "\n".join(lines)
    flavored = [(size, kind, r) for _, size, kind, r in each(report) if r.get("by_flavor")]
    if flavored:
        out += ("\n\nper flavor (p50 / p99 ms, calls, errors):\n"
                "| nodes | scheduler | " + " | ".join(flavored[0][2]["by_flavor"]) + " |\n"
                "|---|---|" + "---|" * len(flavored[0][2]["by_flavor"]) + "\n")
        out += "\n".join(
            f"| {int(size):,} | {kind} | " + " | ".join(
                f"{f(b['p50_ms'])} / {f(b['p99_ms'])} ({b['calls']}, {b['errors']})"
                for b in r["by_flavor"].values()) + " |"
            for size, kind, r in flavored)
    for operation, size, kind, r in each(report):
        if r.get("daemon_histograms"):
            out += (f"\n\n{kind}'s own histograms over the {operation} calls, "
                    f"{int(size):,} nodes (bucket bounds, ms): {r['daemon_histograms']}")
    for _, size, kind, r in each(report):
        k = r.get("keep_up")
        if not k:
            continue
        out += (f"\n\nkeeping up, {int(size):,} nodes, {kind}: {k['seconds']:.0f} s, "
                f"claims written {k['written']}, load {k['load'][0]:.1f} - "
                f"{k['load'][1]:.1f}")
        for label in ("idle", "churn"):
            part = k[label]
            out += (f"\n  {label}: {part['cpu_ms_per_s']} CPU ms/s; by thread "
                    f"{part['cpu_ms_per_s_by_thread']}; reader metrics per s "
                    f"{part['metrics_per_s'] or '(none exposed)'}; its reader's "
                    f"queries run beside it: {sum(part['shadow_rows_per_s'].values()):,.0f} "
                    f"rows/s {part['shadow_rows_per_s']} over {part['shadow_polls']} "
                    f"polls, {part['shadow_cpu_ms_per_s']} CPU ms/s")
    out += "\n\nwarm-up calls (ms; not in the figures):\n" + "\n".join(
        f"  {operation}, {int(size):,} nodes, {kind}: "
        + ", ".join("failed" if ms is None else f"{ms:,.0f}" for ms in r["warmup_ms"])
        + "".join(f"\n    failed: {e}" for e in r.get("warmup_errors", []))
        for operation, size, kind, r in each(report))
    out += "\n\nPlacement's requests during the calls (warm-up and a move's set-up included):\n" + "\n".join(
        f"  {operation}, {int(size):,} nodes, {kind}: "
        + ", ".join(f"{k} {v}" for k, v in r.get("placement_requests", {}).items())
        for operation, size, kind, r in each(report))
    phases = "\n".join(
        f"  {row['seconds']:8.1f} s  {row['phase']}"
        + "".join(f", {k} {v}" for k, v in row.items() if k not in ("phase", "seconds"))
        for row in report["phases"])
    out += f"\n\nphases:\n{phases}"
    profile = report.get("profile")
    if profile and profile.get("top"):
        top = profile["top"]
        out += (f"\n\npy-spy, nova-sched, {profile['calls']} further calls "
                f"(p50 {f(profile['p50_ms'])} ms under the profiler), "
                f"{top['samples']} samples:\n  self:\n"
                + "\n".join(f"    {p:5.1f}%  {n}" for n, p in top["self"])
                + "\n  total:\n" + "\n".join(f"    {p:5.1f}%  {n}" for n, p in top["total"]))
    return out


def _rows(sizes: dict, ratios: dict, f) -> list[str]:
    """One operation's rows of the table: per size, each scheduler's
    figures and their ratio."""
    lines = ["| nodes | scheduler | p50 ms | p99 ms | mean | min / max | CPU ms/call "
             "(Placement's) | PSS MB | calls (errors) | lost / doubled / wrong node / stray "
             "| load 1 min |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for size, by in sizes.items():
        for kind, r in by.items():
            c = r["check"]
            lines.append(
                f"| {int(size):,} | {kind} | {f(r['p50_ms'])} | {f(r['p99_ms'])} | "
                f"{f(r['mean_ms'])} | {f(r['min_ms'])} / {f(r['max_ms'])} | "
                f"{f(r['cpu_ms_per_call'])} ({f(r['placement_cpu_ms_per_call'])}) | "
                f"{r['memory_mb']:,} | {r['calls']} ({r['errors']}) | "
                f"{len(c['lost'])} / {len(c['doubled'])} / {len(c['wrong_node'])} / "
                f"{len(c['stray'])} | {r['load'][0]:.1f} - {r['load'][1]:.1f} |")
            if c.get("pcpu_claimed_as_vcpu"):
                lines.append(f"| {int(size):,} | {kind}: {len(c['pcpu_claimed_as_vcpu'])} "
                             "dedicated-CPU claims of VCPU (nova's fallback query) "
                             "| | | | | | | | | |")
            if c.get("wrong_resources") or c.get("missing_trait"):
                lines.append(f"| {int(size):,} | {kind}: **{len(c['wrong_resources'])} "
                             f"claims not the flavor's resources, "
                             f"{len(c['missing_trait'])} without the required trait** "
                             "| | | | | | | | | |")
            if c.get("on_source") or c.get("not_target") or c.get("migration_changed"):
                lines.append(f"| {int(size):,} | {kind}: **{len(c['on_source'])} moves "
                             f"to their source, {len(c['not_target'])} not to the named "
                             f"node, {len(c['migration_changed'])} migration allocations "
                             "changed** | | | | | | | | | |")
        ratio = ratios.get(size)
        if ratio:
            lines.append(f"| {int(size):,} | **nova-scheduler / nova-sched** | "
                         f"**{ratio['p50']:,}x** | **{ratio['p99']:,}x** | | | | | | | |")
    return lines


def bad(report: dict) -> list[str]:
    problems = []
    for operation, size, kind, r in each(report):
        for check in (r["check"], r.get("check_profiled")):
            if not check:
                continue
            for key in ("lost", "doubled", "wrong_node", "wrong_resources",
                        "missing_trait", "stray", "on_source", "not_target",
                        "migration_changed"):
                if check.get(key):
                    problems.append(f"{kind}, {operation} at {size} nodes: "
                                    f"{key} {check[key][:5]}")
        if r["errors"]:
            problems.append(f"{kind}, {operation} at {size} nodes: {r['errors']} calls "
                            f"failed: {r['first_errors']}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000",
                        type=lambda s: [int(x) for x in s.split(",") if x],
                        help="fleet sizes, registered cumulatively (default 1000,10000)")
    parser.add_argument("--schedulers", default=",".join(SCHEDULERS),
                        type=lambda s: [x for x in s.split(",") if x],
                        help="which, in this order (default nova-scheduler,nova-sched)")
    parser.add_argument("--operations", default=",".join(OPERATIONS),
                        type=lambda s: [x for x in s.split(",") if x],
                        help="which select_destinations, boots first: boot, "
                        "live-migration, targeted (default all three)")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--shapes", choices=placement_rows.SHAPES, default="plain",
                        help="nodes as the fake driver leaves them (plain) or "
                        "libvirt-like: traits, aggregates, GPU/PCI children, PCPU "
                        "(varied; bench/placement_rows.py)")
    parser.add_argument("--flavors", choices=tuple(placement_rows.FLAVOR_SETS),
                        default="plain",
                        help="one plain flavor, or in turn plain, a required trait, "
                        "PCPU, VGPU and a PCI device (varied)")
    parser.add_argument("--keep-up", type=float, default=0, metavar="SECONDS",
                        help="after nova-sched's calls at the largest size: its CPU "
                        "and its Placement reader's rows while claims are written "
                        "through Placement's API for SECONDS")
    parser.add_argument("--churn-rate", type=float, default=20,
                        help="claims a second during --keep-up (default 20)")
    parser.add_argument("--no-instance-sync", action="store_true",
                        help="no sync_instance_info casts before the calls")
    parser.add_argument("--py-spy", action="store_true",
                        help="profile nova-sched at the largest size (extra calls)")
    parser.add_argument("--nova-sched-set", action="append", default=[],
                        metavar="GROUP.OPTION=VALUE",
                        help="an option of nova-sched's config file (repeatable), "
                        "e.g. nova_cells.refresh_interval=60")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object on stdout, the table on stderr")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--workdir", help="work directory (default: a new temporary one)")
    args = parser.parse_args()
    for kind in args.schedulers:
        if kind not in SCHEDULERS:
            parser.error(f"unknown scheduler {kind!r}: {', '.join(SCHEDULERS)}")
    for operation in args.operations:
        if operation not in OPERATIONS:
            parser.error(f"unknown operation {operation!r}: {', '.join(OPERATIONS)}")
    # In OPERATIONS' order: boots first, as before issue 40, so that their
    # figures are taken on a scheduler in the same state as before.
    args.operations = [o for o in OPERATIONS if o in args.operations]
    if args.py_spy and shutil.which("py-spy") is None:
        # Found missing only after the timed calls, it would cost the run.
        parser.error("--py-spy needs py-spy on PATH: python3 -m pip install py-spy")

    bench = Bench(args)
    say(f"work directory {bench.workdir}")

    def _term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, _term)
    code = 0
    try:
        bench.run()
    except (BenchError, novacloud.CloudError) as err:
        say(f"cannot go on: {err}")
        code = 2 if not any(bench.results.values()) else 1
    except KeyboardInterrupt:
        say("interrupted")
        code = 1
    finally:
        with contextlib.suppress(Exception):
            bench.close()
    if any(bench.results.values()):  # what was measured, even after a failure
        report = bench.report()
        problems = bad(report)
        for problem in problems:
            say(f"FAILED: {problem}")
        if problems:
            code = 1
        text = table(report)
        if args.json:
            print(text, file=sys.stderr)
            print(json.dumps(report, indent=1, default=str))
        else:
            print(text)
    if args.keep or code:
        say(f"kept {bench.workdir}")
    else:
        shutil.rmtree(bench.workdir, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
