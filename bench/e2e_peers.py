"""The processes around the daemon in bench/e2e_bench.py.

Three roles, each run in its own process (``multiprocessing``, spawn) and
driven by the orchestrator over a pipe, one command at a time:

- ``Reporter``: a share of the compute fleet. Casts ``compute_node_update``
  (CONTRACT section 3) for its hosts, once as fast as it can (registration),
  then every host again every ``interval`` seconds, spread evenly.
- ``Caster``: the compute-api side. Casts ``run_instance`` requests in
  Havana's shape (tests/functional/cloudlib.py ``havana_request``), one
  instance each, to the scheduler topic or to the no-op baseline's topic,
  as fast as it can or at a given rate, and returns the time of each cast.
- ``Recorder``: an oslo.messaging RPC server that only notes the arrival
  time of each ``run_instance`` cast and the instance it names. On
  ``Target(topic=compute, server='*')`` it is every compute node at once
  (the binding ``compute.*`` matches ``compute.<host>`` for host names
  without dots; see nova_sched/sim/cloud.py); on a topic of its own it is
  the no-op baseline server.

Times are ``time.monotonic()``: CLOCK_MONOTONIC is one clock for every
process on the machine, so a cast's time in one process and an arrival's
in another subtract. Nothing here imports nova_sched: the peers are plain
oslo.messaging clients and servers, as cloudlib's are.
"""

from __future__ import annotations

import collections
import logging
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

_FUNCTIONAL = Path(__file__).resolve().parents[1] / "tests" / "functional"
if str(_FUNCTIONAL) not in sys.path:
    sys.path.insert(0, str(_FUNCTIONAL))

# Selects oslo.service's threading backend before oslo_messaging is imported.
import cloudlib  # noqa: E402

# The benchmark's fleet: one shape, large enough that the requests of a run
# never fill it (capacity is not what this benchmark measures).
HOST_VCPUS = 64
HOST_MEMORY_MB = 262144
HOST_LOCAL_GB = 4000
FLAVOR = "m1.tiny"


def host_names(count: int) -> list[str]:
    """Host names without dots, so ``compute.*`` matches their queues."""
    width = max(5, len(str(count)))
    return [f"e2e-host-{i:0{width}d}" for i in range(count)]


def compute_report(host: str) -> dict:
    """A compute_node dict as CONTRACT section 3 describes it (an idle node)."""
    return {
        "host": host, "hypervisor_hostname": host, "vcpus": HOST_VCPUS,
        "memory_mb": HOST_MEMORY_MB, "local_gb": HOST_LOCAL_GB,
        "vcpus_used": 0, "memory_mb_used": 0, "local_gb_used": 0,
        "free_ram_mb": HOST_MEMORY_MB, "free_disk_gb": HOST_LOCAL_GB,
        "disk_available_least": HOST_LOCAL_GB, "running_vms": 0,
        "current_workload": 0, "hypervisor_type": "kvm",
        "hypervisor_version": 6002000, "cpu_info": "{}", "host_ip": "192.0.2.1",
        "supported_instances": [["x86_64", "kvm", "hvm"]], "stats": {},
        "metrics": [], "reserved_host_memory_mb": 512,
        "reserved_host_disk_mb": 0, "reserved_host_cpus": 0,
    }


def send_paced(items: list, send, threads: int, start: float | None = None,
               spacing: float = 0.0, stop: threading.Event | None = None) -> dict:
    """``send(item)`` for every item from ``threads`` threads.

    Item i is sent no earlier than ``start + i * spacing`` (spacing 0: as
    fast as the threads go). Returns the monotonic time just before each
    send (None where the send failed or was stopped), the error count, the
    first error and the worst lateness behind the schedule.
    """
    stamps: list[float | None] = [None] * len(items)
    state = {"next": 0, "errors": 0, "first_error": None, "late": 0.0}
    lock = threading.Lock()
    start = time.monotonic() if start is None else start

    def worker():
        while stop is None or not stop.is_set():
            with lock:
                i = state["next"]
                if i >= len(items):
                    return
                state["next"] = i + 1
            due = start + i * spacing
            delay = due - time.monotonic()
            if delay > 0:
                if stop is not None:
                    if stop.wait(delay):
                        return
                else:
                    time.sleep(delay)
            now = time.monotonic()
            try:
                send(items[i])
            except Exception as err:  # counted and reported, never fatal
                with lock:
                    state["errors"] += 1
                    if state["first_error"] is None:
                        state["first_error"] = f"{type(err).__name__}: {err}"
                continue
            stamps[i] = now
            if now - due > state["late"]:
                state["late"] = now - due  # a race here only loses a maximum

    pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return {"stamps": stamps, "errors": state["errors"],
            "first_error": state["first_error"], "late": state["late"]}


class Reporter:
    """A share of the compute fleet: registers, then re-reports periodically."""

    def __init__(self, config_file: str, scheduler_topic: str, hosts: list[str],
                 threads: int = 3):
        self.client = cloudlib.ContractClient(Path(config_file), topic=scheduler_topic)
        self.hosts = hosts
        self.reports = [compute_report(h) for h in hosts]
        self.threads = threads
        self._stop = threading.Event()
        self._loop: threading.Thread | None = None
        self._lock = threading.Lock()
        self._sent = 0
        self._errors = 0
        self._first_error: str | None = None
        self._late = 0.0

    def _send(self, report: dict) -> None:
        self.client.compute_node_update(cloudlib.request_context(), report)
        with self._lock:
            self._sent += 1

    def register(self) -> dict:
        """Every host's report once, as fast as the threads go."""
        done = send_paced(self.reports, self._send, self.threads)
        sent = [s for s in done["stamps"] if s is not None]
        return {"sent": len(sent), "errors": done["errors"],
                "first_error": done["first_error"],
                "t_first": min(sent, default=None), "t_last": time.monotonic()}

    def start(self, interval: float, base: float) -> None:
        """Re-report every host every ``interval`` s from ``base`` on."""
        spacing = interval / max(1, len(self.reports))

        def loop():
            round_ = 0
            while not self._stop.is_set():
                done = send_paced(self.reports, self._send, self.threads,
                                  start=base + round_ * interval, spacing=spacing,
                                  stop=self._stop)
                self._errors += done["errors"]
                self._first_error = self._first_error or done["first_error"]
                self._late = max(self._late, done["late"])
                round_ += 1

        self._stop.clear()
        self._loop = threading.Thread(target=loop, name="re-report", daemon=True)
        self._loop.start()

    def stats(self) -> dict:
        """Reports sent so far (registration included), errors of the
        periodic rounds, worst lateness behind their schedule (s)."""
        return {"sent": self._sent, "errors": self._errors,
                "first_error": self._first_error, "late": self._late}

    def stop(self) -> dict:
        self._stop.set()
        if self._loop is not None:
            self._loop.join(30)
        return self.stats()

    def close(self) -> None:
        self.stop()
        self.client.cleanup()


class Caster:
    """The compute-api side: ``run_instance`` casts, one instance each."""

    def __init__(self, config_file: str, topics: dict[str, str], threads: int = 4):
        self.clients = {name: cloudlib.ContractClient(Path(config_file), topic=topic)
                        for name, topic in topics.items()}
        self.threads = threads

    def cast(self, to: str, count: int, rate: float | None, start: float,
             index: int, stride: int) -> dict:
        """Cast requests ``index, index + stride, ...`` below ``count`` to ``to``.

        Request i is cast at ``start + i / rate`` (no rate: at once). Returns
        ``[(uuid, time of the cast)]`` for the casts that were sent.
        """
        client = self.clients[to]
        itype = cloudlib.named_flavor(FLAVOR)
        requests = [cloudlib.havana_request(itype) for _ in range(index, count, stride)]

        def send(req):
            request_spec, filter_properties, _ = req
            client.run_instance(cloudlib.request_context(), request_spec,
                                filter_properties, admin_password="secret-e2e")

        spacing = stride / rate if rate else 0.0
        done = send_paced(requests, send, self.threads,
                          start=start + index / rate if rate else start,
                          spacing=spacing)
        casts = [(req[2][0], stamp) for req, stamp in zip(requests, done["stamps"])
                 if stamp is not None]
        return {"casts": casts, "errors": done["errors"],
                "first_error": done["first_error"], "late": done["late"],
                "t_last": time.monotonic()}

    def round_trips(self, to: str, count: int) -> list[float]:
        """``count`` calls of ``ping`` to ``to``, one after another: the
        seconds each took from the call to its reply."""
        client = self.clients[to].client.prepare(version="2.0", timeout=30)
        out = []
        for _ in range(count):
            t0 = time.monotonic()
            client.call(cloudlib.request_context(), "ping")
            out.append(time.monotonic() - t0)
        return out

    def close(self) -> None:
        for client in self.clients.values():
            client.cleanup()


class Recorder:
    """An RPC server that notes when each ``run_instance`` cast arrives.

    ``kind`` says where the instance uuid is: ``compute`` (the scheduler's
    cast to a compute node: ``instance['uuid']``) or ``noop`` (a client's
    cast to the scheduler API: ``request_spec['instance_uuids'][0]``).
    """

    def __init__(self, config_file: str, topic: str, server: str, kind: str):
        import oslo_messaging as messaging

        self.conf = cloudlib.client_conf(Path(config_file))
        self.transport = messaging.get_rpc_transport(self.conf)
        self.arrivals: collections.deque = collections.deque()
        self.total = 0
        arrivals = self.arrivals

        if kind == "compute":
            def uuid_of(kwargs):
                return (kwargs.get("instance") or {}).get("uuid")
        else:
            def uuid_of(kwargs):
                return ((kwargs.get("request_spec") or {}).get("instance_uuids")
                        or [None])[0]

        class Endpoint:
            # Any 2.x: the compute cast is 2.37, the client's run_instance 2.9.
            target = messaging.Target(version="2.99")

            def run_instance(self, ctxt, **kwargs):
                arrivals.append((uuid_of(kwargs), time.monotonic()))

            def ping(self, ctxt):
                """A call that does nothing: the wire's round trip."""
                return None

        self._make_server = lambda: messaging.get_rpc_server(
            self.transport, messaging.Target(topic=topic, server=server), [Endpoint()])
        self.server = self._make_server()
        self.server.start()

    def pause(self) -> None:
        """Stop consuming; casts wait in the (durable) topic queue."""
        self.server.stop()
        self.server.wait()
        self.server = None

    def resume(self) -> float:
        """Consume again, with a new server on the same queues; returns the
        time it began to start."""
        self.server = self._make_server()
        began = time.monotonic()
        self.server.start()
        return began

    def take(self) -> list[tuple[str | None, float]]:
        """The arrivals since the last take: ``[(uuid, time)]``."""
        out = []
        while True:
            try:
                out.append(self.arrivals.popleft())
            except IndexError:
                break
        self.total += len(out)
        return out

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server.wait()
        self.transport.cleanup()


ROLES = {"reporter": Reporter, "caster": Caster, "recorder": Recorder}


def peer_main(role: str, params: dict, conn) -> None:
    """A peer process: build the role, then serve the orchestrator's commands.

    Ctrl-C is left to the orchestrator, which stops its peers in order; a
    peer whose orchestrator vanished (closed pipe) exits by itself.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # "Received method (60, 30) during closing channel": harmless at shutdown.
    logging.getLogger("amqp").setLevel(logging.ERROR)
    try:
        obj = ROLES[role](**params)
    except Exception:
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ok", None))
    try:
        while True:
            try:
                name, args = conn.recv()
            except (EOFError, OSError):
                break
            if name == "exit":
                break
            try:
                conn.send(("ok", getattr(obj, name)(*args)))
            except Exception:
                conn.send(("error", traceback.format_exc()))
    finally:
        try:
            obj.close()
        except Exception:
            pass
