"""Options of the [metrics] group: MetricsFilter and MetricsWeigher."""

from __future__ import annotations

from oslo_config import cfg

metrics_group = cfg.OptGroup(
    "metrics",
    title="Metrics",
    help="Weighing hosts by the metrics their compute nodes report.",
)

metrics_opts = [
    cfg.FloatOpt(
        "weight_multiplier",
        default=1.0,
        help="MetricsWeigher multiplier: positive prefers hosts whose "
        "weighted metrics sum is high, negative low.",
    ),
    cfg.ListOpt(
        "weight_setting",
        default=[],
        help="Metrics to weigh and their ratios, as 'name=ratio' pairs, for "
        "example 'cpu.percent=-1.0, cpu.frequency=0.5'. MetricsFilter "
        "removes hosts that do not report every metric named here.",
    ),
    cfg.BoolOpt(
        "required",
        default=True,
        help="MetricsWeigher: when a host lacks a metric of weight_setting, "
        "raise an error (True: the request fails) or use "
        "weight_of_unavailable for that host (False).",
    ),
    cfg.FloatOpt(
        "weight_of_unavailable",
        default=-10000.0,
        help="MetricsWeigher: weight of a host missing a metric when "
        "required is False.",
    ),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(metrics_group)
    conf.register_opts(metrics_opts, group=metrics_group)


def list_opts():
    return {metrics_group: metrics_opts}
