"""``nova-sched``: the scheduler daemon.

Exit codes: 0 after a clean stop (SIGTERM/SIGINT), 2 when the configuration
cannot work (unknown filter, weigher or driver; database unreachable after
retries; schema not synced), with a one-line reason on stderr.
"""

from __future__ import annotations

import os
import signal
import sys
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


def _serve_until_signalled() -> int:
    from nova_sched.service import SchedulerService

    stop = threading.Event()

    def _on_signal(signum, _frame):
        LOG.info("Received %s: finishing the requests in hand",
                 signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    service = SchedulerService()
    service.start()
    while not stop.wait(1.0):
        pass
    service.stop()
    return 0


def _run_workers(count: int) -> int:
    """Fork ``count`` processes, each a full consumer of the topic."""
    from nova_sched.db import api as db_api

    # Pooled connections opened by the start-up checks must not be shared
    # by the children: each opens its own.
    db_api.get_engine().dispose()
    children: list[int] = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _serve_until_signalled()
            finally:
                os._exit(code)
        children.append(pid)

    def _forward(signum, _frame):
        for child in children:
            try:
                os.kill(child, signum)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, _forward)
    signal.signal(signal.SIGINT, _forward)
    worst = 0
    for child in children:
        _, status = os.waitpid(child, 0)
        worst = max(worst, os.waitstatus_to_exitcode(status) & 0xFF)
    return worst


def main(argv=None) -> int:
    try:
        _configure(sys.argv[1:] if argv is None else argv)
    except cfg.Error as err:
        print(f"nova-sched: bad configuration: {err}", file=sys.stderr)
        return 2
    try:
        _validate()
    except (exception.ConfigurationError, exception.DatabaseUnavailable) as err:
        print(f"nova-sched: {err.message}", file=sys.stderr)
        LOG.error("Refusing to start: %s", err.message)
        return 2
    if CONF.scheduler.workers > 1:
        return _run_workers(CONF.scheduler.workers)
    return _serve_until_signalled()


if __name__ == "__main__":
    sys.exit(main())
