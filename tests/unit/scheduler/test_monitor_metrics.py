"""Metric values as nova's scheduler sees them, from either source.

nova's compute stores the five CPU percentages of
FIELDS_REQUIRING_CONVERSION (nova/objects/monitor_metric.py) as fractions;
MonitorMetricList.from_json multiplies them back by 100 into an
IntegerField, which truncates every value.
"""

from __future__ import annotations

import pytest

from nova_sched.conf import CONF
from nova_sched.scheduler.cloud import monitor_metrics
from nova_sched.scheduler.cloud.host_state import HostTable
from nova_sched.scheduler.weights.metrics import MetricsWeigher
from tests.unit.scheduler import fakes


@pytest.mark.parametrize("name,stored,seen", [
    ("cpu.percent", 0.29, 28.0),        # 0.29 x 100 = 28.999...: truncated
    ("cpu.percent", 0.8, 80.0),
    ("cpu.user.percent", 0.125, 12.0),
    ("cpu.kernel.percent", 0.0, 0.0),
    ("cpu.idle.percent", 0.999, 99.0),
    ("cpu.iowait.percent", 1.0, 100.0),
    ("cpu.frequency", 3000.7, 3000.0),   # IntegerField: int() of every value
    ("cpu.user.time", 26728850000, 26728850000.0),
    ("numa.membw.current", 12.9, 12.0),
    ("my.own.metric", 0.29, 0.29),       # not nova's: read as reported
])
def test_a_stored_metric_is_what_novas_scheduler_sees(name, stored, seen):
    assert monitor_metrics.scheduler_value(name, stored) == seen


@pytest.mark.parametrize("value", ["50", None, True, float("nan"), float("inf")])
def test_values_that_are_not_finite_numbers_are_not_metrics(value):
    assert monitor_metrics.scheduler_value("cpu.percent", value) is None


def test_metrics_weigher_weighs_percentages_as_nova_does():
    """[metrics] weight_setting = cpu.percent=-1.0, cpu.frequency=0.01: a
    node storing cpu.percent 0.8 and cpu.frequency 3000 weighs
    -1.0 x 80 + 0.01 x 3000 = -50 before normalisation (nova), not
    -0.8 + 30 = 29.2 (the stored fraction)."""
    CONF.set_override("weight_setting", ["cpu.percent=-1.0", "cpu.frequency=0.01"],
                      "metrics")
    table = HostTable()
    fakes.add_node(table, "busy", metrics=[
        {"name": "cpu.percent", "value": 0.8}, {"name": "cpu.frequency", "value": 3000}])
    fakes.add_node(table, "idle", metrics=[
        {"name": "cpu.percent", "value": 0.29}, {"name": "cpu.frequency", "value": 2000}])
    weigher = MetricsWeigher()
    spec = fakes.make_spec()
    by_host = {table.states[r].host: weigher._weigh_object(table.states[r], spec)
               for r in table.active_rows()}
    assert by_host == {"busy": pytest.approx(-50.0), "idle": pytest.approx(-8.0)}
