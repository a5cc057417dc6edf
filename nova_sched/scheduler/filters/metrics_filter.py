"""MetricsFilter: hosts that report every metric MetricsWeigher weighs."""

from __future__ import annotations

import logging
import math

import numpy as np

from nova_sched.conf import CONF
from nova_sched.scheduler import filters

LOG = logging.getLogger(__name__)


def _wanted_metrics() -> frozenset[str]:
    """Metric names of ``[metrics] weight_setting``.

    As nova's parse_options, entries that are not ``name=number`` are
    ignored here (MetricsWeigher reports them as a configuration error).
    """
    names = set()
    for item in CONF.metrics.weight_setting:
        name, sep, ratio = str(item).partition("=")
        try:
            number = float(ratio)
        except ValueError:
            continue
        if sep and name.strip() and math.isfinite(number):
            names.add(name.strip())
    return frozenset(names)


def _reported(host_state) -> set[str]:
    """Names of the metrics the host reports with a numeric value."""
    names = set()
    for metric in host_state.metrics or ():
        if not isinstance(metric, dict):
            continue
        name, value = metric.get("name"), metric.get("value")
        if (isinstance(name, str) and isinstance(value, (int, float))
                and not isinstance(value, bool) and math.isfinite(value)):
            names.add(name)
    return names


class MetricsFilter(filters.BaseHostFilter):
    """Filter out hosts that lack a metric of ``[metrics] weight_setting`` (nova's).

    A metric counts when the host reports it (an entry of its ``metrics``
    list with that ``name``) with a numeric ``value``, so that
    MetricsWeigher can weigh every host this filter keeps. With no
    weight_setting every host passes.
    """

    def _passes(self, host_state, wanted) -> bool:
        missing = wanted - _reported(host_state)
        if missing:
            LOG.debug("%s does not have the following metrics: %s",
                      host_state, ", ".join(sorted(missing)))
            return False
        return True

    def host_passes(self, host_state, spec) -> bool:
        wanted = _wanted_metrics()
        return not wanted or self._passes(host_state, wanted)

    def filter_all(self, table, rows, spec):
        wanted = _wanted_metrics()
        if not wanted:
            return np.ones(len(rows), dtype=bool)
        states = table.states
        return np.fromiter((self._passes(states[r], wanted) for r in rows),
                           dtype=bool, count=len(rows))
