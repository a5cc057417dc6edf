"""``nova-sched``: the scheduler daemon.

Exit codes: 0 after a clean stop (SIGTERM/SIGINT), 2 when the configuration
cannot work (unknown filter, weigher or driver; database unreachable after
retries; schema not synced), with a one-line reason on stderr.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading

import nova_sched  # noqa: F401  (selects oslo.service's threading backend)
from oslo_config import cfg
from oslo_log import log as logging

from nova_sched import exception
from nova_sched.conf import CONF

LOG = logging.getLogger(__name__)


def _configure(argv) -> None:
    logging.register_options(CONF)
    from nova_sched import rpc  # noqa: F401  (nova-sched's messaging defaults)

    CONF(argv, project="nova-sched", prog="nova-sched")
    logging.setup(CONF, "nova-sched")


def _validate() -> None:
    """Everything that can be checked before touching the broker."""
    from nova_sched.scheduler import driver
    from nova_sched.scheduler.host_manager import HostManager
    from nova_sched.service import check_startup

    driver.load_driver(CONF.scheduler.driver, HostManager())
    check_startup()


def _serve_until_signalled(worker_health_dir: str | None = None) -> int:
    from nova_sched.service import SchedulerService

    stop = threading.Event()

    def _on_signal(signum, _frame):
        LOG.info("Received %s: finishing the requests in hand",
                 signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    service = SchedulerService(worker_health_dir=worker_health_dir)
    try:
        service.start()
    except (exception.ConfigurationError, exception.DatabaseUnavailable) as err:
        service.stop()
        return _refuse(err)
    while not stop.wait(1.0):
        pass
    service.stop()
    return 0


def _run_workers(count: int) -> int:
    """Fork ``count`` processes, each a full consumer of the topic.

    With ``[prometheus] enabled`` the parent serves the endpoint: the
    workers' instruments write to prometheus_client's multiprocess files
    in a directory of the parent's, which adds them up on each scrape, and
    each worker's health is a file there too.
    """
    from nova_sched.db import api as db_api

    metrics_dir = endpoint = files = None
    children: list[int] = []
    if CONF.prometheus.enabled:
        from prometheus_client import CollectorRegistry, ProcessCollector, multiprocess

        from nova_sched.health import WorkerHealthFiles
        from nova_sched.service import open_endpoint

        metrics_dir = tempfile.mkdtemp(prefix="nova-sched-metrics-")
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=metrics_dir)
        ProcessCollector(registry=registry)  # the parent's own process
        files = WorkerHealthFiles(metrics_dir)

        def _health() -> str | None:
            gone = count - len(children)
            if gone:
                return f"{gone} of {count} workers have exited"
            return files.reason(children)

        try:
            endpoint = open_endpoint(registry, _health,
                                     details=lambda: files.details(children))
        except exception.ConfigurationError as err:
            shutil.rmtree(metrics_dir, ignore_errors=True)
            return _refuse(err)

    # Pooled connections opened by the start-up checks must not be shared
    # by the children: each opens its own.
    db_api.get_engine().dispose()
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                if metrics_dir is not None:
                    from nova_sched.scheduler.metrics import enable_multiprocess

                    endpoint.close_in_child()
                    enable_multiprocess(metrics_dir)
                code = _serve_until_signalled(worker_health_dir=metrics_dir)
            finally:
                os._exit(code)
        children.append(pid)

    def _forward(signum, _frame):
        for child in list(children):
            try:
                os.kill(child, signum)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, _forward)
    signal.signal(signal.SIGINT, _forward)
    if endpoint is not None:
        endpoint.start()
    worst = 0
    try:
        while children:
            pid, status = os.wait()
            if pid in children:
                children.remove(pid)
            worst = max(worst, os.waitstatus_to_exitcode(status) & 0xFF)
            if metrics_dir is not None:
                # Its live gauges leave the sums; its counters stay counted.
                multiprocess.mark_process_dead(pid, metrics_dir)
                files.forget(pid)
    finally:
        if endpoint is not None:
            endpoint.stop()
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    return worst


def _refuse(err: exception.NovaSchedException) -> int:
    """Exit code 2 with the one-line reason, on stderr and in the log."""
    print(f"nova-sched: {err.message}", file=sys.stderr)
    LOG.error("Refusing to start: %s", err.message)
    return 2


def main(argv=None) -> int:
    try:
        _configure(sys.argv[1:] if argv is None else argv)
    except cfg.Error as err:
        print(f"nova-sched: bad configuration: {err}", file=sys.stderr)
        return 2
    try:
        _validate()
    except (exception.ConfigurationError, exception.DatabaseUnavailable) as err:
        return _refuse(err)
    if CONF.scheduler.workers > 1:
        return _run_workers(CONF.scheduler.workers)
    return _serve_until_signalled()


if __name__ == "__main__":
    sys.exit(main())
