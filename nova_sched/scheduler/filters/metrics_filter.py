"""MetricsFilter: hosts that report every metric MetricsWeigher weighs."""

from __future__ import annotations

import math

from nova_sched.conf import CONF
from nova_sched.scheduler import filters
from nova_sched.scheduler.cloud import alike_hosts


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


class MetricsFilter(filters.BaseHostFilter):
    """Filter out hosts that lack a metric of ``[metrics] weight_setting`` (nova's).

    A metric counts when the host reports it (an entry of its ``metrics``
    list with that ``name``) with a numeric ``value``, so that
    MetricsWeigher can weigh every host this filter keeps. With no
    weight_setting every host passes.
    """

    def filter_all(self, cycle, rows):
        wanted = _wanted_metrics()
        if not wanted:
            return filters.everyone(rows)
        # Nodes reporting the same metric names are one kind.
        kinds = cycle.table.kinds
        codes = cycle.table.pick(kinds.codes(_KIND, _reported), rows)
        return alike_hosts.judge_kinds(rows, codes, kinds.values(_KIND),
                                       lambda names: wanted <= names)


_KIND = "metrics_filter.reported_names"


def _reported(host_state) -> frozenset[str]:
    """Names of the metrics the node reports with a numeric value."""
    return frozenset(host_state.numeric_metrics())
