"""The embedded cloud: scheduler daemon, fake compute fleet, one process.

Everything talks over oslo.messaging's rabbit driver on kombu's in-process
memory transport (``kombu+memory:////``) and shares one in-memory SQLite
database, so the demo needs no broker and no database server, yet every
message takes the path it takes in production: the compute-api client
casts ``run_instance`` to the scheduler topic, the daemon decides, claims
and casts ``run_instance`` to ``compute.<host>``, and the compute nodes
report themselves with ``compute_node_update`` casts.

One RPC server serves the whole fleet. The rabbit driver declares, for
``Target(topic=T, server=S)``, a queue named ``T.S`` bound to the topic
exchange with the routing key ``T.S``. With ``server='*'`` that binding is
the AMQP pattern ``compute.*``, which matches ``compute.<host>`` for every
host whose name is one word (no dots): one queue, one consumer, and
``FakeComputeEndpoint`` dispatches each cast on ``instance['host']``.
Checked on kombu's memory transport (its virtual topic exchange maps ``*``
to ``[^.]+``, as RabbitMQ does); the demo's host names have no dots. The
same listener also consumes the bare ``compute`` topic queue and a
``compute_fanout`` queue, which nobody here casts to.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Callable, Iterator

import oslo_messaging as messaging

from nova_sched import rpc
from nova_sched.compute import fake
from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.db import migration
from nova_sched.scheduler.rpcapi import SchedulerAPI
from nova_sched.service import SchedulerService
from nova_sched.sim.flavors import HostShape

LOG = logging.getLogger(__name__)

TRANSPORT_URL = "kombu+memory:////"
DATABASE_URL = "sqlite://"
SCHEDULER_HOST = "sim-scheduler"

# Loggers quieted while the demo runs, and to which level: the terminal
# shows the progress bar and the summary only. The scheduler's own
# warnings (one per instance that found no host) are summarised instead;
# its errors still show.
_QUIET_LOGGERS = {
    "kombu": logging.ERROR,  # "No hostname was supplied. Reverting to default 'localhost'"
    "amqp": logging.ERROR,
    "oslo_messaging": logging.WARNING,
    "oslo.messaging": logging.WARNING,
    "nova_sched": logging.ERROR,
}

ArrivalCallback = Callable[[str, str, float], None]

# Seconds a listener on the memory transport sleeps when its queues are
# empty. oslo.messaging sets kombu's polling interval to 0 for memory://
# ("to speed up tests"), which makes every idle listener spin: with the
# daemon's and the fleet's listeners the idle demo burnt 72% of a core,
# taken from the decisions under the GIL (7% with this setting). 2 ms
# costs at most that much latency per hop.
LISTENER_POLL_INTERVAL = 0.002


# Heartbeats per second the demo's fleet may send once it is up: one
# process carries the daemon, the fleet and the client, so for large fleets
# the demo lengthens service_down_time (nodes re-report at 0.75 of it)
# rather than let heartbeats crowd out the boots it is there to show.
# bench/e2e_bench.py measures real heartbeat rates over RabbitMQ.
DEMO_HEARTBEATS_PER_SECOND = 250


@contextlib.contextmanager
def embedded_config(hosts: int = 0) -> Iterator[None]:
    """Point CONF at the in-memory transport and database, then undo it.

    The overrides and the logger levels are restored on the way out, so a
    test process that shares the global CONF finds it as it was. The
    in-memory database stays configured (its figures are read after the
    run); callers that need their own engine back reconfigure it.
    """
    # The rabbit driver registers its options on CONF when a transport is
    # made (making one does not connect): made now, the heartbeat can be
    # switched off before the demo's transports connect.
    messaging.get_rpc_transport(CONF, url=TRANSPORT_URL).cleanup()
    overrides = (
        ("transport_url", TRANSPORT_URL, None),
        # kombu's memory transport has no heartbeats: without this the
        # driver warns about it on every connection.
        ("heartbeat_timeout_threshold", 0, "oslo_messaging_rabbit"),
        ("connection", DATABASE_URL, "database"),
        ("host", SCHEDULER_HOST, None),
        ("service_down_time", max(CONF.service_down_time,
                                  int(hosts / DEMO_HEARTBEATS_PER_SECOND / 0.75) + 1),
         None),
    )
    levels = {name: logging.getLogger(name).level for name in _QUIET_LOGGERS}
    for name, level in _QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(level)
    try:
        for name, value, group in overrides:
            CONF.set_override(name, value, group=group)
        yield
    finally:
        for name, _value, group in overrides:
            CONF.clear_override(name, group=group)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def calm_listener(server, interval: float = LISTENER_POLL_INTERVAL) -> bool:
    """Make a started RPC server on the memory transport poll, not spin.

    Reaches through oslo.messaging's private objects (server, listener,
    connection, kombu transport); returns False and changes nothing if
    they are not shaped as expected.
    """
    try:
        oslo_conn = getattr(server, "connection", None)
        if oslo_conn is None:
            oslo_conn = server.listener._poll_style_listener.conn
        transport = oslo_conn.connection.connection.transport
    except AttributeError:
        return False
    if getattr(transport, "driver_type", None) != "memory":
        return False
    transport.polling_interval = interval
    return True


class TimedComputeEndpoint(fake.FakeComputeEndpoint):
    """FakeComputeEndpoint that reports when each compute cast arrives."""

    def __init__(self, nodes, scheduler_api, on_arrival: ArrivalCallback):
        super().__init__(nodes, scheduler_api)
        self._on_arrival = on_arrival

    @messaging.expose
    def run_instance(self, context, instance, request_spec, filter_properties,
                     requested_networks, injected_files, admin_password,
                     is_first_time, node=None, legacy_bdm_in_spec=True):
        arrived = time.perf_counter()
        if isinstance(instance, dict) and instance.get("uuid"):
            self._on_arrival(instance["uuid"], instance.get("host"), arrived)
        super().run_instance(context, instance, request_spec, filter_properties,
                             requested_networks, injected_files, admin_password,
                             is_first_time, node=node,
                             legacy_bdm_in_spec=legacy_bdm_in_spec)


class HeartbeatReporter:
    """Re-reports every node before the scheduler would think it down.

    Each node reports again ``0.75 x service_down_time`` after its previous
    report; the first round is spread between half and three quarters of
    that time after the start-up burst, so the fleet's reports arrive
    evenly (as real compute nodes' do) rather than as one burst that would
    stall the scheduler. A demo shorter than half of ``service_down_time``
    sends no further reports.
    """

    def __init__(self, nodes: list[fake.FakeComputeNode], scheduler_api,
                 down_time: float, reported_at: float):
        self.nodes = nodes
        self.scheduler_api = scheduler_api
        self.period = 0.75 * down_time
        count = max(len(nodes), 1)
        # Monotonic due times, node i's first one at 0.5 + 0.25 * i / count.
        self._due = [reported_at + down_time * (0.5 + 0.25 * i / count)
                     for i in range(len(nodes))]
        self.sent = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        ctxt = rpc.admin_context()
        index = 0
        while self.nodes:
            wait = self._due[index] - time.monotonic()
            if self._stop.wait(max(wait, 0.0)):
                return
            node = self.nodes[index]
            try:
                self.scheduler_api.compute_node_update(ctxt, node.report())
                self.sent += 1
            except Exception:
                LOG.exception("Report of %s failed", node.host)
            self._due[index] += self.period
            index = (index + 1) % len(self.nodes)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sim-heartbeats",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


class EmbeddedCloud:
    """The daemon, the fake fleet and a compute-api client in this process.

    Use within ``embedded_config()``. ``on_arrival(uuid, host, t)`` is
    called when a compute cast reaches a fake node (``t`` from
    ``time.perf_counter()``).
    """

    def __init__(self, hosts: list[tuple[str, HostShape]], on_arrival: ArrivalCallback):
        self.shapes = dict(hosts)
        self.nodes = {
            name: fake.FakeComputeNode(
                name,
                vcpus=shape.vcpus,
                memory_mb=shape.memory_mb,
                local_gb=shape.local_gb,
                reserved_host_memory_mb=shape.reserved_host_memory_mb,
                supported_instances=[[shape.arch, fake.HYPERVISOR_TYPE, "hvm"]],
                extra_stats=dict(shape.stats),
            )
            for name, shape in hosts
        }
        self._on_arrival = on_arrival
        self.transport = None
        self.notification_transport = None
        self.service: SchedulerService | None = None
        self.scheduler_api: SchedulerAPI | None = None
        self._compute_server = None
        self._reporter: HeartbeatReporter | None = None

    @property
    def host_manager(self):
        """The daemon's host-state cache."""
        assert self.service is not None
        return self.service.manager.host_manager

    @property
    def decision_stats(self):
        """The daemon's timer of decisions (time per instance, claim included)."""
        assert self.service is not None
        return self.service.manager.cycle.stats

    def start(self) -> None:
        """Database, daemon and fleet listener up; nothing reported yet."""
        migration.db_sync(db_api.configure(DATABASE_URL))
        self.transport = rpc.get_transport()
        self.notification_transport = rpc.get_notification_transport()
        self.service = SchedulerService(self.transport, self.notification_transport)
        self.service.start()
        self.scheduler_api = SchedulerAPI(self.transport)
        endpoint = TimedComputeEndpoint(self.nodes, self.scheduler_api,
                                        self._on_arrival)
        # One server for the whole fleet: see the module docstring.
        target = messaging.Target(topic=CONF.compute_topic, server="*")
        self._compute_server = rpc.get_server(self.transport, target, [endpoint])
        self._compute_server.start()
        for server in (self.service.server, self._compute_server):
            if not calm_listener(server):
                LOG.warning("Could not set the polling interval of %s; idle "
                            "listeners will spin", server)

    def report_all(self, timeout: float,
                   progress: Callable[[int], None] | None = None) -> int:
        """Every node reports itself; wait until the host manager has them.

        Returns how many nodes the scheduler knows (all of them unless
        ``timeout`` seconds passed first).
        """
        assert self.scheduler_api is not None and self.service is not None
        ctxt = rpc.admin_context()
        reported_at = time.monotonic()
        for node in self.nodes.values():
            self.scheduler_api.compute_node_update(ctxt, node.report())
        host_manager = self.service.manager.host_manager
        deadline = time.monotonic() + timeout
        known = 0
        while True:
            with host_manager.lock:
                table = host_manager.table
                known = sum(1 for name in self.nodes
                            if table.row_of(name, name) is not None)
            if progress is not None:
                progress(known)
            if known == len(self.nodes) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        # Keep the heartbeats fresh for runs longer than service_down_time.
        self._reporter = HeartbeatReporter(list(self.nodes.values()),
                                           self.scheduler_api,
                                           CONF.service_down_time, reported_at)
        self._reporter.start()
        return known

    def stop(self) -> None:
        """Stop the reporter, the fleet's listener and the daemon."""
        if self._reporter is not None:
            self._reporter.stop()
        stoppers = []
        if self._compute_server is not None:
            server = self._compute_server

            def _stop_fleet():
                server.stop()
                server.wait()

            stoppers.append(threading.Thread(target=_stop_fleet))
        if self.service is not None:
            stoppers.append(threading.Thread(target=self.service.stop))
        # Each server takes about a second to wind down: do them together.
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join(timeout=30)
        for transport in (self.transport, self.notification_transport):
            if transport is not None:
                transport.cleanup()
