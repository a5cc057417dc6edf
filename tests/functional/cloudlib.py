"""A test cloud of real processes on the real RabbitMQ, and a contract-only client.

Nothing here imports nova_sched: the processes are started from this source
tree as the console scripts would start them, the client is a plain
oslo.messaging RPC client speaking CONTRACT section 3 (topic ``scheduler``,
``run_instance`` at version 2.9, Havana's dicts, the context as a plain
dict), and outcomes are read from the tables of CONTRACT section 4.

Isolation: every cloud gets its own RabbitMQ vhost (queue names such as
``scheduler`` or ``compute.<host>`` are global within a vhost whatever the
exchange, so a unique ``control_exchange`` alone would not keep concurrent
runs apart), plus its own exchange, SQLite file and host names. Without
``rabbitmqctl`` (not root) it falls back to the default vhost with
per-cloud topic names.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
import warnings
import zlib
from pathlib import Path
from typing import Any, Callable

import sqlalchemy as sa


# futurist imports eventlet when installed; its banner is noise here.
warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")


def _select_threading_backend() -> None:
    """oslo.service's threading backend, chosen before oslo.messaging loads.

    The daemon does the same at start-up (FIELD-NOTES); in the pytest
    process it keeps eventlet out of every test that runs after these.
    """
    try:
        from oslo_service import backend

        backend.init_backend(backend.BackendType.THREADING)
    except Exception:  # already chosen, or an oslo.service without backends
        pass


_select_threading_backend()

REPO = Path(__file__).resolve().parents[2]
RABBIT_HOST = "127.0.0.1"
RABBIT_PORT = 5672
BROKER_USER = "guest"
BROKER_PASSWORD = "guest"

# The ratios written into every test config, so placements can be checked.
RAM_RATIO = 1.5
CPU_RATIO = 16.0
DISK_RATIO = 1.0


def rabbit_reachable(timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((RABBIT_HOST, RABBIT_PORT), timeout=timeout):
            return True
    except OSError:
        return False


def entry_point(module: str, *args: str) -> list[str]:
    """The command line of a console script's ``main`` run from this tree."""
    code = f"import sys; from {module} import main; sys.exit(main())"
    return [sys.executable, "-c", code, *args]


_PORTS_GIVEN: set[int] = set()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for a server a test starts later.

    Taken below the kernel's ephemeral range (32768 and up by default): a
    port from inside it can be handed to an outgoing connection (the
    tests' and daemons' own AMQP and database connections) between now and
    the server's bind. And apart from the blocks the private clusters take
    (``clusters.py``: 5681-6290, 14300-16290, 25681-26290), which a node
    restarted by a test binds again. Never the same port twice in one
    process.
    """
    import random

    for _ in range(200):
        port = random.randint(17000, 24999)
        if port in _PORTS_GIVEN:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _PORTS_GIVEN.add(port)
        return port
    raise RuntimeError("no free TCP port below the ephemeral range")


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), env.get("PYTHONPATH", "")) if p
    )
    env["PYTHONUNBUFFERED"] = "1"
    return env


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.2,
               what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# -- broker isolation ------------------------------------------------------
def pid_alive(pid: int) -> bool:
    """Whether a process of this pid runs (ours or not); a zombie, dead but
    not yet reaped by its parent, does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


# -- a server that can be taken away --------------------------------------
def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class TcpProxy:
    """Relays TCP connections on a port of its own to a server (a database).

    ``stop`` plays the server stopping (nothing listens on the port, every
    relayed connection is closed on both sides); ``start`` listens again on
    the same port.
    """

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.port = 0
        self.accepted = 0
        self.cut = 0                 # connections closed by stop()
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._halt: threading.Event | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._listener is not None

    up = running

    def start(self) -> "TcpProxy":
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        listener.settimeout(0.1)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="db-proxy",
                                        args=(listener, self._halt), daemon=True)
        self._thread.start()
        return self

    def _accept(self, listener: socket.socket, halt: threading.Event) -> None:
        while not halt.is_set():
            try:
                client, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            client.settimeout(None)
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if halt.is_set():
                    _close(client)
                    _close(upstream)
                    return
                self._conns.update((client, upstream))
                self.accepted += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst),
                                 name="db-proxy-pump", daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)
            _close(src)
            _close(dst)

    def stop(self) -> int:
        """The database goes away; returns how many connections were cut."""
        if self._listener is None:
            return 0
        assert self._halt is not None and self._thread is not None
        self._halt.set()
        self._thread.join(5)
        self._listener.close()
        self._listener = None
        with self._lock:
            conns = list(self._conns)
            self._conns.clear()
        for sock in conns:
            _close(sock)
        self.cut += len(conns) // 2
        return len(conns) // 2

    def url(self, direct_url: str) -> str:
        """``direct_url`` (a URL naming the target) through this proxy."""
        host, port = self.target
        assert f"@{host}:{port}/" in direct_url, direct_url
        return direct_url.replace(f"@{host}:{port}/", f"@127.0.0.1:{self.port}/")


class BrokerProbe:
    """Queue depths and consumer counts, read with kombu (passive declares)."""

    def __init__(self, vhost: str | None):
        import kombu

        path = vhost or ""
        self.conn = kombu.Connection(
            f"amqp://{BROKER_USER}:{BROKER_PASSWORD}@"
            f"{RABBIT_HOST}:{RABBIT_PORT}/{path}",
            connect_timeout=5)
        self.conn.connect()

    def queue(self, name: str) -> tuple[int, int] | None:
        """(messages ready, consumers) of queue ``name``; None if it is absent."""
        channel = self.conn.channel()
        try:
            _, messages, consumers = channel.queue_declare(queue=name, passive=True)
            return messages, consumers
        except Exception:  # NotFound closes the channel
            return None
        finally:
            with contextlib.suppress(Exception):
                channel.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.release()


class Broker:
    """A private vhost on the local RabbitMQ (deleted by ``close``)."""

    def __init__(self, tag: str):
        self.tag = tag
        self.vhost: str | None = None
        self.isolated_topics = False

    def _ctl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["rabbitmqctl", "-q", *args], capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL)

    _swept = False

    def _sweep(self) -> None:
        """Delete vhosts left by test runs whose process is gone (killed runs)."""
        if Broker._swept:
            return
        Broker._swept = True
        listed = self._ctl("list_vhosts")
        for name in listed.stdout.split():
            match = re.fullmatch(r"nova_sched_test_.+_p(\d+)", name)
            if match and not pid_alive(int(match.group(1))):
                self._ctl("delete_vhost", name)

    def open(self) -> "Broker":
        name = f"nova_sched_test_{self.tag}_p{os.getpid()}"
        if shutil.which("rabbitmqctl"):
            self._sweep()
            made = self._ctl("add_vhost", name)
            if made.returncode == 0:
                perm = self._ctl("set_permissions", "-p", name, BROKER_USER,
                                 ".*", ".*", ".*")
                if perm.returncode == 0:
                    self.vhost = name
                    return self
                self._ctl("delete_vhost", name)
        # No vhost: keep apart by topic names instead.
        self.isolated_topics = True
        return self

    @property
    def url(self) -> str:
        path = self.vhost or ""
        return (f"rabbit://{BROKER_USER}:{BROKER_PASSWORD}@{RABBIT_HOST}:"
                f"{RABBIT_PORT}/{path}")

    def close(self) -> None:
        if self.vhost:
            self._ctl("delete_vhost", self.vhost)
            self.vhost = None


# -- the contract client ---------------------------------------------------
def client_conf(config_file: Path):
    from oslo_config import cfg

    conf = cfg.ConfigOpts()
    # oslo.messaging registers these two groups on the global cfg.CONF only
    # (FIELD-NOTES); a private ConfigOpts needs them for cast() and call().
    for modname, attr, group in (
        ("oslo_messaging._metrics.client", "oslo_messaging_metrics",
         "oslo_messaging_metrics"),
        ("oslo_messaging._tracing.client", "oslo_messaging_tracing",
         "oslo_messaging_tracing"),
    ):
        try:
            module = __import__(modname, fromlist=[attr])
            conf.register_opts(getattr(module, attr), group=group)
        except (ImportError, AttributeError):
            pass
    conf(["--config-file", str(config_file)], project="nova-sched-test-client",
         default_config_files=[])
    return conf


def request_context(project_id: str = "demo-project", user_id: str = "demo-user",
                    **extra) -> dict:
    """A request context as oslo.context's ``to_dict()`` shapes it."""
    ctx = {
        "request_id": "req-" + str(uuid.uuid4()),
        "user_id": user_id,
        "project_id": project_id,
        "user": user_id,
        "tenant": project_id,
        "is_admin": False,
        "roles": ["member"],
        "read_only": False,
        "show_deleted": False,
        "user_name": "demo",
        "project_name": "demo",
    }
    ctx.update(extra)
    return ctx


class ContractClient:
    """A plain oslo.messaging client of the scheduler (CONTRACT section 3)."""

    def __init__(self, config_file: Path, topic: str = "scheduler"):
        import oslo_messaging as messaging

        self._messaging = messaging
        self.conf = client_conf(config_file)
        self.transport = messaging.get_rpc_transport(self.conf)
        self.client = messaging.get_rpc_client(
            self.transport, messaging.Target(topic=topic, version="2.0"))

    def run_instance(self, ctxt: dict, request_spec: Any, filter_properties: Any,
                     admin_password: str = "", injected_files: Any = None,
                     requested_networks: Any = None, is_first_time: bool = True,
                     legacy_bdm_in_spec: bool = True) -> None:
        self.client.prepare(version="2.9").cast(
            ctxt, "run_instance", request_spec=request_spec,
            admin_password=admin_password,
            injected_files=injected_files if injected_files is not None else [],
            requested_networks=requested_networks,
            is_first_time=is_first_time, filter_properties=filter_properties,
            legacy_bdm_in_spec=legacy_bdm_in_spec)

    def compute_node_update(self, ctxt: dict, compute_node: dict) -> None:
        self.client.prepare(version="2.10").cast(
            ctxt, "compute_node_update", compute_node=compute_node)

    def cleanup(self) -> None:
        self.transport.cleanup()


class NotificationCollector:
    """Every notification on topic ``notifications`` of a cloud, in order."""

    def __init__(self, config_file: Path):
        import oslo_messaging as messaging

        self.conf = client_conf(config_file)
        self.transport = messaging.get_notification_transport(self.conf)
        self.events: list[dict] = []
        self._cond = threading.Condition()
        collector = self

        class _Endpoint:
            def _record(self, priority, ctxt, publisher_id, event_type, payload,
                        metadata):
                with collector._cond:
                    collector.events.append({
                        "priority": priority, "publisher_id": publisher_id,
                        "event_type": event_type, "payload": payload,
                        "ctxt": ctxt,
                    })
                    collector._cond.notify_all()

            def info(self, ctxt, publisher_id, event_type, payload, metadata):
                self._record("info", ctxt, publisher_id, event_type, payload, metadata)

            def error(self, ctxt, publisher_id, event_type, payload, metadata):
                self._record("error", ctxt, publisher_id, event_type, payload, metadata)

            def warn(self, ctxt, publisher_id, event_type, payload, metadata):
                self._record("warn", ctxt, publisher_id, event_type, payload, metadata)

        self.listener = messaging.get_notification_listener(
            self.transport, [messaging.Target(topic="notifications")],
            [_Endpoint()])
        self.listener.start()

    def snapshot(self) -> list[dict]:
        with self._cond:
            return list(self.events)

    def wait_for(self, predicate: Callable[[list[dict]], Any], timeout: float,
                 what: str = "notifications") -> Any:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                value = predicate(list(self.events))
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"timed out waiting for {what}")
                self._cond.wait(min(left, 0.5))

    def close(self) -> None:
        self.listener.stop()
        self.listener.wait()
        self.transport.cleanup()


# The session cloud's computes, host -> (vcpus, memory_mb, local_gb):
# unequal sizes, so that weighers and capacity limits both matter.
SESSION_COMPUTES = {
    "compute-1": (16, 32768, 400),
    "compute-2": (16, 32768, 400),
    "compute-3": (8, 16384, 200),
    "compute-4": (8, 16384, 200),
    "compute-5": (4, 8192, 100),
}


# -- Havana requests -------------------------------------------------------
FLAVORS = {
    "m1.tiny": {"memory_mb": 256, "vcpus": 1, "root_gb": 1},
    "m1.small": {"memory_mb": 512, "vcpus": 1, "root_gb": 5},
    "m1.medium": {"memory_mb": 1024, "vcpus": 2, "root_gb": 10},
    "m1.large": {"memory_mb": 2048, "vcpus": 4, "root_gb": 20},
}
IMAGE_ID = "155d900f-4e14-4e4c-a73d-069cbf4541e6"


def flavor(name: str, memory_mb: int, vcpus: int, root_gb: int,
           ephemeral_gb: int = 0, swap: int = 0, extra_specs: dict | None = None) -> dict:
    """A flavor as Havana's compute API put it into request_spec['instance_type']."""
    return {
        "id": zlib.crc32(name.encode()) % 1000 + 1, "name": name,
        "flavorid": name, "memory_mb": memory_mb, "vcpus": vcpus,
        "root_gb": root_gb, "ephemeral_gb": ephemeral_gb, "swap": swap,
        "rxtx_factor": 1.0, "vcpu_weight": None, "disabled": False,
        "is_public": True, "deleted": False,
        "extra_specs": dict(extra_specs or {}),
    }


def named_flavor(name: str) -> dict:
    return flavor(name, **FLAVORS[name])


def havana_request(itype: dict, num_instances: int = 1, project_id: str = "demo-project",
                   user_id: str = "demo-user", availability_zone: str | None = None,
                   scheduler_hints: dict | None = None) -> tuple[dict, dict, list[str]]:
    """(request_spec, filter_properties, instance_uuids) as Havana's compute API built them."""
    uuids = [str(uuid.uuid4()) for _ in range(num_instances)]
    props = {
        "uuid": uuids[0],
        "memory_mb": itype["memory_mb"], "vcpus": itype["vcpus"],
        "root_gb": itype["root_gb"], "ephemeral_gb": itype["ephemeral_gb"],
        "swap": itype["swap"],
        "availability_zone": availability_zone,
        "project_id": project_id, "user_id": user_id,
        "os_type": "linux", "architecture": None,
        "image_ref": IMAGE_ID, "kernel_id": "", "ramdisk_id": "",
        "instance_type_id": itype["id"],
        "vm_state": "building", "task_state": "scheduling",
        "power_state": 0, "launch_index": 0,
        "reservation_id": "r-" + uuid.uuid4().hex[:8],
        "display_name": "vm", "hostname": "vm", "root_device_name": None,
        "metadata": {}, "system_metadata": {}, "config_drive": "",
        "key_name": None, "access_ip_v4": None, "access_ip_v6": None,
        "locked": False, "progress": 0,
    }
    request_spec = {
        "image": {
            "id": IMAGE_ID, "name": "cirros-0.3.1-x86_64", "size": 13147648,
            "status": "active", "min_ram": 0, "min_disk": 0,
            "container_format": "bare", "disk_format": "qcow2",
            "properties": {"hw_architecture": "x86_64"},
        },
        "instance_properties": props,
        "instance_type": copy.deepcopy(itype),
        "instance_uuids": list(uuids),
        "num_instances": num_instances,
        "block_device_mapping": [{
            "device_name": "/dev/vda", "source_type": "image",
            "destination_type": "local", "boot_index": 0,
            "delete_on_termination": True, "image_id": IMAGE_ID,
        }],
        "security_group": ["default"],
    }
    filter_properties = {
        "scheduler_hints": dict(scheduler_hints or {}),
        "instance_type": copy.deepcopy(itype),
    }
    return request_spec, filter_properties, uuids


# -- a cloud of processes --------------------------------------------------
class Cloud:
    """One scheduler daemon and fake compute nodes on a private vhost and DB."""

    def __init__(self, workdir: Path, name: str = "cloud"):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.tag = f"{name}_{uuid.uuid4().hex[:8]}"
        self.broker = Broker(self.tag).open()
        self.exchange = f"nova_sched_test_{self.tag}"
        self.scheduler_host = f"sched-{self.tag}"
        suffix = f"_{self.tag}" if self.broker.isolated_topics else ""
        self.scheduler_topic = "scheduler" + suffix
        self.compute_topic = "compute" + suffix
        self.db_path = self.workdir / "nova_sched.sqlite"
        self.db_url = f"sqlite:///{self.db_path}"
        self.config_file = self.workdir / "nova-sched.conf"
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        self.compute_hosts: list[str] = []
        self.write_config(self.config_file)
        self._engine: sa.Engine | None = None
        self._client: ContractClient | None = None

    # -- configuration ------------------------------------------------
    def config_text(self, overrides: dict[str, dict[str, Any]] | None = None) -> str:
        sections: dict[str, dict[str, Any]] = {
            "DEFAULT": {
                "host": self.scheduler_host,
                "transport_url": self.broker.url,
                "control_exchange": self.exchange,
                "scheduler_topic": self.scheduler_topic,
                "compute_topic": self.compute_topic,
                "service_down_time": 15,
                "state_path": str(self.workdir),
                "debug": os.environ.get("NOVA_SCHED_TEST_DEBUG", "false"),
            },
            "database": {"connection": self.db_url, "max_retries": 3,
                         "retry_interval": 0.5},
            "scheduler": {"max_attempts": 3, "periodic_task_interval": 5},
            "filter_scheduler": {"ram_allocation_ratio": RAM_RATIO,
                                 "cpu_allocation_ratio": CPU_RATIO,
                                 "disk_allocation_ratio": DISK_RATIO},
            "oslo_messaging_rabbit": {
                "rabbit_retry_interval": 1, "rabbit_retry_backoff": 1,
                "rabbit_interval_max": 5, "kombu_reconnect_delay": 0.5,
                # Queues of a finished run vanish even if its vhost is kept.
                "rabbit_transient_queues_ttl": 600,
            },
        }
        for group, values in (overrides or {}).items():
            sections.setdefault(group, {}).update(values)
        lines = []
        for group, values in sections.items():
            lines.append(f"[{group}]")
            for key, value in values.items():
                if isinstance(value, (list, tuple)):
                    value = ",".join(str(v) for v in value)
                lines.append(f"{key} = {value}")
            lines.append("")
        return "\n".join(lines)

    def write_config(self, path: Path, overrides: dict | None = None) -> Path:
        path.write_text(self.config_text(overrides))
        return path

    # -- processes ----------------------------------------------------
    def run_manage(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        cmd = entry_point("nova_sched.cmd.manage", "--config-file",
                          str(self.config_file), *args)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=subprocess_env(), cwd=str(self.workdir),
                              stdin=subprocess.DEVNULL)

    def db_sync(self) -> None:
        done = self.run_manage("db", "sync")
        if done.returncode != 0:
            raise RuntimeError(
                f"nova-sched-manage db sync failed ({done.returncode}):\n"
                f"{done.stdout}\n{done.stderr}")

    def spawn(self, name: str, cmd: list[str]) -> subprocess.Popen:
        log = self.workdir / f"{name}.log"
        fh = open(log, "ab")
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=subprocess_env(),
                                cwd=str(self.workdir))
        fh.close()
        self.procs[name] = proc
        self.logs[name] = log
        return proc

    def start_daemon(self, name: str = "scheduler",
                     config_file: Path | None = None) -> subprocess.Popen:
        return self.spawn(name, entry_point(
            "nova_sched.cmd.scheduler", "--config-file",
            str(config_file or self.config_file)))

    def start_compute(self, host: str, vcpus: int, memory_mb: int, local_gb: int,
                      fail_builds: float = 0.0, report_interval: float = 1.0,
                      seed: int | None = None) -> subprocess.Popen:
        args = ["--config-file", str(self.config_file), "--host", host,
                "--vcpus", str(vcpus), "--memory-mb", str(memory_mb),
                "--local-gb", str(local_gb), "--report-interval",
                str(report_interval)]
        if fail_builds:
            args += ["--fail-builds", str(fail_builds)]
        if seed is not None:
            args += ["--seed", str(seed)]
        self.compute_hosts.append(host)
        return self.spawn(host, entry_point("nova_sched.cmd.fake_compute", *args))

    def stop(self, name: str, sig: int | None = signal.SIGTERM,
             timeout: float = 20) -> int | None:
        """Signal one process (unless ``sig`` is None) and wait for it.

        Returns its exit code, or None when it had to be killed.
        """
        proc = self.procs.get(name)
        if proc is None:
            return None
        if proc.poll() is None:
            if sig is not None:
                proc.send_signal(sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                return None
        return proc.returncode

    def assert_running(self) -> None:
        dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
        if dead:
            raise AssertionError(
                f"processes exited early: {dead}\n" + self.log_tails(list(dead)))

    def log_text(self, name: str) -> str:
        path = self.logs.get(name)
        return path.read_text(errors="replace") if path and path.exists() else ""

    def log_tails(self, names: list[str] | None = None, lines: int = 30) -> str:
        out = []
        for name in names or list(self.logs):
            text = self.log_text(name).splitlines()[-lines:]
            out.append(f"--- {name} ({self.logs[name]}) ---\n" + "\n".join(text))
        return "\n".join(out)

    def close(self) -> dict[str, int | None]:
        """Stop every process (one SIGTERM each), the client and the vhost.

        Returns each process's exit code (None: it had to be killed).
        """
        # Signal everything first so the ~1 s shutdowns overlap; a second
        # signal could land during interpreter shutdown and kill the process.
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = {name: self.stop(name, sig=None) for name in list(self.procs)}
        if self._client is not None:
            self._client.cleanup()
            self._client = None
        if self._engine is not None:
            self._engine.dispose()
        self.broker.close()
        return codes

    # -- the client and the database ----------------------------------
    @property
    def client(self) -> ContractClient:
        if self._client is None:
            self._client = ContractClient(self.config_file, topic=self.scheduler_topic)
        return self._client

    @property
    def engine(self) -> sa.Engine:
        if self._engine is None:
            self._engine = sa.create_engine(self.db_url, connect_args={"timeout": 30})
        return self._engine

    def query(self, sql: str, **params) -> list[dict]:
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(sa.text(sql), params)]

    def wait_for_nodes(self, hosts: list[str], timeout: float = 90) -> None:
        """Until the daemon has stored a report of every host (it consumes)."""
        wanted = set(hosts)

        def _seen():
            self.assert_running()
            try:
                rows = self.query("SELECT host FROM compute_nodes WHERE updated_at IS NOT NULL")
            except sa.exc.OperationalError:
                return False
            return wanted <= {r["host"] for r in rows}

        try:
            wait_until(_seen, timeout, 0.3, f"reports of {sorted(wanted)}")
        except TimeoutError as err:
            raise AssertionError(f"{err}\n{self.log_tails()}") from None

    def instances(self, uuids: list[str]) -> dict[str, dict]:
        if not uuids:
            return {}
        rows: dict[str, dict] = {}
        for i in range(0, len(uuids), 400):
            chunk = uuids[i:i + 400]
            marks = ",".join(f":u{j}" for j in range(len(chunk)))
            params = {f"u{j}": u for j, u in enumerate(chunk)}
            for r in self.query(f"SELECT * FROM instances WHERE uuid IN ({marks})", **params):
                rows[r["uuid"]] = r
        return rows

    def wait_for_final(self, uuids: list[str], timeout: float = 60,
                       states: tuple[str, ...] = ("active", "error")) -> dict[str, dict]:
        """Until every instance is ACTIVE or ERROR; returns their rows."""
        def _done():
            self.assert_running()
            rows = self.instances(uuids)
            if len(rows) == len(uuids) and all(
                    r["vm_state"] in states for r in rows.values()):
                return rows
            return None

        try:
            return wait_until(_done, timeout, 0.3, f"{len(uuids)} instances to settle")
        except TimeoutError as err:
            rows = self.instances(uuids)
            pending = {u: (rows.get(u) or {}).get("vm_state") for u in uuids
                       if (rows.get(u) or {}).get("vm_state") not in states}
            sample = dict(list(pending.items())[:5])
            raise AssertionError(
                f"{err}: {len(pending)} not settled, e.g. {sample}\n"
                f"{self.log_tails()}") from None

    def faults(self, uuid_: str) -> list[dict]:
        return self.query("SELECT * FROM instance_faults WHERE instance_uuid = :u "
                          "ORDER BY id", u=uuid_)

    def actions(self, uuid_: str) -> list[dict]:
        """The instance's actions, each with its events under 'events'."""
        actions = self.query("SELECT * FROM instance_actions WHERE instance_uuid = :u "
                             "ORDER BY id", u=uuid_)
        for action in actions:
            action["events"] = self.query(
                "SELECT * FROM instance_actions_events WHERE action_id = :a "
                "ORDER BY id", a=action["id"])
        return actions

    def dump_tables(self) -> str:
        """Every row of every table, as text (for secret scans)."""
        parts = []
        insp = sa.inspect(self.engine)
        for table in insp.get_table_names():
            for row in self.query(f'SELECT * FROM "{table}"'):
                parts.append(json.dumps(row, default=str))
        return "\n".join(parts)
