"""Private RabbitMQ and MariaDB Galera clusters for the scenario tests.

Scenario tests that kill a broker node or a database node need clusters of
their own: this module starts, kills and restarts them beside the machine's
own RabbitMQ (127.0.0.1:5672), MariaDB (3306) and PostgreSQL (5432), which
it never stops, reconfigures or talks to.

* :class:`RabbitCluster`: RabbitMQ nodes ``rabbitA@localhost``... run from
  ``/usr/lib/rabbitmq/bin`` (the ``/usr/sbin`` wrappers switch to the
  system node's user, cookie and data) with their own ``HOME`` and cookie,
  config, data, logs, and an ``epmd`` of their own on its own port
  (``ERL_EPMD_PORT``), so the system's epmd and node never see them.
* :class:`GaleraCluster`: ``mariadbd`` nodes with galera-4, each with its
  own datadir, ports and socket, run as the ``mysql`` user (its rsync state
  transfer fails as root), always with ``--no-defaults``; plus an haproxy
  of its own (its own config file and port) that sends every new
  connection to node 1 while it is healthy and to node 2 otherwise.

Ports are chosen free at start: each cluster claims a block of ports with
a lock file under ``/tmp/nova-sched-clusters`` (held for the cluster's
life, released by the kernel if the test process dies) and checks with a
bind that every port of the block is free, so two test runs on one machine
do not clash. Logs go to the ``workdir`` given; Galera's data goes under
``/tmp/nova-sched-clusters/<unique>/`` (every parent must be enterable by
``mysql``, which pytest's ``/tmp/pytest-of-root`` is not) and is removed by
``close``. Both classes are context managers and are also closed at exit.

The recipes and the timings measured on these machines are in
FIELD-NOTES ("Clusters a test can run on one of these machines").
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable

from cloudlib import pid_alive

__all__ = ["ClusterError", "FailureEvidence", "GaleraCluster", "RabbitCluster",
           "CLUSTERS_ROOT", "KEEP_FAILED_ENV", "rabbitmq_available",
           "galera_available", "haproxy_available"]

CLUSTERS_ROOT = Path("/tmp/nova-sched-clusters")
# Where a failed scenario's evidence is copied: pytest's temporary folders
# are pruned after a few runs, and a clean-clone CI machine is thrown away
# with them, so the default is inside the checkout (.ci-artifacts/).
KEEP_FAILED_ENV = "NOVA_SCHED_KEEP_FAILED"
KEEP_FAILED_DEFAULT = Path(__file__).resolve().parents[2] / ".ci-artifacts" / "failed-scenarios"
HOST = "127.0.0.1"

RABBIT_BIN = Path("/usr/lib/rabbitmq/bin")
EPMD = "epmd"
MARIADBD = "/usr/sbin/mariadbd"
MARIADB_INSTALL_DB = "mariadb-install-db"
MARIADB_CLIENT = "mariadb"
GALERA_PROVIDER = "/usr/lib/galera/libgalera_smm.so"
HAPROXY = "haproxy"


def rabbitmq_available() -> bool:
    """Whether RabbitMQ's server scripts and epmd are installed."""
    return ((RABBIT_BIN / "rabbitmq-server").exists()
            and (RABBIT_BIN / "rabbitmqctl").exists()
            and shutil.which(EPMD) is not None)


def galera_available() -> bool:
    """Whether mariadbd, galera-4, rsync and the ``mysql`` user are there."""
    try:
        pwd.getpwnam("mysql")
    except KeyError:
        return False
    return (os.path.exists(MARIADBD) and os.path.exists(GALERA_PROVIDER)
            and shutil.which(MARIADB_INSTALL_DB) is not None
            and shutil.which("rsync") is not None)


def haproxy_available() -> bool:
    """Whether an haproxy binary is installed (tools/ensure_cluster_packages.sh)."""
    return _haproxy_binary() is not None


def _haproxy_binary() -> str | None:
    return shutil.which(HAPROXY) or (
        "/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)


class ClusterError(RuntimeError):
    """A cluster or one of its nodes did not start, stop or answer in time."""


# -- helpers ---------------------------------------------------------------
def _port_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:port now."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # Like the servers themselves: a TIME_WAIT left-over is no clash.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, port))
        return True
    except OSError:
        return False
    finally:
        sock.close()


def _port_open(port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts connections on 127.0.0.1:port."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def _poll(predicate: Callable[[], Any], timeout: float, what: str,
          interval: float = 0.1, failed: Callable[[], str | None] | None = None) -> Any:
    """Call ``predicate`` until it returns a true value; raise on timeout.

    ``failed`` is asked on every round and may return a reason to give up
    at once (a process that exited).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if failed is not None:
            reason = failed()
            if reason:
                raise ClusterError(f"{what}: {reason}")
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def _tail(path: Path, lines: int = 30) -> str:
    """The last lines of a log file, for error messages."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"  ({path}: {exc})"
    body = "\n".join("  " + line for line in text.splitlines()[-lines:])
    return f"--- {path} (last {lines} lines) ---\n{body}"


def _make_shared_root() -> Path:
    """/tmp/nova-sched-clusters, mode 755 (``mysql`` must enter it)."""
    CLUSTERS_ROOT.mkdir(parents=True, exist_ok=True)
    if CLUSTERS_ROOT.stat().st_mode & 0o777 != 0o755:
        with contextlib.suppress(PermissionError):
            CLUSTERS_ROOT.chmod(0o755)
    return CLUSTERS_ROOT


class _PortBlock:
    """A block of ports claimed for one cluster.

    The claim is an exclusive ``flock`` on ``/tmp/nova-sched-clusters/
    <kind>-<base>.lock``, so two clusters (two test runs) never take the
    same block; the ports are also checked free with a bind, so the
    machine's own services and anything else keep theirs.

    The lock file also records the cluster's processes and private
    directories (``record``). A later claim of the block whose lock is free
    (its test process died without closing) first kills those processes
    (each only if its start time is still the one recorded) and removes
    those directories (only under /tmp/nova-sched-clusters).
    """

    def __init__(self, kind: str, bases: Iterable[int],
                 ports_of: Callable[[int], list[int]]):
        root = _make_shared_root()
        tried = []
        self._procs: dict[int, str] = {}
        self._dirs: list[str] = []
        for base in bases:
            lock_path = root / f"{kind}-{base}.lock"
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                tried.append(f"{base} (claimed)")
                continue
            self._reap(fd)
            busy = [p for p in ports_of(base) if not _port_free(p)]
            if busy:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
                tried.append(f"{base} (busy: {busy[:4]})")
                continue
            self.base = base
            self.ports = ports_of(base)
            self._fd: int | None = fd
            self._write()
            return
        raise ClusterError(f"no free block of ports for a {kind} cluster; tried "
                           + ", ".join(tried))

    @staticmethod
    def _reap(fd: int) -> None:
        """Kill what a dead owner of this block left running."""
        os.lseek(fd, 0, os.SEEK_SET)
        try:
            left = json.loads(os.read(fd, 1 << 20).decode() or "{}")
        except (ValueError, OSError):
            return
        if not isinstance(left, dict):
            return
        killed = []
        for pid, started in left.get("procs", {}).items():
            if pid_alive(int(pid)) and _start_time(int(pid)) == started:
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)
                    killed.append(int(pid))
        deadline = time.monotonic() + 10
        while any(pid_alive(p) for p in killed) and time.monotonic() < deadline:
            time.sleep(0.05)
        for d in left.get("dirs", []):
            if Path(d).parent == CLUSTERS_ROOT:
                shutil.rmtree(d, ignore_errors=True)

    def _write(self) -> None:
        if self._fd is None:
            return
        data = json.dumps({"owner": os.getpid(), "dirs": self._dirs,
                           "procs": {str(k): v for k, v in self._procs.items()}})
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data.encode(), 0)

    def record(self, pid: int | None = None, directory: Path | None = None) -> None:
        """Note a process (with its start time, so a reused pid is never
        taken for it) or a directory of the cluster, for a later claim to
        clean up if this process dies."""
        if pid is not None:
            # Forget the dead ones; keep the file small.
            self._procs = {p: t for p, t in self._procs.items() if pid_alive(p)}
            started = _start_time(pid)
            if started:
                self._procs[pid] = started
        if directory is not None:
            self._dirs.append(str(directory))
        with contextlib.suppress(OSError):
            self._write()

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
            self._fd = None


def _start_time(pid: int) -> str:
    """The process's start time (clock ticks after boot), "" when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _killpg(proc: subprocess.Popen | None, sig: int = signal.SIGKILL) -> None:
    """Signal the process group of a process started with a session of its own."""
    if proc is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


_LIVE: set = set()
_LIVE_LOCK = threading.Lock()


def _register(cluster) -> None:
    with _LIVE_LOCK:
        _LIVE.add(cluster)


def _unregister(cluster) -> None:
    with _LIVE_LOCK:
        _LIVE.discard(cluster)


@atexit.register
def _close_all() -> None:
    """Close every cluster still open when the interpreter exits."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for cluster in live:
        with contextlib.suppress(Exception):
            cluster.close()


def _clean_env(prefixes: tuple[str, ...]) -> dict[str, str]:
    """The environment less variables that would redirect the servers."""
    return {k: v for k, v in os.environ.items()
            if not any(k.startswith(p) for p in prefixes)}


# -- evidence of a failed scenario -------------------------------------------
# Node data (quorum queue segments, InnoDB files) is large and the Erlang
# cookie is a secret: the logs and the probes' text say what happened.
_NOT_KEPT = shutil.ignore_patterns("mnesia", "plugins-expand", ".erlang.cookie",
                                   "galera-data", "*.sock", "ctl-home", "*.sqlite-*")


class FailureEvidence:
    """What a failed scenario leaves behind for reading after the run.

    A scenario names its folders (``folder``: daemon logs and configs, the
    cluster's node logs) and its probes (``probe``: text read from the live
    broker, database or daemons at the moment of the failure). ``keep``
    runs every probe, writes each one's text to ``<name>.txt`` and copies
    the folders into a new folder under ``$NOVA_SCHED_KEEP_FAILED``
    (default ``.ci-artifacts/failed-scenarios`` in the checkout), and names
    that folder in the failure's message. ``on_failure()`` does it for the
    ``with`` block's exception; ``refresh()`` copies the folders again once
    the processes have stopped, for their last log lines.
    """

    def __init__(self, name: str):
        self.name = name
        self.path: Path | None = None
        self._folders: list[Path] = []
        self._probes: list[tuple[str, Callable[[], str]]] = []

    def folder(self, path: Path) -> None:
        self._folders.append(Path(path))

    def probe(self, name: str, read: Callable[[], str]) -> None:
        self._probes.append((name, read))

    def keep(self, exc: BaseException | None = None) -> Path:
        root = Path(os.environ.get(KEEP_FAILED_ENV) or KEEP_FAILED_DEFAULT)
        self.path = root / f"{time.strftime('%Y%m%d-%H%M%S')}-{self.name}-{os.getpid()}"
        self.path.mkdir(parents=True, exist_ok=True)
        # Never committed by mistake from a checkout's .ci-artifacts/.
        (root / ".gitignore").write_text("*\n")
        if exc is not None:
            (self.path / "failure.txt").write_text(f"{type(exc).__name__}: {exc}\n")
        for name, read in self._probes:
            try:
                text = read()
            except Exception as err:  # a dead node or database: say so, go on
                text = f"(probe failed: {type(err).__name__}: {err})"
            (self.path / f"{name}.txt").write_text(text if text.endswith("\n") else text + "\n")
        self.refresh()
        said = f"evidence of this failure kept in {self.path}"
        print(said, flush=True)
        if exc is not None and hasattr(exc, "add_note"):
            exc.add_note(said)
        return self.path

    def refresh(self) -> None:
        """Copy the folders (again) into the kept folder, if one was made."""
        if self.path is None:
            return
        for folder in self._folders:
            if folder.is_dir():
                with contextlib.suppress(OSError, shutil.Error):
                    shutil.copytree(folder, self.path / folder.name, symlinks=True,
                                    ignore=_NOT_KEPT, dirs_exist_ok=True)


# -- RabbitMQ ----------------------------------------------------------------
class RabbitCluster:
    """A private RabbitMQ cluster of ``nodes`` nodes on 127.0.0.1.

    Node ``i`` (``rabbitA@localhost``, ``rabbitB@localhost``...) listens for
    AMQP on ``base_port + i`` and for Erlang distribution on ``base_port +
    20000 + i``; the cluster's own epmd listens on ``base_port + 10000`` and
    its CLI calls use ``base_port + 30000`` to ``+ 30009``. Without
    ``base_port`` the first free block of 5681, 5691, 5701... is taken
    (5681-5683 when nothing else runs). The guest user works (we connect
    from 127.0.0.1). Data, config and logs live under ``workdir``.

    ``start`` starts every node, clusters them and waits until all run;
    ``kill``/``start_node`` play one node crashing and coming back;
    ``stop_all``/``start_all`` stop the whole cluster gracefully and start
    it again with its data (durable queues and their messages survive).
    """

    BOOT_TIMEOUT = 90.0
    RESTART_TIMEOUT = 180.0

    def __init__(self, workdir: Path, base_port: int | None = None, nodes: int = 3):
        if not 1 <= nodes <= 9:
            raise ValueError("a RabbitCluster has 1 to 9 nodes")
        if not rabbitmq_available():
            raise ClusterError(f"RabbitMQ is not installed ({RABBIT_BIN}, epmd)")
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.nodes = nodes
        bases = [base_port] if base_port else range(5681, 5681 + 10 * 60, 10)
        self._ports = _PortBlock(
            "rabbit", bases,
            lambda b: ([b + i for i in range(nodes)]
                       + [b + 20000 + i for i in range(nodes)] + [b + 10000]))
        self.base_port = self._ports.base
        self.epmd_port = self.base_port + 10000
        self.node_names = [f"rabbit{chr(ord('A') + i)}@localhost" for i in range(nodes)]
        self._procs: dict[str, subprocess.Popen] = {}
        self._epmd: subprocess.Popen | None = None
        self._cookie = uuid.uuid4().hex.upper()
        self._closed = False
        self._write_files()
        _register(self)

    # -- layout --
    def _index(self, node: str) -> int:
        if node not in self.node_names:
            raise ValueError(f"no node {node!r} in {self.node_names}")
        return self.node_names.index(node)

    def _dir(self, node: str) -> Path:
        return self.workdir / node.split("@")[0]

    def port_of(self, node: str) -> int:
        """The AMQP port of ``node``."""
        return self.base_port + self._index(node)

    def dist_port_of(self, node: str) -> int:
        """The Erlang distribution port of ``node``."""
        return self.base_port + 20000 + self._index(node)

    @property
    def ports(self) -> list[int]:
        """Every node's AMQP port, in node order."""
        return [self.port_of(n) for n in self.node_names]

    def pid_file(self, node: str) -> Path:
        return self._dir(node) / "beam.pid"

    def log_file(self, node: str) -> Path:
        """The node's own log (RabbitMQ's log file)."""
        return self._dir(node) / "log" / f"{node}.log"

    def _out_file(self, node: str) -> Path:
        return self._dir(node) / "stdout.log"

    def _write_files(self) -> None:
        self._ctl_home = self.workdir / "ctl-home"
        self._empty_env = self.workdir / "rabbitmq-env.conf"
        self._empty_env.write_text("")
        for home in [self._ctl_home] + [self._dir(n) for n in self.node_names]:
            home.mkdir(parents=True, exist_ok=True)
            cookie = home / ".erlang.cookie"
            if cookie.exists():
                cookie.chmod(0o600)
            cookie.write_text(self._cookie)
            cookie.chmod(0o400)
        for node in self.node_names:
            d = self._dir(node)
            (d / "conf.d").mkdir(exist_ok=True)
            (d / "log").mkdir(exist_ok=True)
            (d / "rabbitmq.conf").write_text(
                f"listeners.tcp.1 = {HOST}:{self.port_of(node)}\n"
                "loopback_users = none\n"
                "log.file.level = info\n"
                "log.console = false\n")
            (d / "advanced.config").write_text("[].\n")
            (d / "enabled_plugins").write_text("[].\n")

    def _base_env(self) -> dict[str, str]:
        env = _clean_env(("RABBITMQ_", "ERL_", "ERLANG_"))
        env.update({
            "RABBITMQ_CONF_ENV_FILE": str(self._empty_env),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": HOST,
            "RABBITMQ_CTL_DIST_PORT_MIN": str(self.base_port + 30000),
            "RABBITMQ_CTL_DIST_PORT_MAX": str(self.base_port + 30009),
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        })
        return env

    def _node_env(self, node: str) -> dict[str, str]:
        d = self._dir(node)
        env = self._base_env()
        env.update({
            "HOME": str(d),
            "RABBITMQ_NODENAME": node,
            "RABBITMQ_NODE_IP_ADDRESS": HOST,
            "RABBITMQ_NODE_PORT": str(self.port_of(node)),
            "RABBITMQ_DIST_PORT": str(self.dist_port_of(node)),
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
            "RABBITMQ_CONFIG_FILES": str(d / "conf.d"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(d / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(d / "plugins-expand"),
            "RABBITMQ_PID_FILE": str(self.pid_file(node)),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS":
                "-kernel inet_dist_use_interface {127,0,0,1}",
        })
        return env

    def _ctl_env(self) -> dict[str, str]:
        env = self._base_env()
        env["HOME"] = str(self._ctl_home)
        return env

    # -- CLI --
    def ctl(self, node: str, *args: str, timeout: float = 60,
            check: bool = True, tool: str = "rabbitmqctl") -> str:
        """Run ``rabbitmqctl -n node args...`` (or another CLI ``tool`` of
        /usr/lib/rabbitmq/bin) against this cluster; its output."""
        cmd = [str(RABBIT_BIN / tool), "-q", "-n", node, *args]
        try:
            done = subprocess.run(cmd, env=self._ctl_env(), stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise ClusterError(f"{' '.join(cmd[1:])}: no answer in {timeout:.0f}s") from exc
        if check and done.returncode != 0:
            raise ClusterError(
                f"{tool} {' '.join(args)} on {node} exited {done.returncode}: "
                f"{(done.stderr or done.stdout).strip()[-2000:]}\n{self._tails([node])}")
        return done.stdout

    def _tails(self, nodes: Iterable[str] | None = None) -> str:
        parts = []
        for node in nodes or self.node_names:
            parts.append(_tail(self._out_file(node), 10))
            parts.append(_tail(self.log_file(node), 25))
        return "\n".join(parts)

    # -- processes --
    def _start_epmd(self) -> None:
        if self._epmd is not None and self._epmd.poll() is None:
            return
        log = open(self.workdir / "epmd.log", "ab")
        self._epmd = subprocess.Popen(
            [EPMD, "-port", str(self.epmd_port), "-address", HOST],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=self._base_env(), start_new_session=True)
        log.close()
        self._ports.record(self._epmd.pid)
        _poll(lambda: _port_open(self.epmd_port), 10, f"epmd on port {self.epmd_port}",
              failed=lambda: self._epmd.poll() is not None and "epmd exited: "
              + _tail(self.workdir / "epmd.log"))

    def _spawn(self, node: str) -> None:
        proc = self._procs.get(node)
        if proc is not None and proc.poll() is None:
            raise ClusterError(f"{node} is already running (pid {proc.pid})")
        with contextlib.suppress(FileNotFoundError):
            self.pid_file(node).unlink()
        out = open(self._out_file(node), "ab")
        out.write(f"--- starting {node} at {time.strftime('%H:%M:%S')} ---\n".encode())
        out.flush()
        self._procs[node] = subprocess.Popen(
            [str(RABBIT_BIN / "rabbitmq-server")], env=self._node_env(node),
            cwd=self._dir(node), stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        self._ports.record(self._procs[node].pid)

    def _exited(self, node: str) -> str | None:
        proc = self._procs.get(node)
        if proc is None or proc.poll() is not None:
            code = None if proc is None else proc.returncode
            return f"{node} exited ({code})\n{self._tails([node])}"
        return None

    def _wait_listening(self, nodes: list[str], timeout: float) -> None:
        """Wait until every node in ``nodes`` accepts AMQP connections."""
        pending = list(nodes)

        def done() -> bool:
            pending[:] = [n for n in pending if not _port_open(self.port_of(n))]
            return not pending

        def failed() -> str | None:
            for n in pending:
                reason = self._exited(n)
                if reason:
                    return reason
            return None

        try:
            _poll(done, timeout, "RabbitMQ nodes to accept connections",
                  interval=0.2, failed=failed)
        except ClusterError as exc:
            raise ClusterError(f"{exc}\nstill down: {pending}\n"
                               f"{self._tails(pending)}") from None
        for node in nodes:
            self._ports.record(self._beam_pid(node))

    def running_nodes(self, via: str | None = None) -> list[str]:
        """The nodes the cluster reports running (asked of a live node)."""
        via = via or self._live_node()
        status = json.loads(self.ctl(via, "cluster_status", "--formatter", "json"))
        return sorted(status.get("running_nodes", []))

    def _wait_all_running(self, timeout: float) -> None:
        want = sorted(n for n in self.node_names if self.is_running(n))
        seen: list[str] = []

        def check() -> bool:
            seen[:] = self.running_nodes()
            return seen == want

        try:
            _poll(check, timeout, "every node running in the cluster", interval=0.5)
        except ClusterError as exc:
            raise ClusterError(f"{exc}: running {seen}, want {want}\n"
                               f"{self._tails()}") from None

    def is_running(self, node: str) -> bool:
        """Whether the node's process is alive and its AMQP port is open."""
        proc = self._procs.get(node)
        return proc is not None and proc.poll() is None and _port_open(self.port_of(node))

    def _live_node(self, prefer: str | None = None) -> str:
        order = ([prefer] if prefer else []) + self.node_names
        for node in order:
            if self.is_running(node):
                return node
        raise ClusterError("no RabbitMQ node of the cluster is running")

    # -- API --
    def start(self) -> "RabbitCluster":
        """Start every node, cluster them with the first, wait until all run."""
        if self._closed:
            raise ClusterError("this cluster was closed")
        try:
            self._start_epmd()
            for node in self.node_names:
                self._spawn(node)
            self._wait_listening(self.node_names, self.BOOT_TIMEOUT)
            first = self.node_names[0]
            for node in self.node_names[1:]:
                self.ctl(node, "stop_app")
                self.ctl(node, "reset")
                self.ctl(node, "join_cluster", first)
                self.ctl(node, "start_app")
            self._wait_all_running(60)
        except BaseException:
            self.close()
            raise
        return self

    def url(self, user: str = "guest", password: str = "guest", vhost: str = "") -> str:
        """An oslo.messaging transport URL naming every node."""
        hosts = ",".join(f"{user}:{password}@{HOST}:{p}" for p in self.ports)
        return f"rabbit://{hosts}/{vhost}"

    def add_vhost(self, name: str) -> str:
        """Add vhost ``name`` with every permission for guest; returns it."""
        node = self._live_node()
        self.ctl(node, "add_vhost", name)
        self.ctl(node, "set_permissions", "-p", name, "guest", ".*", ".*", ".*")
        return name

    def leader_of(self, queue: str, vhost: str = "/") -> str | None:
        """The node leading quorum queue ``queue`` (None: no such queue or
        no leader now)."""
        out = self.ctl(self._live_node(), "list_queues", "-p", vhost, "name", "leader",
                       "--formatter", "json")
        for row in json.loads(out or "[]"):
            if row.get("name") == queue:
                leader = row.get("leader")
                return leader if leader and leader != "''" else None
        return None

    def queue_depth(self, queue: str, vhost: str = "/", node: str | None = None,
                    zero_grace: float = 2.0) -> int:
        """Messages ready in ``queue``, by a passive declare on a live node
        (``node`` first when given); ``list_queues messages`` can show 0 for
        a quorum queue.

        For a moment (about 0.4 s here) after its leader is killed, a quorum
        queue answers 0 whatever it holds: a count of 0 is read again until
        ``zero_grace`` seconds have passed and only then believed.
        """
        deadline = time.monotonic() + zero_grace
        while True:
            depth = self._passive_depth(queue, vhost, node)
            if depth or time.monotonic() >= deadline:
                return depth
            time.sleep(0.2)

    def _passive_depth(self, queue: str, vhost: str, node: str | None) -> int:
        import amqp

        last: Exception | None = None
        order = ([node] if node else []) + [n for n in self.node_names if n != node]
        for n in order:
            if not self.is_running(n):
                continue
            conn = amqp.Connection(host=f"{HOST}:{self.port_of(n)}", userid="guest",
                                   password="guest", virtual_host=vhost,
                                   connect_timeout=3)
            try:
                conn.connect()
                ch = conn.channel()
                return int(ch.queue_declare(queue=queue, passive=True).message_count)
            except Exception as exc:  # that node could not answer: try another
                last = exc
            finally:
                with contextlib.suppress(Exception):
                    conn.close()
        raise ClusterError(f"no live node answered a passive declare of {queue!r}: {last}")

    def queue_report(self, vhost: str = "/") -> str:
        """Every queue of ``vhost`` as the cluster sees it (type, leader,
        members, messages ready and unacknowledged, consumers) and, for each,
        the ready count a passive declare gives (``list_queues messages``
        can say 0 for a quorum queue that holds thousands); then the
        consumers and connections. Text, for a failed scenario's evidence."""
        node = self._live_node()
        lines = []
        queues = json.loads(self.ctl(
            node, "list_queues", "-p", vhost, "name", "type", "leader", "members",
            "online", "messages_ready", "messages_unacknowledged", "consumers",
            "--formatter", "json", timeout=30) or "[]")
        for row in queues:
            try:
                ready = self._passive_depth(row["name"], vhost, None)
            except ClusterError as err:
                ready = f"? ({err})"
            lines.append(f"{json.dumps(row, sort_keys=True)} passive_declare_ready={ready}")
        for what, columns in (("list_consumers", ("queue_name", "channel_pid",
                                                   "consumer_tag", "ack_required",
                                                   "prefetch_count")),
                              ("list_channels", ("pid", "connection", "consumer_count",
                                                 "messages_unacknowledged",
                                                 "messages_unconfirmed")),
                              ("list_connections", ("pid", "name", "port", "peer_port",
                                                    "state"))):
            lines.append(f"--- {what} ---")
            lines.append(self.ctl(node, what, "-p", vhost, *columns, timeout=30).strip())
        lines.append(f"--- running nodes: {self.running_nodes(node)} ---")
        return "\n".join(lines)

    def _beam_pid(self, node: str) -> int | None:
        """The pid in the node's pid file, if that process is the node's VM
        (its command line names the node's own HOME)."""
        try:
            pid = int(self.pid_file(node).read_text().strip())
        except (OSError, ValueError):
            return None
        if not pid_alive(pid) or f"-home {self._dir(node)} " not in _cmdline(pid) + " ":
            return None  # gone, or a stale pid file
        return pid

    def kill(self, node: str) -> None:
        """SIGKILL the node's Erlang VM (pid from its pid file), wait until
        its port is closed."""
        self._index(node)
        pid = self._beam_pid(node)
        proc = self._procs.get(node)
        if pid is None:
            if proc is None or proc.poll() is not None:
                raise ClusterError(f"{node} is not running")
            _killpg(proc)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _poll(lambda: not pid_alive(pid), 10, f"{node} (pid {pid}) to die")
        _poll(lambda: not _port_open(self.port_of(node), 0.2), 10,
              f"port {self.port_of(node)} of {node} to close")
        if proc is not None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _killpg(proc)

    def start_node(self, node: str, timeout: float | None = None) -> None:
        """Start a killed or stopped node again; wait until it runs in the
        cluster again."""
        self._index(node)
        self._spawn(node)
        self._wait_listening([node], timeout or self.RESTART_TIMEOUT)
        self.ctl(node, "await_startup", "--timeout", "60", timeout=90)
        self._wait_all_running(60)

    def stop_all(self) -> None:
        """Stop every running node gracefully (``rabbitmqctl stop``), one
        after the other; their data stays for ``start_all``."""
        for node in self.node_names:
            proc = self._procs.get(node)
            if proc is None or proc.poll() is not None:
                continue
            self.ctl(node, "stop", str(self.pid_file(node)), timeout=120)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _killpg(proc)

    def start_all(self, timeout: float | None = None) -> None:
        """Start every node that is not running, all at once (nodes wait for
        their peers at boot, whatever the order they were stopped in), and
        wait until all run in the cluster."""
        self._start_epmd()
        down = [n for n in self.node_names
                if self._procs.get(n) is None or self._procs[n].poll() is not None]
        for node in down:
            self._spawn(node)
        self._wait_listening(down, timeout or self.RESTART_TIMEOUT)
        self._wait_all_running(60)

    def memory_rss_mb(self) -> dict[str, float]:
        """Resident memory of each running node's VM, in MB."""
        result = {}
        for node in self.node_names:
            pid = self._beam_pid(node)
            if pid is not None:
                with contextlib.suppress(OSError):
                    result[node] = _rss_mb(pid)
        return result

    def close(self) -> None:
        """Kill every node and the cluster's epmd; keep the logs."""
        if self._closed:
            return
        self._closed = True
        for node in self.node_names:
            pid = self._beam_pid(node)
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for node in self.node_names:
            proc = self._procs.get(node)
            if proc is None:
                continue
            # The wrapper shell reaps its VM and exits; then the rest of
            # the group (the VM's helpers) goes.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            _killpg(proc)
        _killpg(self._epmd)
        self._ports.release()
        _unregister(self)

    def __enter__(self) -> "RabbitCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


# -- MariaDB Galera ----------------------------------------------------------
_WSREP_CHECK = """#!/bin/sh
# haproxy external-check of a Galera node: up only while it is Synced
# (wsrep_local_state 4), so a joiner, a donor or a node outside the primary
# component gets no new connections. haproxy passes: proxy address, proxy
# port, server address, server port.
state=$(MARIADB --no-defaults --protocol=tcp -h "$3" -P "$4" -uroot \\
    --connect-timeout=1 -N -B -e "SHOW GLOBAL STATUS LIKE 'wsrep_local_state'" \\
    2>/dev/null | cut -f2)
[ "$state" = 4 ]
"""


class GaleraCluster:
    """A private MariaDB Galera cluster of ``nodes`` nodes on 127.0.0.1.

    Nodes are numbered from 1. Node ``i`` takes client port ``base + i -
    1``, group communication ``base + 10 + i - 1``, IST ``base + 20 + i -
    1`` and rsync SST ``base + 30 + i - 1``; the haproxy takes ``base +
    39``. Without ``base_port`` the first free block of 14300, 14340,
    14380... (up to 15460) is taken. root has no password over TCP from
    127.0.0.1.
    Data lives under ``/tmp/nova-sched-clusters/galera-<unique>/`` (removed
    by ``close``), logs in ``workdir``.

    ``start`` bootstraps node 1 and joins the others one after the other;
    ``kill``/``start_node`` play a node crashing and rejoining;
    ``start_haproxy`` starts a load balancer sending new connections to
    node 1, or to node 2 (then 3) while node 1 is down or not synced.
    """

    BOOT_TIMEOUT = 60.0
    JOIN_TIMEOUT = 120.0

    def __init__(self, workdir: Path, nodes: int = 3, base_port: int | None = None,
                 buffer_pool_mb: int = 64, gcache_mb: int = 64):
        if not 1 <= nodes <= 9:
            raise ValueError("a GaleraCluster has 1 to 9 nodes")
        if not galera_available():
            raise ClusterError("MariaDB Galera is not installed (mariadbd, "
                               f"{GALERA_PROVIDER}, rsync, the mysql user)")
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.nodes = nodes
        self.buffer_pool_mb = buffer_pool_mb
        self.gcache_mb = gcache_mb
        bases = [base_port] if base_port else range(14300, 14300 + 40 * 30, 40)
        self._ports = _PortBlock(
            "galera", bases,
            lambda b: [b + off + i for off in (0, 10, 20, 30) for i in range(nodes)]
            + [b + 39])
        self.base_port = self._ports.base
        self.haproxy_port = self.base_port + 39
        self.name = f"nova-sched-{self.base_port}-{uuid.uuid4().hex[:6]}"
        self.root = _make_shared_root() / f"galera-{self.base_port}-{uuid.uuid4().hex[:8]}"
        self.root.mkdir(mode=0o755)
        self.root.chmod(0o755)
        self._ports.record(directory=self.root)
        mysql = pwd.getpwnam("mysql")
        self._uid, self._gid = mysql.pw_uid, mysql.pw_gid
        for i in self._numbers():
            d = self._node_dir(i)
            d.mkdir(mode=0o755)
            (d / "data").mkdir(mode=0o750)
            os.chown(d, self._uid, self._gid)
            os.chown(d / "data", self._uid, self._gid)
        with contextlib.suppress(OSError):
            (self.workdir / "galera-data").symlink_to(self.root)
        self._procs: dict[int, subprocess.Popen] = {}
        self._haproxy: subprocess.Popen | None = None
        self._closed = False
        _register(self)

    # -- layout --
    def _numbers(self) -> range:
        return range(1, self.nodes + 1)

    def _check(self, node: int) -> int:
        if node not in self._numbers():
            raise ValueError(f"no node {node!r}: nodes are 1..{self.nodes}")
        return node - 1

    @property
    def ports(self) -> list[int]:
        """Each node's client port, node 1 first."""
        return [self.base_port + i for i in range(self.nodes)]

    def port_of(self, node: int) -> int:
        return self.base_port + self._check(node)

    def _gcomm_port(self, node: int) -> int:
        return self.base_port + 10 + self._check(node)

    def _node_dir(self, node: int) -> Path:
        return self.root / f"g{node}"

    def datadir(self, node: int) -> Path:
        return self._node_dir(node) / "data"

    def socket_of(self, node: int) -> Path:
        return self._node_dir(node) / "mysqld.sock"

    def log_file(self, node: int) -> Path:
        """The node's error log (its standard error)."""
        return self.workdir / f"g{node}.log"

    def _tails(self, nodes: Iterable[int] | None = None) -> str:
        return "\n".join(_tail(self.log_file(i), 40) for i in (nodes or self._numbers()))

    def _args(self, node: int, bootstrap: bool) -> list[str]:
        i = self._check(node)
        b = self.base_port
        peers = ",".join(f"{HOST}:{b + 10 + j}" for j in range(self.nodes))
        provider_options = ";".join([
            f"gmcast.listen_addr=tcp://{HOST}:{b + 10 + i}",
            f"ist.recv_addr={HOST}:{b + 20 + i}",
            f"gcache.size={self.gcache_mb}M",
            "evs.suspect_timeout=PT3S",
            "evs.inactive_timeout=PT6S",
            "evs.install_timeout=PT6S",
            "pc.recovery=TRUE",
        ])
        args = [
            MARIADBD, "--no-defaults", "--user=mysql",
            f"--datadir={self.datadir(node)}",
            f"--socket={self.socket_of(node)}",
            f"--pid-file={self._node_dir(node) / 'mariadbd.pid'}",
            f"--port={b + i}", f"--bind-address={HOST}",
            "--skip-name-resolve", "--performance-schema=OFF",
            "--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci",
            "--default-storage-engine=InnoDB", "--binlog-format=ROW",
            "--innodb-autoinc-lock-mode=2", "--innodb-flush-log-at-trx-commit=2",
            f"--innodb-buffer-pool-size={self.buffer_pool_mb}M",
            "--innodb-log-file-size=32M", "--max-connections=300",
            "--wsrep-on=ON", f"--wsrep-provider={GALERA_PROVIDER}",
            f"--wsrep-cluster-name={self.name}",
            f"--wsrep-cluster-address=gcomm://{peers}",
            f"--wsrep-node-name=g{node}",
            f"--wsrep-node-address={HOST}:{b + 10 + i}",
            f"--wsrep-node-incoming-address={HOST}:{b + i}",
            f"--wsrep-provider-options={provider_options}",
            "--wsrep-sst-method=rsync",
            f"--wsrep-sst-receive-address={HOST}:{b + 30 + i}",
            "--wsrep-slave-threads=2",
        ]
        if bootstrap:
            args.append("--wsrep-new-cluster")
        return args

    # -- processes --
    def _spawn(self, node: int, bootstrap: bool = False,
               start_position: str | None = None) -> None:
        proc = self._procs.get(node)
        if proc is not None and proc.poll() is None:
            raise ClusterError(f"g{node} is already running (pid {proc.pid})")
        args = self._args(node, bootstrap)
        if start_position:
            args.append(f"--wsrep-start-position={start_position}")
        log = open(self.log_file(node), "ab")
        log.write(f"--- starting g{node} at {time.strftime('%H:%M:%S')} "
                  f"{'(bootstrap)' if bootstrap else ''}"
                  f"{start_position or ''} ---\n".encode())
        log.flush()
        self._procs[node] = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            cwd=self.root, env=self._env(), start_new_session=True)
        log.close()
        self._ports.record(self._procs[node].pid)

    @staticmethod
    def _env() -> dict[str, str]:
        return _clean_env(("MYSQL", "MARIADB", "WSREP"))

    def _recover_position(self, node: int) -> str | None:
        """The node's last committed position (``uuid:seqno``), read from
        InnoDB by ``mariadbd --wsrep-recover`` as the distribution's
        galera_recovery does; with it a node killed by SIGKILL rejoins by
        IST instead of a full rsync SST (which blocks its donor)."""
        if not (self.datadir(node) / "ibdata1").exists():
            return None
        out_path = self._node_dir(node) / "wsrep-recover.log"
        with contextlib.suppress(FileNotFoundError):
            out_path.unlink()
        args = self._args(node, False) + [
            "--wsrep-recover", f"--log-error={out_path}"]
        try:
            subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, cwd=self.root, env=self._env(),
                           timeout=60)
            text = out_path.read_text(errors="replace")
        except (OSError, subprocess.TimeoutExpired):
            return None
        with open(self.log_file(node), "a") as log:
            log.write(f"--- wsrep-recover of g{node} ---\n{text}")
        position = None
        for line in text.splitlines():
            if "WSREP: Recovered position:" in line:
                position = line.rsplit("Recovered position:", 1)[1].strip()
        if not position or position.endswith(":-1"):
            return None
        return position

    def _exited(self, node: int) -> str | None:
        proc = self._procs.get(node)
        if proc is None or proc.poll() is not None:
            code = None if proc is None else proc.returncode
            return f"g{node} exited ({code})\n{self._tails([node])}"
        return None

    def _connect(self, node: int, database: str | None = None, **kw: Any):
        import pymysql

        kw.setdefault("connect_timeout", 3)
        kw.setdefault("read_timeout", 15)
        kw.setdefault("write_timeout", 15)
        return pymysql.connect(host=HOST, port=self.port_of(node), user="root",
                               password="", database=database, autocommit=True,
                               charset="utf8mb4", **kw)

    def query(self, node: int, sql: str, args: Any = None,
              database: str | None = None) -> list[tuple]:
        """Run ``sql`` straight on one node (PyMySQL, connect timeout 3 s);
        its rows."""
        conn = self._connect(node, database)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return list(cur.fetchall())
        finally:
            conn.close()

    def status(self, node: int) -> dict[str, str]:
        """The node's ``wsrep_%`` status variables."""
        return {k: v for k, v in self.query(node, "SHOW GLOBAL STATUS LIKE 'wsrep_%'")}

    def cluster_size(self, node: int) -> int:
        """``wsrep_cluster_size`` as node ``node`` sees it."""
        return int(self.status(node)["wsrep_cluster_size"])

    def is_running(self, node: int) -> bool:
        """Whether the node's process is alive and its client port open."""
        proc = self._procs.get(node)
        return proc is not None and proc.poll() is None and _port_open(self.port_of(node))

    def _wait_synced(self, node: int, size: int, timeout: float) -> None:
        last: list[Any] = [None]

        def synced() -> bool:
            try:
                st = self.status(node)
            except Exception as exc:  # not up yet
                last[0] = exc
                return False
            last[0] = {k: st.get(k) for k in ("wsrep_ready", "wsrep_local_state_comment",
                                              "wsrep_cluster_size", "wsrep_cluster_status")}
            return (st.get("wsrep_ready") == "ON"
                    and st.get("wsrep_local_state_comment") == "Synced"
                    and st.get("wsrep_cluster_status") == "Primary"
                    and int(st.get("wsrep_cluster_size", 0)) >= size)

        try:
            _poll(synced, timeout, f"g{node} to be synced in a cluster of {size}",
                  interval=0.2, failed=lambda: self._exited(node))
        except ClusterError as exc:
            raise ClusterError(f"{exc}\nlast seen: {last[0]}\n"
                               f"{self._tails()}") from None

    def _install_db(self) -> None:
        log = self.workdir / "install-db.log"
        with open(log, "ab") as out:
            done = subprocess.run(
                [MARIADB_INSTALL_DB, "--no-defaults", f"--datadir={self.datadir(1)}",
                 "--user=mysql", "--auth-root-authentication-method=normal",
                 "--skip-test-db", "--skip-name-resolve"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=self.root, timeout=120)
        if done.returncode != 0:
            raise ClusterError(f"mariadb-install-db exited {done.returncode}\n{_tail(log)}")

    def _grant_root(self) -> None:
        """root with no password over TCP from 127.0.0.1 (and anywhere)."""
        import pymysql

        conn = pymysql.connect(unix_socket=str(self.socket_of(1)), user="root",
                               password="", autocommit=True, connect_timeout=3)
        try:
            with conn.cursor() as cur:
                for host in ("127.0.0.1", "%"):
                    cur.execute(f"CREATE USER IF NOT EXISTS 'root'@'{host}' "
                                "IDENTIFIED BY ''")
                    cur.execute(f"GRANT ALL PRIVILEGES ON *.* TO 'root'@'{host}' "
                                "WITH GRANT OPTION")
        finally:
            conn.close()

    # -- API --
    def start(self) -> "GaleraCluster":
        """Bootstrap node 1, join the others one after the other, wait until
        every node is synced in a cluster of ``nodes``."""
        if self._closed:
            raise ClusterError("this cluster was closed")
        try:
            self._install_db()
            self._spawn(1, bootstrap=True)
            _poll(lambda: self.socket_of(1).exists() and _port_open(self.port_of(1)),
                  self.BOOT_TIMEOUT, "g1 to accept connections", interval=0.1,
                  failed=lambda: self._exited(1))
            self._grant_root()
            self._wait_synced(1, 1, self.BOOT_TIMEOUT)
            for node in self._numbers()[1:]:
                self._spawn(node)
                self._wait_synced(node, node, self.JOIN_TIMEOUT)
        except BaseException:
            self.close()
            raise
        return self

    def url(self, node: int | None = None, database: str = "nova_sched") -> str:
        """A SQLAlchemy URL for ``database`` on one node, or through the
        haproxy (started if need be) when ``node`` is None."""
        if node is None:
            return self.haproxy_url(database)
        return (f"mysql+pymysql://root@{HOST}:{self.port_of(node)}/{database}"
                "?charset=utf8mb4")

    def create_database(self, name: str) -> None:
        """``CREATE DATABASE IF NOT EXISTS`` (utf8mb4) on the cluster."""
        node = next((i for i in self._numbers() if self.is_running(i)), None)
        if node is None:
            raise ClusterError("no Galera node is running")
        self.query(node, f"CREATE DATABASE IF NOT EXISTS `{name}` "
                   "CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci")

    def kill(self, node: int) -> None:
        """SIGKILL that node's mariadbd; wait until its port is closed."""
        self._check(node)
        proc = self._procs.get(node)
        if proc is None or proc.poll() is not None:
            raise ClusterError(f"g{node} is not running")
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        _poll(lambda: not _port_open(self.port_of(node), 0.2), 10,
              f"port {self.port_of(node)} of g{node} to close")

    def start_node(self, node: int, timeout: float | None = None) -> None:
        """Start a killed node again (it rejoins by IST or SST); wait until
        it is synced and sees every running node."""
        self._check(node)
        self._spawn(node, start_position=self._recover_position(node))
        size = sum(1 for i in self._numbers() if self._procs.get(i)
                   and self._procs[i].poll() is None)
        self._wait_synced(node, size, timeout or self.JOIN_TIMEOUT)

    def start_haproxy(self, check: str = "wsrep") -> int:
        """Start the cluster's haproxy (once); its port.

        One ``listen`` in TCP mode: g1 active, the others ``backup`` (the
        first backup up takes every new connection while g1 is down);
        checks every 500 ms, down after 2 failures, up after 2 successes,
        and the sessions of a server marked down are shut. ``check`` is
        ``"wsrep"`` (a node is up only while synced, asked with the
        ``mariadb`` client) or ``"tcp"`` (its port accepts connections).
        """
        if self._haproxy is not None and self._haproxy.poll() is None:
            return self.haproxy_port
        binary = _haproxy_binary()
        if binary is None:
            raise ClusterError("no haproxy binary: run tools/ensure_cluster_packages.sh")
        hadir = self.root / "haproxy"
        hadir.mkdir(exist_ok=True)
        lines = ["global", "    maxconn 2000", f"    pidfile {hadir / 'haproxy.pid'}"]
        if check == "wsrep":
            client = shutil.which(MARIADB_CLIENT) or "/usr/bin/mariadb"
            script = hadir / "wsrep-check.sh"
            script.write_text(_WSREP_CHECK.replace("MARIADB", client))
            script.chmod(0o755)
            lines += ["    external-check", "    insecure-fork-wanted"]
        elif check != "tcp":
            raise ValueError("check is 'wsrep' or 'tcp'")
        lines += [
            "defaults",
            "    mode tcp",
            "    timeout connect 2s",
            "    timeout client 60s",
            "    timeout server 60s",
            "    timeout check 1s",
            "    retries 3",
            "    option redispatch",
            "listen galera",
            f"    bind {HOST}:{self.haproxy_port}",
            "    mode tcp",
            "    option tcpka",
        ]
        if check == "wsrep":
            lines += ["    option external-check",
                      "    external-check path \"/usr/bin:/bin\"",
                      f"    external-check command {script}"]
        # observe layer4: a refused connection marks the server down at
        # once, so the retry is redispatched to a backup.
        lines.append("    default-server inter 500 fall 2 rise 2 "
                     "on-marked-down shutdown-sessions "
                     "observe layer4 error-limit 1 on-error mark-down")
        for i in self._numbers():
            lines.append(f"    server g{i} {HOST}:{self.port_of(i)} check"
                         + ("" if i == 1 else " backup"))
        cfg = hadir / "haproxy.cfg"
        cfg.write_text("\n".join(lines) + "\n")
        log_path = self.workdir / "haproxy.log"
        checked = subprocess.run([binary, "-c", "-q", "-f", str(cfg)], capture_output=True,
                                 text=True, stdin=subprocess.DEVNULL)
        if checked.returncode != 0:
            raise ClusterError(f"haproxy refuses {cfg}: {checked.stderr or checked.stdout}")
        log = open(log_path, "ab")
        self._haproxy = subprocess.Popen(
            [binary, "-db", "-f", str(cfg)], stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, cwd=hadir, start_new_session=True)
        log.close()
        self._ports.record(self._haproxy.pid)
        _poll(lambda: _port_open(self.haproxy_port), 10,
              f"haproxy on port {self.haproxy_port}",
              failed=lambda: self._haproxy.poll() is not None
              and f"haproxy exited\n{_tail(log_path)}")
        # Until its first checks pass every server is taken as up; wait for
        # them so the first connections do not go to a node not synced.
        _poll(self._haproxy_serves, 10, "haproxy to pass a connection to the cluster",
              interval=0.2)
        return self.haproxy_port

    def _haproxy_serves(self) -> bool:
        import pymysql

        try:
            conn = pymysql.connect(host=HOST, port=self.haproxy_port, user="root",
                                   password="", connect_timeout=2, read_timeout=5)
        except pymysql.MySQLError:
            return False
        conn.close()
        return True

    def haproxy_url(self, database: str = "nova_sched") -> str:
        """A SQLAlchemy URL for ``database`` through the haproxy (started if
        need be)."""
        port = self.start_haproxy()
        return f"mysql+pymysql://root@{HOST}:{port}/{database}?charset=utf8mb4"

    def memory_rss_mb(self) -> dict[str, float]:
        """Resident memory of each running mariadbd (and haproxy), in MB."""
        result = {}
        for i, proc in self._procs.items():
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    result[f"g{i}"] = _rss_mb(proc.pid)
        if self._haproxy is not None and self._haproxy.poll() is None:
            with contextlib.suppress(OSError):
                result["haproxy"] = _rss_mb(self._haproxy.pid)
        return result

    def close(self) -> None:
        """Kill the mariadbd's and the haproxy; remove the data directory
        (only that, under /tmp/nova-sched-clusters); keep the logs."""
        if self._closed:
            return
        self._closed = True
        _killpg(self._haproxy)
        for proc in self._procs.values():
            _killpg(proc)
        shutil.rmtree(self.root, ignore_errors=True)
        with contextlib.suppress(OSError):
            link = self.workdir / "galera-data"
            if link.is_symlink():
                link.unlink()
        self._ports.release()
        _unregister(self)

    def __enter__(self) -> "GaleraCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
