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

import itertools
import math

import numpy as np

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler import weights


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


def reported_metrics(host_state, names=None) -> dict[str, float]:
    """name -> value of the metrics a host reports with a numeric value
    (only those in ``names`` when given)."""
    found: dict[str, float] = {}
    for metric in host_state.metrics or ():
        if not isinstance(metric, dict):
            continue
        name = metric.get("name")
        if not isinstance(name, str) or (names is not None and name not in names):
            continue
        value = metric.get("value")
        if (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value)):
            found[name] = float(value)
    return found


class MetricsWeigher(weights.BaseHostWeigher):
    multiplier_group = "metrics"
    multiplier_option = "weight_multiplier"
    metadata_key = "metrics_weight_multiplier"

    def __init__(self):
        # A bad setting stops the daemon at start-up, not a request later.
        self._parsed_from: tuple | None = None
        self._parsed: tuple[tuple[str, float], ...] = ()
        self._names: frozenset[str] = frozenset()
        self._setting()

    def _setting(self) -> tuple[tuple[str, float], ...]:
        current = tuple(CONF.metrics.weight_setting)
        if current != self._parsed_from:
            self._parsed = tuple(parse_weight_setting(current))
            self._names = frozenset(name for name, _ in self._parsed)
            self._parsed_from = current
        return self._parsed

    def _weigh_object(self, host_state, spec) -> float:
        setting = self._setting()
        return self._weigh(host_state, setting, self._names,
                           self.weight_multiplier(host_state), *self._missing())

    def weigh_all(self, table, rows, spec):
        setting = self._setting()
        if not setting:
            return np.zeros(len(rows), dtype=np.float64)
        names = self._names
        required, unavailable = self._missing()
        multipliers = self.multipliers(table, rows)
        if np.ndim(multipliers) == 0:
            multipliers = itertools.repeat(float(multipliers))
        else:
            multipliers = multipliers.tolist()
        states = table.states
        return np.fromiter(
            (self._weigh(states[r], setting, names, m, required, unavailable)
             for r, m in zip(rows.tolist(), multipliers)),
            dtype=np.float64,
            count=len(rows),
        )

    @staticmethod
    def _missing() -> tuple[bool, float]:
        return CONF.metrics.required, CONF.metrics.weight_of_unavailable

    @staticmethod
    def _weigh(host_state, setting, names, multiplier: float, required: bool,
               unavailable: float) -> float:
        metrics = reported_metrics(host_state, names)
        value = 0.0
        for name, ratio in setting:
            if name in metrics:
                value += metrics[name] * ratio
            elif required:
                raise ComputeHostMetricNotFound(host_state.host, host_state.nodename,
                                                name)
            elif ratio * multiplier != 0:
                # Last among the hosts, unless this metric cannot matter.
                return unavailable
        return value
