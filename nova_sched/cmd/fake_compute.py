"""nova-sched-fake-compute: one simulated compute node as a real process.

    nova-sched-fake-compute --config-file FILE --host H [--node N]
        --vcpus C --memory-mb M --local-gb D
        [--fail-builds RATE] [--report-interval S]

Serves ``run_instance`` casts on ``Target(topic=compute_topic, server=H)``,
reports the node with ``compute_node_update`` at start and every
``--report-interval`` seconds, and stops cleanly with exit code 0 on
SIGTERM or SIGINT. A bad command line or configuration exits with code 2
and a one-line reason.

The node reaches the scheduler through RPC only. With ``[fake_compute]
record_instance_state`` (the default) and ``[database] connection``
pointing at an existing database, build outcomes are also recorded in the
instance rows, as nova's compute records them in nova's database
(``DatabaseInstanceStore``): instance rows and faults only, never claims.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading

import nova_sched  # noqa: F401  (selects oslo.service's threading backend)

import oslo_messaging as messaging
from oslo_config import cfg
from oslo_log import log as logging

from nova_sched import rpc
from nova_sched.compute import fake
from nova_sched.conf import CONF
from nova_sched.scheduler import rpcapi as scheduler_rpcapi

LOG = logging.getLogger(__name__)

PROG = "nova-sched-fake-compute"

cli_opts = [
    # [DEFAULT] host names the scheduler's own host in a shared config
    # file, so the simulated host has its own destination.
    cfg.StrOpt("host", dest="fake_host", required=True,
               help="Host name of the simulated compute node (its RPC "
               "server is <compute_topic>.<host>)."),
    cfg.StrOpt("node", dest="fake_node",
               help="Hypervisor node name (default: the host name)."),
    cfg.IntOpt("vcpus", required=True, min=0, help="Physical CPUs."),
    cfg.IntOpt("memory-mb", required=True, min=0, help="RAM in MB."),
    cfg.IntOpt("local-gb", required=True, min=0, help="Local disk in GB."),
    cfg.FloatOpt("fail-builds", default=0.0, min=0.0, max=1.0,
                 help="Probability in [0, 1] that a build fails and is sent "
                 "back to the scheduler for a retry."),
    cfg.FloatOpt("report-interval", default=10.0, min=0.1,
                 help="Seconds between reports (compute_node_update)."),
    cfg.IntOpt("seed", help="Seed of the build-failure draws (reproducible "
               "runs)."),
]


def _parse(argv: list[str]) -> None:
    CONF.register_cli_opts(cli_opts)
    logging.register_options(CONF)
    CONF(argv, project="nova-sched", prog=PROG)


class DatabaseInstanceStore:
    """Records build outcomes in instance rows (``nova_sched.db.instances``).

    Only ``mark_active`` and ``mark_error`` (instance row and fault), which
    touch no claim. A failing database write is logged and does not crash
    the node: the fake compute keeps serving, as it does without any
    database.
    """

    def __init__(self):
        # Imported only when outcomes are recorded: the node itself needs
        # no database.
        from nova_sched.db import instances

        self._db = instances

    def mark_active(self, uuid: str, host: str, node: str) -> None:
        try:
            self._db.mark_active(uuid, host, node)
        except Exception:
            LOG.exception("Could not mark instance %s active", uuid)

    def mark_error(self, uuid: str, message: str) -> None:
        try:
            self._db.mark_error(uuid, message)
        except Exception:
            LOG.exception("Could not mark instance %s as ERROR", uuid)


def _instance_store() -> fake.InstanceStore | None:
    """The instance-row recorder; None when disabled or without a database."""
    if not CONF.fake_compute.record_instance_state:
        LOG.info("[fake_compute] record_instance_state is off: build outcomes "
                 "are not recorded")
        return None
    url = CONF.database.connection
    if url.startswith("sqlite:///") and url not in ("sqlite:///:memory:",):
        path = url[len("sqlite:///"):]
        if not os.path.exists(path):
            LOG.info("No database at the configured SQLite path: build "
                     "outcomes are not recorded")
            return None
    elif url.startswith("sqlite://"):
        return None  # a private in-memory database would be of no use
    return DatabaseInstanceStore()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        _parse(argv)
    except (cfg.Error, ValueError) as err:
        print(f"{PROG}: {err}".splitlines()[0], file=sys.stderr)
        return 2
    except SystemExit as exc:
        # --help exits 0; argparse and oslo.config's range checks have
        # already printed their one line: a bad command line is code 2.
        if exc.code in (0, None):
            raise
        return 2
    logging.setup(CONF, PROG)

    node = fake.FakeComputeNode(
        CONF.fake_host,
        CONF.fake_node,
        vcpus=CONF.vcpus,
        memory_mb=CONF.memory_mb,
        local_gb=CONF.local_gb,
        fail_rate=CONF.fail_builds,
        rng=random.Random(CONF.seed),
        instance_store=_instance_store(),
    )

    transport = rpc.get_transport()
    scheduler_api = scheduler_rpcapi.SchedulerAPI(transport)
    endpoint = fake.FakeComputeEndpoint({node.host: node}, scheduler_api)
    target = messaging.Target(topic=CONF.compute_topic, server=node.host)
    server = rpc.get_server(transport, target, [endpoint])
    reporter = fake.NodeReporter([node], scheduler_api, CONF.report_interval)

    stop = threading.Event()

    def _on_signal(signum, _frame):
        LOG.info("Received %s, stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)

    server.start()
    reporter.start()
    LOG.info(
        "Fake compute %s/%s serving %s.%s: %d vCPUs, %d MB RAM, %d GB disk, "
        "fail rate %.2f, report every %.1fs",
        node.host, node.node, CONF.compute_topic, node.host, node.vcpus,
        node.memory_mb, node.local_gb, node.fail_rate, CONF.report_interval,
    )
    while not stop.wait(1.0):
        pass

    reporter.stop()
    server.stop()
    server.wait()
    transport.cleanup()
    LOG.info("Fake compute %s stopped (%d instances, %d failed builds)",
             node.host, len(node.instances), node.builds_failed_total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
