"""End to end over RabbitMQ: one nova-sched daemon, a reporting fleet, requests.

    python bench/e2e_bench.py [--hosts 10000] [--requests 2000]
        [--workers 1[,2]] [--report-interval 10] [--rate N]
        [--database-url URL] [--json] [--keep] [--smoke]

Everything runs on the real RabbitMQ at 127.0.0.1:5672 (guest/guest), in a
private vhost made for the run and deleted after it, against a fresh
database (a SQLite file in a temporary directory; with ``--database-url``, a
new database created on that server and dropped after). For each value of
``--workers`` the benchmark starts from scratch: ``nova-sched-manage db
sync``, then one daemon process (``nova-sched --config-file ...`` with
``[scheduler] workers = N``, from this source tree), awaited until it
consumes its topic. Then it measures, in order:

0. **No-op baseline before the hosts report**: as in step 3, the broker
   and the daemon idle.
1. **Registration.** Two reporter processes cast ``compute_node_update``
   (CONTRACT section 3) for all ``--hosts`` hosts as fast as they can. Reports
   ingested/s = hosts in ``compute_nodes`` / (time the table first holds
   them all - first cast), the table polled every 0.2 s; the daemon's CPU
   per report = its user + system CPU (``/proc/<pid>/stat``, the daemon and
   every process under it) over the same span / hosts stored. A host whose
   report never reaches the table is a lost registration.
2. **Re-reporting.** From now to the end every host reports again every
   ``--report-interval`` seconds, the fleet's reports spread evenly over
   the interval. Over one interval with no requests: reports offered/s,
   reports ingested/s (nodes whose ``updated_at`` falls in the interval),
   the daemon's CPU (% of one core) and CPU per ingested report (its idle
   work included), and the age of the oldest stored report (about one
   interval while the daemon keeps up; more when reports queue).
3. **No-op baseline**, while the fleet re-reports to the daemon. A plain
   oslo.messaging RPC server on a topic of its own that only notes each
   cast's arrival gets ``--requests`` ``run_instance`` casts of the very
   shape (and size) the scheduler gets from the same two clients, measured
   as step 4 measures the daemon: casts / (last arrival - first cast).
   When the server is faster than the clients this is the clients' speed,
   so it is measured a second time from a full queue: the server pauses,
   the clients fill its queue, it resumes: casts / (last arrival -
   resumption), the consumer's own ceiling.
4. **Requests**, once the daemon has no backlog (a lone request reaches
   its compute node within a second; waited for at most three report
   intervals, and the wait is printed). The two client processes cast ``--requests``
   ``run_instance`` requests (Havana's shape, one instance each) to the
   scheduler topic, as fast as they can (or at ``--rate`` per second),
   noting the time of each cast. ONE listener process plays every compute
   node: an RPC server on ``Target(topic='compute', server='*')``, whose
   binding ``compute.*`` catches the daemon's ``run_instance`` cast to
   ``compute.<host>`` for every host, noting when each instance arrives.
   run_instance/s sustained = instances arrived / (last arrival - first
   cast); latency = arrival - cast, p50 and p99; the daemon's CPU per
   request over the phase (report ingestion included), and that CPU
   thread by thread with each thread's context switches per request
   (``/proc/<pid>/task``: the names ``nova_sched.os_thread_names`` gives
   the daemon's threads), which shows the kernel's work and the handoffs
   between threads that a Python profile does not. An instance that
   neither arrived nor is in ERROR in the ``instances`` table by
   ``--deadline`` seconds after the last cast is **lost**: each is printed
   with its row (and those that turn up later in the run are counted).
   ERROR instances (no valid host...) are counted apart.
5. **Paced requests** (unless ``--rate`` is given): requests again at
   ``--paced-fraction`` (0.5) of the rate step 4 measured, for about
   ``--paced-seconds``, once the daemon has no backlog again: the latency
   below saturation (if the daemon cannot keep up with the reports alone,
   there is no "below saturation", and the figure shows it).

It prints a table of these figures (with ``--json``, one JSON object on
stdout and the table on stderr) and, with several worker counts, each
one's run_instance/s relative to the first. The JSON also has each
phase's twenty slowest requests (``latency_ms.slowest``: seconds after
the phase's first cast, ms, instance uuid) and that first cast's wall
time (``first_cast_at``): with ``--keep``, the daemon's log line for each
instance then shows whether its time went before or after the daemon
scheduled it.
Figures, not pass/fail: the exit status is 1 only when something was lost
(a request, a registration) or the daemon died, 2 when the benchmark could
not run (no broker, no database server).

Every process the benchmark starts is stopped on the way out, Ctrl-C and
SIGTERM included: peers over their pipe, then terminated; the daemon with
SIGTERM, then killed with its process group. The daemon also gets SIGTERM
from the kernel should the benchmark itself die (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime as dt
import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import e2e_peers  # puts tests/functional on sys.path; threading backend first
import cloudlib  # noqa: E402  (tests/functional/cloudlib.py)
import perf_profile  # noqa: E402  (bench/perf_profile.py)
import pyspy  # noqa: E402  (bench/pyspy.py)
import sqlalchemy as sa  # noqa: E402

POLL = 0.2  # seconds between polls of the database and the recorders
LOST_SHOWN = 200  # lost requests listed on the terminal
ROUND_TRIPS = 300  # no-op calls timed one after another
SETTLED_S = 1.0  # a lone request this fast: the daemon has no backlog
NOOP_TOPIC = "e2e_noop"
DAEMON_HOST = "e2e-scheduler"
SMOKE = {"hosts": 200, "requests": 100, "report_interval": 5.0,
         "paced_seconds": 5.0, "deadline": 30.0}
DEFAULTS = {"hosts": 10000, "requests": 2000, "report_interval": 10.0,
            "paced_seconds": 20.0, "deadline": 120.0}


class BenchError(Exception):
    """The benchmark cannot go on; the message says why."""


def say(msg: str) -> None:
    print(f"e2e: {msg}", file=sys.stderr, flush=True)


# -- measuring ---------------------------------------------------------------
_TICK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (``pid``
    may be ``<pid>/task/<tid>``: a thread's)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the command name, which may hold spaces and parentheses.
    return text[text.rindex(")") + 2:].split()


def process_tree(root: int) -> list[int]:
    """``root`` and every live process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields:
                children.setdefault(int(fields[1]), []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def cpu_times(root: int) -> tuple[float, float]:
    """User and system CPU seconds of ``root``'s tree (reaped children
    included)."""
    user = system = 0
    for pid in process_tree(root):
        fields = _stat_fields(pid)
        if fields:  # utime, stime, cutime, cstime: fields 14-17 of stat
            user += int(fields[11]) + int(fields[13])
            system += int(fields[12]) + int(fields[14])
    return user / _TICK, system / _TICK


# The daemon's threads by the names nova_sched.os_thread_names gives them
# in the kernel (the request threads counted together).
THREAD_GROUPS = (("request threads", r"request-worke-\d+"),
                 ("consumer thread (reports too)", "topic-consumer"),
                 ("notification thread", "notifications"),
                 ("report writer", "report-writer"))


def thread_times(root: int) -> dict[str, list[float]]:
    """Per thread group of ``root``'s tree: CPU seconds (user + system) and
    context switches (voluntary and involuntary), ``/proc/<pid>/task``."""
    groups: dict[str, list[float]] = {}
    for pid in process_tree(root):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            thread = f"{pid}/task/{tid}"
            fields = _stat_fields(thread)
            try:
                comm = Path(f"/proc/{thread}/comm").read_text().strip()
                status = Path(f"/proc/{thread}/status").read_text()
            except OSError:
                fields = None
            if fields is None:  # the thread has ended
                continue
            label = next((label for label, pattern in THREAD_GROUPS
                          if re.fullmatch(pattern, comm)), "other threads")
            total = groups.setdefault(label, [0.0, 0.0])
            total[0] += (int(fields[11]) + int(fields[12])) / _TICK
            total[1] += sum(int(line.split()[1]) for line in status.splitlines()
                            if "ctxt_switches:" in line)
    return groups


def per_request(before: dict[str, list[float]], after: dict[str, list[float]],
                requests: int) -> dict[str, dict[str, float]]:
    """``thread_times`` over an interval, per request: CPU ms and switches
    by thread group (a thread that ended meanwhile took its counts with
    it: never below zero)."""
    return {label: {"cpu_ms": max(0.0, now[0] - before.get(label, [0.0, 0.0])[0])
                    * 1000 / requests,
                    "switches": max(0.0, now[1] - before.get(label, [0.0, 0.0])[1])
                    / requests}
            for label, now in after.items()}


def cpu_seconds(root: int) -> float:
    """User + system CPU of ``root``'s tree (reaped children included)."""
    return sum(cpu_times(root))


def memory_mb(root: int) -> float:
    """Memory of ``root``'s tree: the sum of proportional set sizes (PSS),
    so pages that forked workers share are counted once; RSS where the
    kernel has no smaps_rollup."""
    total = 0
    for pid in process_tree(root):
        for path, key in ((f"/proc/{pid}/smaps_rollup", "Pss:"),
                          (f"/proc/{pid}/status", "VmRSS:")):
            try:
                lines = Path(path).read_text().splitlines()
            except OSError:
                continue
            total += next((int(line.split()[1]) for line in lines
                           if line.startswith(key)), 0)
            break
    return total / 1024


def percentile(values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


# -- the broker ----------------------------------------------------------------
# -- the database --------------------------------------------------------------
class Database:
    """The run's fresh database, and what the benchmark reads from it."""

    def __init__(self, workdir: Path, server_url: str | None):
        self.server_url = server_url
        self.created: str | None = None
        if server_url is None:
            self.url = f"sqlite:///{workdir / 'nova_sched.sqlite'}"
        else:
            self.url = self._create_on_server(server_url)
        self._engine: sa.Engine | None = None

    def _admin(self) -> sa.Engine:
        return sa.create_engine(self.server_url, isolation_level="AUTOCOMMIT")

    def _create_on_server(self, server_url: str) -> str:
        base = sa.engine.make_url(server_url)
        name = f"nova_sched_e2e_{uuid.uuid4().hex[:12]}"
        admin = self._admin()
        try:
            with admin.connect() as conn:
                conn.exec_driver_sql(f"CREATE DATABASE {name}")
        except sa.exc.SQLAlchemyError as err:
            raise BenchError(f"cannot create a database on {base.render_as_string()}: "
                             f"{str(getattr(err, 'orig', err))[:200]}") from None
        finally:
            admin.dispose()
        self.created = name
        return base.set(database=name).render_as_string(hide_password=False)

    @property
    def engine(self) -> sa.Engine:
        if self._engine is None:
            args = {"timeout": 30} if self.url.startswith("sqlite") else {}
            self._engine = sa.create_engine(self.url, connect_args=args)
        return self._engine

    def scalar(self, sql: str, **params):
        with self.engine.connect() as conn:
            return conn.execute(sa.text(sql), params).scalar()

    def count_nodes(self) -> int:
        return self.scalar("SELECT COUNT(*) FROM compute_nodes WHERE deleted = :f",
                           f=False)

    def count_updated_since(self, since: dt.datetime) -> int:
        query = sa.text("SELECT COUNT(*) FROM compute_nodes WHERE updated_at >= :t"
                        ).bindparams(sa.bindparam("t", type_=sa.DateTime))
        with self.engine.connect() as conn:
            return conn.execute(query, {"t": since}).scalar()

    def oldest_report_age(self) -> float | None:
        """Seconds since the least recently stored report of a live node."""
        nodes = sa.table("compute_nodes", sa.column("updated_at", sa.DateTime),
                         sa.column("deleted", sa.Boolean))
        with self.engine.connect() as conn:
            oldest = conn.execute(sa.select(sa.func.min(nodes.c.updated_at))
                                  .where(nodes.c.deleted == sa.false())).scalar()
        if oldest is None:
            return None
        now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
        return (now - oldest).total_seconds()

    def error_uuids(self) -> set[str]:
        with self.engine.connect() as conn:
            return set(conn.execute(sa.text(
                "SELECT uuid FROM instances WHERE vm_state = 'error'")).scalars())

    def instance_rows(self, uuids: list[str]) -> dict[str, dict]:
        rows: dict[str, dict] = {}
        with self.engine.connect() as conn:
            for i in range(0, len(uuids), 400):
                chunk = uuids[i:i + 400]
                query = sa.text(
                    "SELECT uuid, host, node, vm_state, task_state FROM instances "
                    "WHERE uuid IN :u").bindparams(sa.bindparam("u", expanding=True))
                for row in conn.execute(query, {"u": chunk}):
                    rows[row.uuid] = dict(row._mapping)
        return rows

    def first_fault(self, uuids: set[str]) -> str | None:
        if not uuids:
            return None
        query = sa.text("SELECT message FROM instance_faults WHERE instance_uuid IN :u "
                        "ORDER BY id LIMIT 1").bindparams(
                            sa.bindparam("u", expanding=True))
        with self.engine.connect() as conn:
            return conn.execute(query, {"u": sorted(uuids)[:400]}).scalar()

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
        if self.created:
            admin = self._admin()
            try:
                with admin.connect() as conn:
                    if admin.dialect.name == "postgresql":
                        conn.exec_driver_sql(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            f"WHERE datname = '{self.created}' "
                            "AND pid <> pg_backend_pid()")
                    conn.exec_driver_sql(f"DROP DATABASE {self.created}")
            except sa.exc.SQLAlchemyError as err:
                say(f"could not drop database {self.created}: {err}")
            finally:
                admin.dispose()
            self.created = None


# -- processes -----------------------------------------------------------------
def _die_with_parent() -> None:
    """In the daemon's child before exec: SIGTERM when the benchmark dies."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Daemon:
    """The nova-sched process (and, with workers > 1, the workers it forks)."""

    def __init__(self, config_file: Path, log: Path):
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                cloudlib.entry_point("nova_sched.cmd.scheduler", "--config-file",
                                     str(config_file)),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=cloudlib.subprocess_env(), cwd=str(config_file.parent),
                start_new_session=True, preexec_fn=_die_with_parent)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise BenchError(f"the daemon exited with status {self.proc.returncode}:\n"
                             + self.tail())

    def tail(self, lines: int = 25) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            text = []
        return "\n".join(f"  | {line}" for line in text)

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM (forwarded to its workers), then SIGKILL to its group."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                say(f"daemon {self.pid} did not stop within {timeout:.0f} s: killed")
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # its workers, if any remain
        if self.proc.poll() is None:
            self.proc.wait(10)
        return self.proc.returncode


class Peer:
    """A process of bench/e2e_peers.py, driven over a pipe."""

    _ctx = multiprocessing.get_context("spawn")

    def __init__(self, name: str, role: str, **params):
        self.name = name
        self.conn, child = self._ctx.Pipe()
        self.proc = self._ctx.Process(target=e2e_peers.peer_main, name=name,
                                      args=(role, params, child), daemon=True)
        self.proc.start()
        child.close()

    def send(self, method: str, *args) -> None:
        self.conn.send((method, args))

    def done(self) -> bool:
        return self.conn.poll()

    def result(self, timeout: float = 600):
        deadline = time.monotonic() + timeout
        while not self.conn.poll(0.5):
            if not self.proc.is_alive():
                raise BenchError(f"{self.name} exited with status {self.proc.exitcode}")
            if time.monotonic() > deadline:
                raise BenchError(f"{self.name} did not answer within {timeout:.0f} s")
        try:
            status, value = self.conn.recv()
        except EOFError:
            raise BenchError(f"{self.name} exited with status {self.proc.exitcode}") from None
        if status != "ok":
            raise BenchError(f"{self.name} failed:\n{value}")
        return value

    def call(self, method: str, *args, timeout: float = 600):
        self.send(method, *args)
        return self.result(timeout)

    def close(self) -> None:
        if self.proc.is_alive():
            with contextlib.suppress(Exception):
                self.conn.send(("exit", ()))
            self.proc.join(15)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self.conn.close()


def gather(peers: list[Peer], method: str, *args_each, timeout: float = 600) -> list:
    """``method`` on every peer at once (``args_each[i]``: peer i's args)."""
    for peer, args in zip(peers, args_each or [()] * len(peers)):
        peer.send(method, *args)
    return [peer.result(timeout) for peer in peers]


# -- one run -----------------------------------------------------------------
class Run:
    """A private vhost, a fresh database, the daemon and its peers, for one
    worker count. ``close`` undoes all of it."""

    def __init__(self, args, workers: int):
        self.args = args
        self.workers = workers
        self.hosts = e2e_peers.host_names(args.hosts)
        self.workdir = Path(tempfile.mkdtemp(prefix=f"nova-sched-e2e-w{workers}-"))
        self.keep = args.keep
        self.failed = False
        self.reports_cpu_per_s = 0.0  # measured by reports_only
        self.peers: list[Peer] = []
        # Requests lost at their phase's deadline -> that phase's result,
        # to count those that arrive (or go to ERROR) later on.
        self.overdue: dict[str, dict] = {}
        self.daemon: Daemon | None = None
        self.probe: cloudlib.BrokerProbe | None = None
        self.db: Database | None = None
        self.broker: cloudlib.Broker | None = None

    def open(self) -> None:
        """The private vhost, the database and the configuration file."""
        self.broker = cloudlib.Broker(f"e2e_{uuid.uuid4().hex[:8]}").open()
        suffix = ""
        if self.broker.isolated_topics:
            say("no private vhost (rabbitmqctl missing or refused): "
                "using per-run topic names on vhost /")
            suffix = "_" + uuid.uuid4().hex[:8]
        self.topics = {"scheduler": "scheduler" + suffix, "compute": "compute" + suffix,
                       "noop": NOOP_TOPIC + suffix}
        try:
            self.probe = cloudlib.BrokerProbe(self.broker.vhost)
        except Exception as err:
            raise BenchError(f"cannot log in to RabbitMQ as {cloudlib.BROKER_USER} "
                             f"(vhost {self.broker.vhost or '/'}): {err}") from None
        self.db = Database(self.workdir, self.args.database_url)
        self.config_file = self.workdir / "nova-sched.conf"
        self.config_file.write_text(self._config())

    def _config(self) -> str:
        groups: dict[str, list[str]] = {}
        for setting in self.args.set:
            name, _, value = setting.partition("=")
            group, _, option = name.rpartition(".")
            groups.setdefault(group or "DEFAULT", []).append(f"{option} = {value}")
        return "\n".join([
            "[DEFAULT]",
            f"host = {DAEMON_HOST}",
            f"transport_url = {self.broker.url}",
            f"control_exchange = nova_sched_e2e_{uuid.uuid4().hex[:8]}",
            f"scheduler_topic = {self.topics['scheduler']}",
            f"compute_topic = {self.topics['compute']}",
            f"state_path = {self.workdir}",
            "",
            "[database]",
            f"connection = {self.db.url}",
            "",
            "[scheduler]",
            f"workers = {self.workers}",
            *groups.pop("scheduler", []),
            "",
            "[oslo_messaging_rabbit]",
            # Queues of a killed run vanish even if its vhost is kept.
            "rabbit_transient_queues_ttl = 600",
            *groups.pop("oslo_messaging_rabbit", []),
            "",
            *(line for group, lines in groups.items()
              for line in (f"[{group}]", *lines, "")),
        ])

    # -- start-up ------------------------------------------------------
    def start(self) -> None:
        done = subprocess.run(
            cloudlib.entry_point("nova_sched.cmd.manage", "--config-file",
                                 str(self.config_file), "db", "sync"),
            capture_output=True, text=True, timeout=300, env=cloudlib.subprocess_env(),
            cwd=str(self.workdir), stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise BenchError(f"nova-sched-manage db sync failed ({done.returncode}):\n"
                             f"{done.stdout}{done.stderr}")
        cfg = str(self.config_file)
        half = (self.hosts[0::2], self.hosts[1::2])
        self.compute = self._peer("compute-listener", "recorder", config_file=cfg,
                                  topic=self.topics["compute"], server="*",
                                  kind="compute")
        self.noop = self._peer("noop-server", "recorder", config_file=cfg,
                               topic=self.topics["noop"], server="noop", kind="noop")
        self.casters = [self._peer(f"client-{i}", "caster", config_file=cfg,
                                   topics={"scheduler": self.topics["scheduler"],
                                           "noop": self.topics["noop"]})
                        for i in range(2)]
        self.reporters = [self._peer(f"reporter-{i}", "reporter", config_file=cfg,
                                     scheduler_topic=self.topics["scheduler"],
                                     hosts=hosts)
                          for i, hosts in enumerate(half)]
        self.daemon = Daemon(self.config_file, self.workdir / "nova-sched.log")
        for peer in self.peers:
            peer.result(timeout=120)  # each says it is ready
        deadline = time.monotonic() + 120
        while True:
            self.daemon.check()
            queue = self.probe.queue(self.topics["scheduler"])
            if queue and queue[1] >= self.workers:
                break
            if time.monotonic() > deadline:
                raise BenchError("the daemon did not consume its topic within 120 s:\n"
                                 + self.daemon.tail())
            time.sleep(POLL)

    def _peer(self, name: str, role: str, **params) -> Peer:
        peer = Peer(name, role, **params)
        self.peers.append(peer)
        return peer

    # -- phases ----------------------------------------------------------
    def register(self) -> dict:
        """Every host reports once, as fast as two clients cast."""
        cpu0 = cpu_seconds(self.daemon.pid)
        for reporter in self.reporters:
            reporter.send("register")
        results: list[dict | None] = [None] * len(self.reporters)
        known, t_known = 0, time.monotonic()
        cap = time.monotonic() + 60 + len(self.hosts) / 20
        while known < len(self.hosts):
            self.daemon.check()
            for i, reporter in enumerate(self.reporters):
                if results[i] is None and reporter.done():
                    results[i] = reporter.result()
            now = time.monotonic()
            count = self.db.count_nodes()
            if count > known:
                known, t_known = count, now
            sent_all = all(r is not None for r in results)
            if sent_all and now - t_known > self.args.stall_timeout:
                say(f"registration stalled at {known} of {len(self.hosts)} hosts "
                    f"for {self.args.stall_timeout:.0f} s")
                break
            if now > cap:
                say(f"registration gave up after {now - t_known:.0f} s")
                break
            if known < len(self.hosts):
                time.sleep(POLL)
        cpu = cpu_seconds(self.daemon.pid) - cpu0
        results = [r if r is not None else self.reporters[i].result()
                   for i, r in enumerate(results)]
        sent = sum(r["sent"] for r in results)
        t_first = min((r["t_first"] for r in results if r["t_first"] is not None),
                      default=t_known)
        t_sent = max(r["t_last"] for r in results)
        errors = sum(r["errors"] for r in results)
        if errors:
            say(f"{errors} report casts failed: "
                + next(r["first_error"] for r in results if r["first_error"]))
        return {
            "sent": sent, "cast_errors": errors,
            "sent_per_s": sent / max(t_sent - t_first, 1e-9),
            "known": known,
            "ingested_per_s": known / max(t_known - t_first, 1e-9),
            "seconds": t_known - t_first,
            "cpu_ms_per_report": cpu * 1000 / known if known else None,
        }

    def start_reporting(self) -> None:
        base = time.monotonic() + 0.5
        gather(self.reporters, "start",
               *[(self.args.report_interval, base)] * len(self.reporters))
        self.reporting_base = base

    def reports_only(self, profile: bool = False) -> dict:
        """One report interval of re-reports, no requests."""
        interval = self.args.report_interval
        delay = self.reporting_base - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        recording = (pyspy.Recording(self.daemon.pid, self.workdir / "py-spy-reports.txt")
                     .start() if profile else None)
        since = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
        sent0 = sum(s["sent"] for s in gather(self.reporters, "stats"))
        cpu0, t0 = cpu_seconds(self.daemon.pid), time.monotonic()
        time.sleep(interval)
        self.daemon.check()
        cpu = cpu_seconds(self.daemon.pid) - cpu0
        elapsed = time.monotonic() - t0
        stats = gather(self.reporters, "stats")
        sent = sum(s["sent"] for s in stats) - sent0
        updated = self.db.count_updated_since(since)
        late = max(s["late"] for s in stats)
        if late > 1.0:
            say(f"the reporters fell {late:.1f} s behind their schedule: "
                "fewer reports were offered than planned")
        self.reports_cpu_per_s = cpu / elapsed
        if recording is not None:
            recording.stop()  # its stacks stay in the work directory
        return {
            "oldest_report_age_s": self.db.oldest_report_age(),
            "offered_per_s": sent / elapsed,
            "ingested_per_s": updated / elapsed,
            "cpu_percent": cpu / elapsed * 100,
            "cpu_ms_per_report": cpu * 1000 / updated if updated else None,
            "reporters_late_s": late,
        }

    def settle(self, limit: float) -> float | None:
        """Wait until the daemon has no backlog: a lone request reaches its
        compute node within a second.

        Returns the seconds waited; None if the daemon did not get there
        within ``limit`` (the next phase then meets a backlog).
        """
        t0 = time.monotonic()
        while True:
            probe = self.casters[0].call("cast", "scheduler", 1, None, time.monotonic(), 0, 1)
            casts = dict(probe["casts"])
            arrivals, failed, _ = self._await(self.compute, casts, t0 + limit, True)
            if failed or any(arrivals[u] - casts[u] <= SETTLED_S for u in arrivals):
                return time.monotonic() - t0
            if time.monotonic() - t0 > limit:
                say(f"a lone request still takes more than {SETTLED_S:g} s after "
                    f"{limit:.0f} s of waiting: the daemon has a backlog")
                return None

    def _cast(self, to: str, count: int, rate: float | None) -> dict:
        """Both clients cast ``count`` requests to ``to`` (``rate`` per second,
        or at once): the casts as {uuid: time}, errors, first and last cast
        times, casts/s."""
        start = time.monotonic() + 0.3
        n = len(self.casters)
        results = gather(self.casters, "cast",
                         *[(to, count, rate, start, i, n) for i in range(n)],
                         timeout=max(600, count / (rate or 1) * 2))
        casts = {u: t for r in results for u, t in r["casts"]}
        errors = sum(r["errors"] for r in results)
        if errors:
            say(f"{errors} casts to {to} failed: "
                + next(r["first_error"] for r in results if r["first_error"]))
        t_first = min(casts.values(), default=start)
        t_last = max(casts.values(), default=start)
        return {"casts": casts, "errors": errors, "t_first": t_first, "t_last": t_last,
                "per_s": len(casts) / max(t_last - t_first, 1e-9)}

    def _await(self, recorder: Peer, casts: dict, give_up: float,
               errors_count: bool) -> tuple[dict, set, int]:
        """Arrivals at ``recorder`` until every cast is in or ``give_up``.

        With ``errors_count`` an instance in ERROR in the database is
        answered too. Returns ({uuid: arrival}, uuids in ERROR, duplicates).
        """
        arrivals: dict[str, float] = {}
        failed: set[str] = set()
        duplicates = 0
        while True:
            self.daemon.check()
            for uuid_, t in recorder.call("take"):
                if uuid_ in arrivals:
                    duplicates += 1
                elif uuid_ in casts:
                    arrivals[uuid_] = t
                elif uuid_ in self.overdue:
                    self.overdue.pop(uuid_)["answered_after_deadline"] += 1
            if errors_count:
                errors = self.db.error_uuids()
                failed = (errors & casts.keys()) - arrivals.keys()
                for uuid_ in errors & self.overdue.keys():
                    self.overdue.pop(uuid_)["answered_after_deadline"] += 1
            if len(arrivals) + len(failed) >= len(casts) or time.monotonic() > give_up:
                return arrivals, failed, duplicates
            time.sleep(POLL)

    def noop_baseline(self, preload: bool) -> dict:
        """How fast the no-op server consumes ``--requests`` casts.

        ``preload`` False: measured as run_instance is, the clients casting
        while the server consumes: casts / (last arrival - first cast).
        True: the server pauses, the clients fill its queue, it resumes:
        casts / (last arrival - resumption), whatever the clients' speed.
        """
        self.noop.call("take")
        if preload:
            self.noop.call("pause")
        sent = self._cast("noop", self.args.requests, None)
        began = self.noop.call("resume") if preload else sent["t_first"]
        arrivals, _, duplicates = self._await(
            self.noop, sent["casts"], time.monotonic() + self.args.deadline, False)
        last = max(arrivals.values(), default=began)
        lost = sorted(sent["casts"].keys() - arrivals.keys())
        return {
            "cast": len(sent["casts"]), "cast_errors": sent["errors"],
            "cast_per_s": sent["per_s"], "arrived": len(arrivals),
            "arrived_per_s": len(arrivals) / (last - began) if arrivals else None,
            "lost": len(lost), "duplicates": duplicates,
            "lost_instances": [{"uuid": u} for u in lost],
        }

    def noop_round_trip(self) -> dict:
        """The wire's own latency: calls to the no-op server, one at a time,
        while the fleet re-reports (the paced run's p99 is judged by it)."""
        took = [t * 1000 for t in self.casters[0].call("round_trips", "noop", ROUND_TRIPS)]
        return {"calls": len(took), "p50": percentile(took, 50), "p99": percentile(took, 99)}

    def requests(self, count: int, rate: float | None, profile: bool = False,
                 perf: bool = False) -> dict:
        """``count`` run_instance requests through the daemon to the computes.

        An instance neither arrived nor in ERROR ``--deadline`` seconds
        after the last cast is lost.
        """
        self.compute.call("take")  # forget stray arrivals of an earlier phase
        recording = (pyspy.Recording(self.daemon.pid, self.workdir / "py-spy-requests.txt")
                     .start() if profile else None)
        perf_rec = (perf_profile.Recording(self.daemon.pid, self.workdir / "perf-requests.data")
                    .start() if perf else None)
        (user0, sys0), wall0 = cpu_times(self.daemon.pid), time.monotonic()
        threads0 = thread_times(self.daemon.pid)
        sent = self._cast("scheduler", count, rate)
        casts = sent["casts"]
        arrivals, failed, duplicates = self._await(
            self.compute, casts, sent["t_last"] + self.args.deadline, True)
        user1, sys1 = cpu_times(self.daemon.pid)
        threads1 = thread_times(self.daemon.pid)
        cpu, system = user1 - user0 + sys1 - sys0, sys1 - sys0
        # What the reports (and the daemon's idle work) cost over as long,
        # as the reports-only interval measured it: the rest is the requests'.
        reports_cpu = self.reports_cpu_per_s * (time.monotonic() - wall0)
        top = recording.stop() if recording is not None else None
        native = perf_rec.stop(len(arrivals)) if perf_rec is not None else None
        lost = sorted(casts.keys() - arrivals.keys() - failed)
        latencies = [(arrivals[u] - casts[u]) * 1000 for u in arrivals]
        t_end = max(arrivals.values(), default=sent["t_first"])
        out = {
            "requests": count, "rate": rate, "cast": len(casts),
            # The first cast's wall-clock time, which the offsets of
            # ``slowest`` count from (the daemon's log is in wall time).
            "first_cast_at": time.time() - (time.monotonic() - sent["t_first"]),
            "cast_errors": sent["errors"], "cast_per_s": sent["per_s"],
            "arrived": len(arrivals),
            "arrived_per_s": len(arrivals) / max(t_end - sent["t_first"], 1e-9),
            "latency_ms": {"p50": percentile(latencies, 50),
                           "p99": percentile(latencies, 99),
                           "max": max(latencies, default=None),
                           # The tail: (seconds after the first cast, ms,
                           # instance uuid), to find in the daemon's log.
                           "slowest": sorted(
                               ((round(casts[u] - sent["t_first"], 3),
                                 round((arrivals[u] - casts[u]) * 1000, 1), u)
                                for u in arrivals),
                               key=lambda item: -item[1])[:20]},
            "error": len(failed), "lost": len(lost), "duplicates": duplicates,
            "daemon_cpu_ms_per_request": cpu * 1000 / len(arrivals) if arrivals else None,
            "daemon_cpu_ms_per_request_excl_reports":
                max(0.0, cpu - reports_cpu) * 1000 / len(arrivals) if arrivals else None,
            # The kernel's part (sockets, the database file, threads woken):
            # work no Python profile shows.
            "daemon_system_share": system / cpu if cpu > 0 else None,
            # Where it went, thread by thread (user + system ms and context
            # switches per request), reports and idle work included.
            "by_thread": per_request(threads0, threads1, len(arrivals)) if arrivals else {},
        }
        if top is not None:
            out["profile"] = top
        if native is not None:
            out["perf"] = native
        if failed:
            out["error_example"] = self.db.first_fault(failed)
        rows = self.db.instance_rows(lost) if lost else {}
        out["lost_instances"] = [
            {"uuid": u, **({k: v for k, v in rows[u].items() if k != "uuid"}
                           if u in rows else {"instances_row": None})}
            for u in lost]
        # Lost stays lost; whether they turn up later is noted apart.
        out["answered_after_deadline"] = 0
        self.overdue.update(dict.fromkeys(lost, out))
        return out

    def stop_reporting(self) -> dict:
        stats = gather(self.reporters, "stop")
        return {"cast_errors": sum(s["errors"] for s in stats)}

    # -- the whole run -------------------------------------------------------
    def execute(self) -> dict:
        a = self.args
        tag = f"[workers={self.workers}]"
        self.open()
        say(f"{tag} starting: {len(self.hosts)} hosts, {a.requests} requests, "
            f"vhost {self.broker.vhost or '/'}, database {self.db.url.split('://')[0]}, "
            f"work directory {self.workdir}")
        self.start()
        result: dict = {"hosts": len(self.hosts), "workers": self.workers,
                        "database": self.db.engine.dialect.name}
        say(f"{tag} no-op server before the hosts report: {a.requests} casts")
        result["noop_idle"] = self.noop_baseline(preload=False)
        say(f"{tag} registering {len(self.hosts)} hosts")
        result["registration"] = reg = self.register()
        say(f"{tag} {reg['known']}/{len(self.hosts)} hosts stored in {reg['seconds']:.1f} s "
            f"({reg['ingested_per_s']:.0f} reports/s)")
        self.start_reporting()
        say(f"{tag} re-reporting every {a.report_interval:g} s; "
            f"{a.report_interval:g} s of reports only")
        result["reports_only"] = self.reports_only(profile=a.py_spy)
        say(f"{tag} no-op server while the hosts re-report: {a.requests} casts as "
            "the clients cast them, then from a full queue")
        result["noop"] = self.noop_baseline(preload=False)
        result["noop_drain"] = self.noop_baseline(preload=True)
        say(f"{tag} no-op server's call round trip: {ROUND_TRIPS} calls, one after another")
        result["noop_round_trip"] = self.noop_round_trip()
        # A daemon that cannot keep up with the reports alone never settles:
        # waiting longer than a few report intervals only grows its backlog.
        settle_limit = max(10.0, 3 * a.report_interval)
        result["settled_s"] = [self.settle(settle_limit)]
        what = f"at {a.rate:g}/s" if a.rate else "as fast as the clients cast"
        say(f"{tag} {a.requests} run_instance requests {what}")
        result["requests"] = req = self.requests(a.requests, a.rate, profile=a.py_spy,
                                                 perf=a.perf)
        say(f"{tag} {req['arrived']} placed ({req['arrived_per_s']:.1f}/s), "
            f"{req['error']} error, {req['lost']} lost")
        if not a.rate and a.paced_fraction > 0 and req["arrived"]:
            rate = req["arrived_per_s"] * a.paced_fraction
            count = max(20, min(a.requests, round(rate * a.paced_seconds)))
            say(f"{tag} waiting until a lone request is answered within {SETTLED_S:g} s")
            result["settled_s"].append(self.settle(settle_limit))
            say(f"{tag} {count} run_instance requests paced at {rate:.1f}/s")
            result["paced"] = self.requests(count, rate)
        if self.overdue:  # a last look for requests lost at a deadline
            self._await(self.compute, {}, 0, True)
        result["re_report_errors"] = self.stop_reporting()["cast_errors"]
        result["hosts_known_at_end"] = self.db.count_nodes()
        result["daemon_memory_mb"] = memory_mb(self.daemon.pid)
        self.daemon.check()
        return result

    def close(self) -> None:
        if self.daemon is not None:
            code = self.daemon.stop()
            if code not in (0, None):
                say(f"the daemon exited with status {code} (log {self.daemon.log})")
                self.failed = True
        for peer in self.peers:
            peer.close()
        if self.probe is not None:
            self.probe.close()
        if self.db is not None:
            self.db.close()
        if self.broker is not None:
            self.broker.close()
        if self.keep or self.failed:
            say(f"logs kept in {self.workdir}")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)


# -- reporting ---------------------------------------------------------------
def _num(value, fmt: str = "{:,.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def _lat(phase: dict | None) -> str:
    if not phase:
        return "-"
    lat = phase["latency_ms"]
    return f"{_num(lat['p50'], '{:,.0f}')} / {_num(lat['p99'], '{:,.0f}')}"


def table(results: list[dict], args) -> str:
    rows: list[tuple[str, list[str]]] = []

    def row(label, fn):
        rows.append((label, [fn(r) for r in results]))

    row("hosts", lambda r: _num(r["hosts"]))
    row("daemon workers", lambda r: str(r["workers"]))
    row("registration: reports cast/s (2 clients)",
        lambda r: _num(r["registration"]["sent_per_s"]))
    row("registration: reports ingested/s", lambda r: _num(r["registration"]["ingested_per_s"]))
    row("registration: daemon CPU ms per report",
        lambda r: _num(r["registration"]["cpu_ms_per_report"], "{:.2f}"))
    row("registration: hosts stored",
        lambda r: f"{r['registration']['known']:,}/{r['hosts']:,}")
    row(f"re-reporting every {args.report_interval:g} s: offered/s",
        lambda r: _num(r["reports_only"]["offered_per_s"]))
    row("re-reporting: ingested/s", lambda r: _num(r["reports_only"]["ingested_per_s"]))
    row("re-reporting: daemon CPU % of a core",
        lambda r: _num(r["reports_only"]["cpu_percent"]))
    row("re-reporting: daemon CPU ms per report",
        lambda r: _num(r["reports_only"]["cpu_ms_per_report"], "{:.2f}"))
    row("re-reporting: oldest stored report, s",
        lambda r: _num(r["reports_only"]["oldest_report_age_s"], "{:.1f}"))
    row("no-op server casts/s, before the hosts report",
        lambda r: _num(r["noop_idle"]["arrived_per_s"]))
    row("no-op server casts/s, hosts re-reporting", lambda r: _num(r["noop"]["arrived_per_s"]))
    row("  from a full queue", lambda r: _num(r["noop_drain"]["arrived_per_s"]))
    row("  two clients cast/s", lambda r: _num(r["noop"]["cast_per_s"]))
    saturated = "at --rate" if args.rate else "clients at full speed"
    row(f"run_instance/s ({saturated})",
        lambda r: _num(r["requests"]["arrived_per_s"], "{:,.1f}"))
    row("  requests cast/s", lambda r: _num(r["requests"]["cast_per_s"]))
    row("no-op (re-reporting) / run_instance",
        lambda r: _num(_ratio(r["noop"], r["requests"]), "{:.1f}x"))
    row("no-op (before reports) / run_instance",
        lambda r: _num(_ratio(r["noop_idle"], r["requests"]), "{:.1f}x"))
    row("waited for no backlog before each run, s", lambda r: " / ".join(
        "backlog" if w is None else f"{w:.0f}" for w in r["settled_s"]))
    row("latency p50 / p99 ms", lambda r: _lat(r["requests"]))
    row("daemon CPU ms per run_instance",
        lambda r: _num(r["requests"]["daemon_cpu_ms_per_request"], "{:.1f}"))
    row("  reports excluded",
        lambda r: _num(r["requests"].get("daemon_cpu_ms_per_request_excl_reports"), "{:.2f}"))
    row("  of it in the kernel", lambda r: _num(
        r["requests"].get("daemon_system_share"), "{:.0%}"))
    for label, _pattern in THREAD_GROUPS + (("other threads", ""),):
        row(f"    {label}: CPU ms / switches", lambda r, label=label: _per_thread(
            r["requests"].get("by_thread", {}).get(label)))
    row("no-op call round trip p50 / p99 ms", lambda r: "{} / {}".format(
        _num(r["noop_round_trip"]["p50"], "{:.1f}"), _num(r["noop_round_trip"]["p99"], "{:.1f}")))
    if any("paced" in r for r in results):
        row("paced: rate/s", lambda r: _num((r.get("paced") or {}).get("rate"), "{:,.1f}"))
        row("paced: run_instance/s",
            lambda r: _num((r.get("paced") or {}).get("arrived_per_s"), "{:,.1f}"))
        row("paced: latency p50 / p99 ms", lambda r: _lat(r.get("paced")))
        row("paced p99 / no-op call round trip p99", lambda r: _num(
            _over((r.get("paced") or {}).get("latency_ms", {}).get("p99"),
                  r["noop_round_trip"]["p99"]), "{:.1f}x"))
    row("instances in ERROR", lambda r: str(_sum(r, "error")))
    row("LOST (neither arrived nor ERROR)", lambda r: str(_sum(r, "lost")) + (
        f" ({_sum(r, 'answered_after_deadline')} later)"
        if _sum(r, "answered_after_deadline") else ""))
    row("duplicate compute casts", lambda r: str(_sum(r, "duplicates")))
    row("hosts stored at the end", lambda r: f"{r['hosts_known_at_end']:,}/{r['hosts']:,}")
    row("daemon memory MB at the end (PSS)", lambda r: _num(r["daemon_memory_mb"]))
    width = max(len(label) for label, _ in rows) + 2
    cols = [max(12, *(len(v[i]) + 2 for _, v in rows)) for i in range(len(results))]
    lines = [f"{label:<{width}}" + "".join(f"{v:>{c}}" for v, c in zip(values, cols))
             for label, values in rows]
    if len(results) > 1 and results[0]["requests"]["arrived_per_s"]:
        base = results[0]["requests"]["arrived_per_s"]
        lines.append("run_instance/s relative to workers="
                     f"{results[0]['workers']}: " + ", ".join(
                         f"workers={r['workers']} {r['requests']['arrived_per_s'] / base:.2f}x"
                         for r in results[1:]))
    return "\n".join(lines)


def _per_thread(figures: dict | None) -> str:
    if not figures:
        return "-"
    return f"{figures['cpu_ms']:.2f} / {figures['switches']:.1f}"


def _ratio(noop: dict, req: dict) -> float | None:
    if not req["arrived_per_s"] or not req["arrived"]:
        return None
    return noop["arrived_per_s"] / req["arrived_per_s"]


def _over(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _sum(result: dict, key: str) -> int:
    return sum((result.get(p) or {}).get(key, 0) for p in ("requests", "paced"))


def profile_text(result: dict, top: int = 12) -> str:
    prof = result["requests"]["profile"]
    lines = [f"\npy-spy --gil, workers={result['workers']}, flat-out requests, "
             f"{prof['samples']} samples: self / total % of samples"]
    for (own, o_pct), (tot, t_pct) in zip(prof["self"][:top], prof["total"][:top]):
        lines.append(f"  {o_pct:5.1f}  {own[:60]:<60}  {t_pct:5.1f}  {tot[:60]}")
    return "\n".join(lines)


def lost_lines(result: dict) -> list[str]:
    out = []
    for phase in ("noop_idle", "noop", "noop_drain", "requests", "paced"):
        for item in (result.get(phase) or {}).get("lost_instances", []):
            if item.get("instances_row", True) is None:
                rest = "(no row in instances)"
            else:
                rest = ", ".join(f"{k}={v}" for k, v in item.items() if k != "uuid")
            out.append(f"  [workers={result['workers']}] {phase}: {item['uuid']} {rest}")
    return out


# -- the command ---------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, help="compute hosts (default 10000; smoke 200)")
    p.add_argument("--requests", type=int,
                   help="run_instance requests, one instance each (default 2000; smoke 100)")
    p.add_argument("--workers", default="1",
                   help="[scheduler] workers; a comma list runs once per value (e.g. 1,2)")
    p.add_argument("--report-interval", type=float,
                   help="seconds between two reports of a host (default 10; smoke 5)")
    p.add_argument("--rate", type=float,
                   help="requests per second (default: as fast as two clients cast, "
                        "then a paced run at --paced-fraction of the measured rate)")
    p.add_argument("--paced-fraction", type=float, default=0.5,
                   help="rate of the paced run, as a fraction of the measured one "
                        "(0: no paced run)")
    p.add_argument("--paced-seconds", type=float,
                   help="length of the paced run in seconds (default 20; smoke 5)")
    p.add_argument("--deadline", type=float,
                   help="seconds after the last cast after which a request that neither "
                        "arrived nor went to ERROR is lost (default 120; smoke 30)")
    p.add_argument("--stall-timeout", type=float, default=30.0,
                   help="seconds without a new host in the database after which "
                        "registration stops waiting")
    p.add_argument("--database-url",
                   help="a PostgreSQL (or MySQL) server to use instead of SQLite, e.g. "
                        "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres: a fresh "
                        "database is created on it and dropped after")
    p.add_argument("--py-spy", action="store_true",
                   help="profile the daemon (py-spy record --gil) over the flat-out "
                        "requests and print its top functions; the reports-only "
                        "interval's stacks go to py-spy-reports.txt (with --keep)")
    p.add_argument("--perf", action="store_true",
                   help="profile the daemon with Linux perf (cpu-clock) over the "
                        "flat-out requests and print its CPU per request by shared "
                        "object, thread and symbol (perf-requests.data, with --keep)")
    p.add_argument("--set", action="append", default=[], metavar="GROUP.OPTION=VALUE",
                   help="a daemon option (e.g. scheduler.request_threads=8); repeatable")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--keep", action="store_true",
                   help="keep the work directory (config, daemon log)")
    p.add_argument("--smoke", action="store_true",
                   help="a small run for CI: 200 hosts, 100 requests, well under a minute")
    args = p.parse_args(argv)
    for key, value in (SMOKE if args.smoke else DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    try:
        args.worker_counts = [int(w) for w in args.workers.split(",")]
    except ValueError:
        p.error(f"--workers: a number or a comma list of numbers, not {args.workers!r}")
    if args.hosts < 2 or args.requests < 1 or min(args.worker_counts) < 1:
        p.error("--hosts must be at least 2, --requests and --workers at least 1")
    if args.perf and not perf_profile.available():
        p.error("--perf needs Linux perf (Debian's package linux-perf)")
    return args


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    args = parse_args(argv)
    # Also when started with SIGINT ignored (a background job of a script).
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    if not cloudlib.rabbit_reachable():
        say(f"RabbitMQ is not reachable at {cloudlib.RABBIT_HOST}:{cloudlib.RABBIT_PORT}; "
            "start it with tools/ensure_rabbitmq.sh")
        return 2
    date = dt.datetime.now().astimezone().isoformat(timespec="seconds")
    results, lost, failed = [], [], False
    try:
        for workers in args.worker_counts:
            run = Run(args, workers)
            try:
                result = run.execute()
            except BenchError as err:
                say(f"[workers={workers}] {err}")
                run.failed = True
                continue
            finally:
                run.close()
                failed = failed or run.failed
            results.append(result)
            lost += lost_lines(result)
    except KeyboardInterrupt:
        say("interrupted; every process it started is stopped")
        return 130
    lost_hosts = [r for r in results if r["hosts_known_at_end"] < r["hosts"]]
    if args.json:
        print(json.dumps({"date": date, "cores": os.cpu_count(),
                          "python": sys.version.split()[0],
                          "command": " ".join(sys.argv), "runs": results},
                         indent=2, default=str))
    if results:
        out = sys.stderr if args.json else sys.stdout
        print(f"nova-sched end to end, {date}, {os.cpu_count()} cores, RabbitMQ "
              f"{cloudlib.RABBIT_HOST}:{cloudlib.RABBIT_PORT}, "
              f"{results[0]['database']}, {args.requests} requests", file=out)
        print(table(results, args), file=out)
    for r in results:
        if "profile" in r["requests"]:
            print(profile_text(r), file=sys.stderr if args.json else sys.stdout)
        if "perf" in r["requests"]:
            print(perf_profile.text(r["requests"]["perf"],
                                    f"perf, workers={r['workers']}, flat-out requests"),
                  file=sys.stderr if args.json else sys.stdout)
    if lost:
        print(f"\nLOST requests ({len(lost)}):", file=sys.stderr)
        print("\n".join(lost[:LOST_SHOWN]), file=sys.stderr)
        if len(lost) > LOST_SHOWN:
            print(f"  ... and {len(lost) - LOST_SHOWN} more (--json lists them all)",
                  file=sys.stderr)
    for r in lost_hosts:
        say(f"[workers={r['workers']}] only {r['hosts_known_at_end']} of {r['hosts']} "
            "hosts are in the database: registrations were lost")
    return 1 if (lost or lost_hosts or failed) else 0


if __name__ == "__main__":
    sys.exit(main())
