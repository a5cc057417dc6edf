"""Options of the [scheduler] group."""

from __future__ import annotations

from oslo_config import cfg

scheduler_group = cfg.OptGroup(
    "scheduler", title="Scheduler", help="The scheduler daemon and its driver."
)

scheduler_opts = [
    cfg.StrOpt(
        "driver",
        default="filter_scheduler",
        deprecated_name="scheduler_driver",
        deprecated_group="DEFAULT",
        help="Scheduler driver: 'filter_scheduler' (filters, then weighers), "
        "'chance_scheduler' (a random host that is up and fits), or the "
        "dotted path of a class derived from "
        "nova_sched.scheduler.driver.Scheduler.",
    ),
    cfg.IntOpt(
        "max_attempts",
        default=3,
        min=1,
        deprecated_name="scheduler_max_attempts",
        deprecated_group="DEFAULT",
        help="Times an instance is scheduled before it is put into ERROR: a "
        "compute node that fails a build sends it back for another host "
        "until this many hosts were tried. 1 disables rescheduling.",
    ),
    cfg.IntOpt(
        "workers",
        default=1,
        min=1,
        help="Processes consuming the scheduler topic on this host. They "
        "share the database and stay correct together through claims.",
    ),
    cfg.IntOpt(
        "request_threads",
        default=8,
        min=1,
        help="Threads per process that handle requests taken from the "
        "scheduler topic (compute reports are handled on the consumer "
        "thread itself). Keep it below the database connection pool "
        "(SQLAlchemy's: 5 connections plus 10 more under load) so that no "
        "request waits for a connection. A daemon holds at most [oslo_messaging_rabbit] "
        "rabbit_qos_prefetch_count messages unacknowledged; the others wait "
        "in the broker's queue.",
    ),
    cfg.IntOpt(
        "scheduling_timeout",
        default=300,
        min=1,
        help="Seconds after which an instance still being scheduled (no "
        "host yet, or a host it was never cast to: its request was lost with "
        "a daemon and not delivered again) is recovered by any live daemon: "
        "its partial claims released, then scheduled again from the request "
        "stored with it, or put into ERROR with a fault when that request "
        "carried an admin password or injected files, which are never "
        "stored.",
    ),
    cfg.IntOpt(
        "periodic_task_interval",
        default=30,
        min=1,
        help="Seconds between runs of the daemon's periodic tasks (recovery "
        "of stuck instances, full host-state resynchronisation).",
    ),
    cfg.IntOpt(
        "host_state_resync_interval",
        default=300,
        min=1,
        help="Seconds between full reloads of the in-memory host states from "
        "the database. Between them only changed rows are read.",
    ),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(scheduler_group)
    conf.register_opts(scheduler_opts, group=scheduler_group)


def list_opts():
    return {scheduler_group: scheduler_opts}
