"""Options of the [prometheus] group: the daemon's metrics and health endpoint."""

from __future__ import annotations

from oslo_config import cfg

prometheus_group = cfg.OptGroup(
    "prometheus",
    title="Prometheus metrics and health",
    help="An HTTP endpoint in the daemon serving Prometheus metrics on "
    "/metrics and the daemon's health on /healthz.",
)

prometheus_opts = [
    cfg.BoolOpt(
        "enabled",
        default=False,
        help="Serve /metrics and /healthz over HTTP. With [scheduler] "
        "workers > 1 the parent process serves them, with every worker's "
        "figures added up.",
    ),
    cfg.HostAddressOpt(
        "host",
        default="127.0.0.1",
        help="Address to listen on. The endpoint has no authentication: "
        "listen on a management network or loopback only.",
    ),
    cfg.PortOpt(
        "port",
        default=9480,
        help="TCP port to listen on.",
    ),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(prometheus_group)
    conf.register_opts(prometheus_opts, group=prometheus_group)


def list_opts():
    return {prometheus_group: prometheus_opts}
