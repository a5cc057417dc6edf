"""The value nova's scheduler sees for a metric a compute node reported.

Every filter and weigher reads a node's metrics through here
(``HostState.numeric_metrics``), whichever source the node came from.

nova's compute stores each metric of a MonitorMetricList with the CPU
percentages divided by 100 (``MonitorMetric.to_dict``: the five names of
``FIELDS_REQUIRING_CONVERSION`` in nova/objects/monitor_metric.py), and
nova's scheduler reads them back with ``MonitorMetricList.from_json``,
which multiplies those five by 100, into MonitorMetric's ``value``, an
IntegerField, whose ``int()`` truncates every value: a stored 0.29 is seen
as 28 (0.29 x 100 is 28.999...), a ``cpu.frequency`` of 3000.7 as 3000.

A metric whose name nova's MonitorMetricType does not list would make
nova's scheduler fail to read the node's metrics at all; nova-sched reads
it as reported (an extension for compute nodes of its own).
"""

from __future__ import annotations

import math
from typing import Any

# nova.objects.fields.MonitorMetricType.ALL
NOVA_METRICS = frozenset({
    "cpu.frequency", "cpu.user.time", "cpu.kernel.time", "cpu.idle.time",
    "cpu.iowait.time", "cpu.user.percent", "cpu.kernel.percent",
    "cpu.idle.percent", "cpu.iowait.percent", "cpu.percent",
    "numa.membw.max", "numa.membw.current",
})
# nova.objects.monitor_metric.FIELDS_REQUIRING_CONVERSION
STORED_AS_FRACTIONS = frozenset({
    "cpu.user.percent", "cpu.kernel.percent", "cpu.idle.percent",
    "cpu.iowait.percent", "cpu.percent",
})


def scheduler_value(name: str, value: Any) -> float | None:
    """``value`` of metric ``name`` as nova's scheduler weighs it; None when
    it is not a finite number."""
    if (not isinstance(value, (int, float)) or isinstance(value, bool)
            or not math.isfinite(value)):
        return None
    if name in STORED_AS_FRACTIONS:
        return float(int(value * 100))
    if name in NOVA_METRICS:
        return float(int(value))
    return float(value)
