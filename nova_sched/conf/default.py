"""Options of the [DEFAULT] group (CONTRACT section 2)."""

from __future__ import annotations

import socket

from oslo_config import cfg

default_opts = [
    cfg.StrOpt(
        "host",
        default=socket.gethostname(),
        sample_default="<hostname>",
        help="Name of this scheduler host. The RPC server listens on "
        "Target(topic=scheduler_topic, server=host) and notifications are "
        "published as scheduler.<host>.",
    ),
    cfg.StrOpt(
        "scheduler_topic",
        default="scheduler",
        help="RPC topic the scheduler daemons consume. Several daemons on one "
        "broker are competing consumers of this topic.",
    ),
    cfg.StrOpt(
        "compute_topic",
        default="compute",
        help="RPC topic compute nodes listen on; run_instance is cast to "
        "<compute_topic>.<host>.",
    ),
    cfg.IntOpt(
        "service_down_time",
        default=60,
        min=1,
        help="Seconds since a compute node's last report after which it is "
        "considered down and ComputeFilter removes it.",
    ),
    cfg.StrOpt(
        "default_availability_zone",
        default="nova",
        help="Availability zone of hosts that are in no aggregate with "
        "availability_zone metadata.",
    ),
    cfg.StrOpt(
        "state_path",
        default="/var/lib/nova-sched",
        help="Directory for the scheduler's state, such as the default SQLite "
        "database.",
    ),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(default_opts)


def list_opts():
    return {"DEFAULT": default_opts}
