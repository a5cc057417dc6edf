"""The scheduler service: RPC server, host-state cache, periodic tasks and,
when ``[prometheus] enabled``, health and metrics."""

from __future__ import annotations

import functools
import logging
import sys
import threading

# NumPy imports numpy.ma on the first np.unique (np.ma.is_masked), some
# 30 ms with the GIL held: here, at start, rather than in the middle of a
# request or of the periodic tasks' statistics.
import numpy.ma  # noqa: F401
import oslo_messaging as messaging

from prometheus_client import ProcessCollector

from nova_sched import exception, rpc
from nova_sched.conf import CONF
from nova_sched.conf import scheduler as conf_scheduler
from nova_sched.db import api as db_api
from nova_sched.db import migration
from nova_sched.health import HealthMonitor, RecentEvents, WorkerHealthFiles
from nova_sched.long_lived import LongLived
from nova_sched.os_thread_names import name_os_threads
from nova_sched.prometheus_endpoint import PrometheusEndpoint
from nova_sched.publish_watch import SLOW as PUBLISH_SLOW
from nova_sched.scheduler import claim_stores
from nova_sched.scheduler.decision import cast_records
from nova_sched.scheduler.manager import SchedulerManager
from nova_sched.scheduler.manager_v4 import SchedulerManagerV4
from nova_sched.scheduler.metrics import SchedulerMetrics
from nova_sched.scheduler.wire.poison import PoisonGuard
from nova_sched.scheduler.wire.topic_consumer import TopicConsumer

LOG = logging.getLogger(__name__)

# Seconds a thread may hold the GIL while another waits for it (Python's
# default is 0.005): see SchedulerService.start.
_SWITCH_INTERVAL = 0.0005


def check_startup() -> None:
    """Refuse bad configuration before taking any message.

    Raises ConfigurationError or DatabaseUnavailable with a one-line reason.
    """
    claim_stores.check_pairing()
    if CONF.scheduler.host_source == "nova_cells" and not CONF.nova_cells.api_database_connection:
        raise exception.ConfigurationError(
            "[scheduler] host_source = nova_cells needs [nova_cells] "
            "api_database_connection (nova's API database)")
    db_api.wait_for_database(CONF.database.max_retries, CONF.database.retry_interval)
    if not migration.schema_is_current():
        raise exception.ConfigurationError(
            "the database schema is missing or old; run "
            "'nova-sched-manage --config-file FILE db sync'")


class SchedulerService:
    """One scheduler daemon process: consumes the scheduler topic.

    ``transport`` defaults to ``[DEFAULT] transport_url``; the embedded demo
    passes its in-memory transport. ``worker_health_dir`` is given to a
    worker of a multi-worker daemon: it writes its health there for the
    parent, which serves the endpoint, instead of serving one itself.
    """

    def __init__(self, transport=None, notification_transport=None,
                 worker_health_dir: str | None = None):
        self.transport = transport or rpc.get_transport()
        self.notification_transport = (
            notification_transport or rpc.get_notification_transport())
        self.metrics = SchedulerMetrics()
        self.manager = SchedulerManager(self.transport, self.notification_transport,
                                        metrics=self.metrics)
        self.poison_guard = PoisonGuard(self.manager)
        # What /healthz?verbose tells of lately: failovers, slow publishes,
        # database retries.
        self.events = RecentEvents()
        self.manager.publishes.on_slow.append(self._slow_publish)
        db_api.add_retry_listener(self._database_retry)
        self._worker_health_dir = worker_health_dir
        self.health: HealthMonitor | None = None
        self.endpoint: PrometheusEndpoint | None = None
        self.server = None
        self._stop = threading.Event()
        self._periodic: threading.Thread | None = None
        self._logged_count = 0
        self._long_lived = LongLived()

    def start(self) -> None:
        # The consumer thread gives up the GIL on every socket read and
        # write, several times per message; with the default 5 ms switch
        # interval, request threads busy deciding or writing keep it waiting
        # that long each time, and a thousand compute reports a second no
        # longer fit (the "convoy effect"). A shorter interval hands the GIL
        # back to it sooner, at the price of more switches between threads.
        sys.setswitchinterval(_SWITCH_INTERVAL)
        if CONF.prometheus.enabled and self._worker_health_dir is None:
            # Before any message is taken: a port that cannot be had is a
            # configuration error, not a daemon without its endpoint.
            ProcessCollector(registry=self.metrics.registry)
            self.endpoint = open_endpoint(self.metrics.registry, self._health_reason,
                                          self.sample_metrics, self.events.lines)
        self.manager.host_manager.full_resync()
        # What the start built lives as long as the daemon: out of the
        # collector's full passes (nova_sched.long_lived).
        self._long_lived.freeze(self.manager.host_manager.table)
        self.manager.reports.start()
        self.manager.refresher.start()
        target = messaging.Target(topic=CONF.scheduler_topic, server=CONF.host)
        self.server = TopicConsumer(self.transport, target,
                                    [self.manager, SchedulerManagerV4(self.manager)],
                                    rpc.ContextSerializer(),
                                    inline=("compute_node_update",),
                                    threads=conf_scheduler.request_threads(CONF),
                                    on_backlog=self.manager.host_manager.set_report_lag,
                                    guard=self.poison_guard,
                                    on_reconnect=self._reconnected,
                                    on_idle=functools.partial(
                                        self.manager.write_held_casts, idle=True),
                                    idle_grace=cast_records.IDLE_GRACE_S)
        self.server.start()
        if CONF.prometheus.enabled:
            on_probe = [lambda _reason: self.sample_metrics()]
            if self._worker_health_dir is not None:
                on_probe.append(WorkerHealthFiles(self._worker_health_dir,
                                                  self.events.lines).write)
            server = self.server
            self.health = HealthMonitor(
                lambda: server.problem() or self.manager.problem(), db_api.ping,
                on_probe)
            self.health.start()
        if self.endpoint is not None:
            self.endpoint.start()
        self._periodic = threading.Thread(target=self._run_periodic,
                                          name="periodic-tasks", daemon=True)
        self._periodic.start()
        name_os_threads()
        LOG.info("nova-sched %s consuming topic %s (exchange %s), driver %s",
                 CONF.host, CONF.scheduler_topic, CONF.control_exchange,
                 CONF.scheduler.driver)

    def _reconnected(self, seconds_away: float, through: str) -> None:
        self.metrics.reconnected(seconds_away)
        self.manager.host_manager.note_broker_outage(seconds_away)
        self.events.note(f"broker connection lost; consuming again through "
                         f"{through} after {seconds_away:.1f} s")

    def _slow_publish(self, what: str, seconds: float) -> None:
        self.events.note(f"a publish waited more than {PUBLISH_SLOW:.0f} s for "
                         f"the broker ({what}, {seconds:.1f} s)")

    def _database_retry(self, reason: str) -> None:
        self.metrics.database_retry(reason)
        self.events.note(f"database transaction retried: {reason}")

    def _health_reason(self) -> str | None:
        if self.health is None:
            return "starting"
        return self.health.reason()

    def sample_metrics(self) -> None:
        """Set the gauges (hosts by state, parked requests) from what is now."""
        self.metrics.sample(self.manager.host_manager, len(self.manager.parked))

    def _run_periodic(self) -> None:
        while not self._stop.wait(CONF.scheduler.periodic_task_interval):
            try:
                self.manager.write_held_casts()
                self.manager.resume_parked()
                self.manager.recover_stuck()
                self.poison_guard.purge()
                self._long_lived.settle_if_due(self.manager.host_manager.table)
                self._log_stats()
                name_os_threads()  # and those started since
            except Exception:  # a periodic task must never kill the daemon
                LOG.exception("Periodic task failed; will try again")

    def _log_stats(self) -> None:
        stats = self.manager.cycle.stats
        if stats.count == self._logged_count:
            return
        self._logged_count = stats.count
        pct = stats.percentiles_ms(50, 99)
        claim = stats.claim_percentiles_ms(50, 99)
        LOG.info("Decisions so far: %d; over the last %d, decision_ms (CPU time "
                 "of the deciding thread) p50 %.2f p99 %.2f, claim_ms (the "
                 "claim's wall time) p50 %.2f p99 %.2f; %d compute nodes known",
                 stats.count, min(stats.count, stats.size), pct[50], pct[99],
                 claim[50], claim[99], len(self.manager.host_manager.candidates()))

    def stop(self) -> None:
        """Stop taking messages, finish the requests in hand."""
        self._stop.set()
        if self.endpoint is not None:
            self.endpoint.stop()
        if self.health is not None:
            self.health.stop()
        if self.server is not None:
            self.server.stop()
        if self._periodic is not None:
            self._periodic.join(timeout=5)
        self.manager.refresher.stop()
        self.manager.reports.stop()
        # After the requests in hand: their last notifications are queued.
        self.manager.stop_publishing()
        self.manager.host_manager.source.stop()
        db_api.remove_retry_listener(self._database_retry)
        LOG.info("nova-sched %s stopped", CONF.host)


def open_endpoint(registry, health, before_scrape=None,
                  details=None) -> PrometheusEndpoint:
    """The /metrics and /healthz endpoint on ``[prometheus] host`` and
    ``port`` (not yet serving); ConfigurationError if it cannot listen."""
    host, port = CONF.prometheus.host, CONF.prometheus.port
    try:
        return PrometheusEndpoint(host, port, registry, health, before_scrape,
                                  details)
    except OSError as err:
        raise exception.ConfigurationError(
            f"cannot serve [prometheus] on {host}:{port}: {err.strerror or err}")
