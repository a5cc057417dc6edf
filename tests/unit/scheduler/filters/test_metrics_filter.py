"""MetricsFilter: hosts must report every metric of [metrics] weight_setting."""

from __future__ import annotations

from nova_sched.conf import CONF
from nova_sched.scheduler.filters.metrics_filter import MetricsFilter
from tests.unit.scheduler import fakes


def _metric(name, value=1.0):
    return {"name": name, "value": value, "timestamp": "2024-01-01T00:00:00Z",
            "source": "libvirt.LibvirtDriver"}


def _outcomes(setting, metrics_by_host):
    CONF.set_override("weight_setting", setting, "metrics")
    table = fakes.make_table([dict(host=h, metrics=m) for h, m in metrics_by_host.items()])
    spec = fakes.make_spec()
    flt = MetricsFilter()
    kept = {host for host, _ in fakes.passes(flt, table, spec)}
    return {table.states[r].host: table.states[r].host in kept
            for r in table.active_rows()}


def test_no_setting_passes_every_host():
    assert _outcomes([], {"a": [], "b": [_metric("cpu.frequency")]}) == {"a": True, "b": True}


def test_host_must_report_every_metric():
    # nova's test_metrics_filter_pass / _missing_metrics.
    setting = ["cpu.frequency=1", "numa.membw.current=2"]
    hosts = {
        "both": [_metric("cpu.frequency"), _metric("numa.membw.current", 3)],
        "one": [_metric("cpu.frequency")],
        "none": [],
        "more": [_metric("cpu.frequency"), _metric("numa.membw.current"),
                 _metric("cpu.percent")],
    }
    assert _outcomes(setting, hosts) == {"both": True, "one": False, "none": False,
                                         "more": True}


def test_spaces_around_names_are_ignored():
    assert _outcomes(["cpu.frequency = 1"], {"a": [_metric("cpu.frequency")]}) == {"a": True}


def test_malformed_entries_are_ignored():
    # nova's parse_options drops entries that are not name=number.
    setting = ["cpu.frequency", "cpu.percent=abc", "=1", "cpu.user.time=2"]
    hosts = {"a": [_metric("cpu.user.time")], "b": [_metric("cpu.frequency")]}
    assert _outcomes(setting, hosts) == {"a": True, "b": False}


def test_metric_without_a_numeric_value_does_not_count():
    # MetricsWeigher cannot weigh it, so the filter removes the host.
    hosts = {"str": [_metric("cpu.frequency", "fast")], "none": [_metric("cpu.frequency", None)],
             "bool": [_metric("cpu.frequency", True)], "int": [_metric("cpu.frequency", 0)],
             "junk": ["cpu.frequency", {"value": 1.0}]}
    assert _outcomes(["cpu.frequency=1"], hosts) == {
        "str": False, "none": False, "bool": False, "int": True, "junk": False}
