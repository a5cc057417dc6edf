"""The scheduler service: RPC server, host-state cache and periodic tasks."""

from __future__ import annotations

import logging
import sys
import threading

import oslo_messaging as messaging

from nova_sched import exception, rpc
from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.db import migration
from nova_sched.scheduler.manager import SchedulerManager
from nova_sched.scheduler.topic_consumer import TopicConsumer

LOG = logging.getLogger(__name__)

# Seconds a thread may hold the GIL while another waits for it (Python's
# default is 0.005): see SchedulerService.start.
_SWITCH_INTERVAL = 0.0005


def check_startup() -> None:
    """Refuse bad configuration before taking any message.

    Raises ConfigurationError or DatabaseUnavailable with a one-line reason.
    """
    db_api.wait_for_database(CONF.database.max_retries, CONF.database.retry_interval)
    if not migration.schema_is_current():
        raise exception.ConfigurationError(
            "the database schema is missing or old; run "
            "'nova-sched-manage --config-file FILE db sync'")


class SchedulerService:
    """One scheduler daemon process: consumes the scheduler topic.

    ``transport`` defaults to ``[DEFAULT] transport_url``; the embedded demo
    passes its in-memory transport.
    """

    def __init__(self, transport=None, notification_transport=None):
        self.transport = transport or rpc.get_transport()
        self.notification_transport = (
            notification_transport or rpc.get_notification_transport())
        self.manager = SchedulerManager(self.transport, self.notification_transport)
        self.server = None
        self._stop = threading.Event()
        self._periodic: threading.Thread | None = None
        self._logged_count = 0

    def start(self) -> None:
        # The consumer thread gives up the GIL on every socket read and
        # write, several times per message; with the default 5 ms switch
        # interval, request threads busy deciding or writing keep it waiting
        # that long each time, and a thousand compute reports a second no
        # longer fit (the "convoy effect"). A shorter interval hands the GIL
        # back to it sooner, at the price of more switches between threads.
        sys.setswitchinterval(_SWITCH_INTERVAL)
        self.manager.host_manager.full_resync()
        self.manager.reports.start()
        target = messaging.Target(topic=CONF.scheduler_topic, server=CONF.host)
        self.server = TopicConsumer(self.transport, target, self.manager,
                                    rpc.ContextSerializer(),
                                    inline=("compute_node_update",),
                                    threads=CONF.scheduler.request_threads,
                                    on_backlog=self.manager.host_manager.set_report_lag)
        self.server.start()
        self._periodic = threading.Thread(target=self._run_periodic,
                                          name="periodic-tasks", daemon=True)
        self._periodic.start()
        LOG.info("nova-sched %s consuming topic %s (exchange %s), driver %s",
                 CONF.host, CONF.scheduler_topic, CONF.control_exchange,
                 CONF.scheduler.driver)

    def _run_periodic(self) -> None:
        while not self._stop.wait(CONF.scheduler.periodic_task_interval):
            try:
                self.manager.resume_parked()
                self.manager.recover_stuck()
                self.manager.cycle.refresh()
                self._log_stats()
            except Exception:  # a periodic task must never kill the daemon
                LOG.exception("Periodic task failed; will try again")

    def _log_stats(self) -> None:
        stats = self.manager.cycle.stats
        if stats.count == self._logged_count:
            return
        self._logged_count = stats.count
        pct = stats.percentiles_ms(50, 99)
        LOG.info("Decisions so far: %d; time to decide and claim per instance "
                 "over the last %d: p50 %.2f ms, p99 %.2f ms; %d compute nodes "
                 "known",
                 stats.count, min(stats.count, 100_000), pct[50], pct[99],
                 len(self.manager.host_manager.candidates()))

    def stop(self) -> None:
        """Stop taking messages, finish the requests in hand."""
        self._stop.set()
        if self.server is not None:
            self.server.stop()
        if self._periodic is not None:
            self._periodic.join(timeout=5)
        self.manager.reports.stop()
        LOG.info("nova-sched %s stopped", CONF.host)
