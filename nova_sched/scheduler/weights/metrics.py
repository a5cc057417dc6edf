"""MetricsWeigher: by a weighted sum of the metrics compute nodes report.

``[metrics] weight_setting`` names the metrics and their ratios, as
``name=ratio`` pairs: ``cpu.percent=-1.0, cpu.frequency=0.5`` weighs a host
as ``-1.0 * cpu.percent + 0.5 * cpu.frequency``. A metric named twice
counts twice. ``[metrics] weight_multiplier`` scales the result; a host
aggregate's ``metrics_weight_multiplier`` metadata overrides it for its
hosts (the smallest value winning), as in nova.

A host that does not report a metric of the setting (or reports it with
a value that is not a number) fails the request when ``[metrics] required``
is True, as in nova; enable MetricsFilter to remove such hosts first. With
``required = False`` such a host weighs ``weight_of_unavailable`` instead,
unless the missing metric's ratio or the host's multiplier is 0.

Unlike nova, which logs and ignores malformed entries of weight_setting, a
malformed entry is a configuration error: the daemon refuses to start.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler import weights

# The group's handle, kept (see nova_sched.conf).
_METRICS = CONF.metrics


class ComputeHostMetricNotFound(exception.NoValidHost):
    """A candidate host lacks a metric that ``[metrics] required`` demands."""

    def __init__(self, host: str, node: str, name: str):
        super().__init__(
            f"MetricsWeigher: host {host} (node {node}) reports no metric "
            f"{name!r} of [metrics] weight_setting, and [metrics] required is "
            "True; enable MetricsFilter to remove such hosts, or set "
            "required = False to weigh them with weight_of_unavailable."
        )


def parse_weight_setting(setting) -> list[tuple[str, float]]:
    """``['name=ratio', ...]`` as ``[(name, ratio), ...]``.

    Raises ConfigurationError naming every entry that is not a metric
    name, ``=`` and a finite number.
    """
    parsed: list[tuple[str, float]] = []
    bad: list[str] = []
    for item in setting:
        name, sep, ratio = str(item).partition("=")
        name = name.strip()
        try:
            value = float(ratio)
        except ValueError:
            value = math.nan
        if sep and name and math.isfinite(value):
            parsed.append((name, value))
        else:
            bad.append(str(item))
    if bad:
        raise exception.ConfigurationError(
            "[metrics] weight_setting: " + ", ".join(repr(b) for b in bad)
            + " not of the form name=ratio (a metric name and a number, "
            "for example cpu.percent=-1.0)"
        )
    return parsed


@dataclasses.dataclass(frozen=True)
class _Prepared:
    """The ``[metrics]`` options as one decision reads them."""

    setting: tuple[tuple[str, float], ...]
    required: bool
    weight_of_unavailable: float


_METRIC = "metrics_weigher.value"


def _metric(name: str):
    """A node's reported value of metric ``name``; NaN when it has none."""
    return lambda host_state: host_state.numeric_metrics().get(name, math.nan)


class MetricsWeigher(weights.BaseHostWeigher):
    """nova's MetricsWeigher: the sum of ``ratio x value`` over weight_setting."""

    multiplier_group = "metrics"
    multiplier_option = "weight_multiplier"
    metadata_key = "metrics_weight_multiplier"

    def __init__(self):
        # A malformed setting stops the daemon at start-up, not a request later.
        parse_weight_setting(CONF.metrics.weight_setting)

    def prepare(self, cycle) -> _Prepared:
        # Read per decision: an override of the options applies to the next one.
        metrics = _METRICS
        return _Prepared(
            setting=tuple(parse_weight_setting(metrics.weight_setting)),
            required=metrics.required,
            weight_of_unavailable=float(metrics.weight_of_unavailable),
        )

    def weigh_all(self, cycle, rows):
        prepared: _Prepared = cycle.prepared(self)
        setting = prepared.setting
        if not setting:
            return 0.0  # every host alike
        states = cycle.table.states
        # Each metric's values are a kind the host table keeps per report:
        # NaN where the host does not report it (reported values are finite).
        kinds = cycle.table.kinds
        values = [cycle.table.pick(kinds.numbers((_METRIC, name), _metric(name)), rows)
                  for name, _ in setting]
        missing = [np.isnan(column) for column in values]
        lacking = [bool(column.any()) for column in missing]
        if prepared.required and any(lacking):
            # nova's order: the first candidate lacking a metric, and its
            # first missing entry of the setting.
            i = int(np.argmax(np.logical_or.reduce(missing)))
            j = next(j for j, column in enumerate(missing) if column[i])
            state = states[int(rows[i])]
            raise ComputeHostMetricNotFound(state.host, state.nodename, setting[j][0])
        multipliers = self.multipliers(cycle, rows)
        weight = np.zeros(len(rows), dtype=np.float64)
        unavailable = None
        # Entry by entry, in the setting's order, so each host's sum adds up
        # in the order nova's loop adds it.
        for j, (_, ratio) in enumerate(setting):
            if not lacking[j]:
                weight += values[j] * ratio
                continue
            weight += np.where(missing[j], 0.0, values[j] * ratio)
            # A missing metric puts the host last, unless it cannot matter
            # (its ratio or the host's multiplier is 0).
            cannot_matter = np.asarray(ratio * multipliers) == 0
            hit = missing[j] & ~cannot_matter
            unavailable = hit if unavailable is None else unavailable | hit
        if unavailable is None:
            return weight
        return np.where(unavailable, prepared.weight_of_unavailable, weight)
