"""MetricsWeigher: weight_setting, required, weight_of_unavailable."""

from __future__ import annotations

import numpy as np
import oslo_messaging as messaging
import pytest
import sqlalchemy as sa

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.db import models
from nova_sched.scheduler import weights
from nova_sched.scheduler.weights import metrics
from nova_sched.scheduler.weights.metrics import MetricsWeigher
from tests.unit.scheduler import fakes
from tests.unit.scheduler.conftest import boot_request, compute_report

IDLE, KERNEL, USER = "cpu.idle.time", "cpu.kernel.time", "cpu.user.time"


def _m(pairs):
    return [{"name": n, "value": v, "source": "fake"} for n, v in pairs]


def _table(aggregates=()):
    # nova's metrics weigher hosts.
    return fakes.make_table([
        dict(host="host1", metrics=_m([(IDLE, 512), (KERNEL, 1)])),
        dict(host="host2", metrics=_m([(IDLE, 1024), (KERNEL, 2)])),
        dict(host="host3", metrics=_m([(IDLE, 3072), (KERNEL, 1)])),
        dict(host="host4", metrics=_m([(IDLE, 8192), (KERNEL, 0)])),
        dict(host="host5", metrics=_m([(IDLE, 768), (KERNEL, 0), (USER, 1)])),
        dict(host="host6", metrics=_m([(IDLE, 2048), (KERNEL, 0), (USER, 2)])),
    ], aggregates)


def _weigh(setting, table=None):
    CONF.set_override("weight_setting", setting, "metrics")
    table = table or _table()
    rows = table.active_rows()
    result = weights.HostWeightHandler.weigh([MetricsWeigher()],
                                             fakes.cycle(table, fakes.make_spec()), rows)
    return [table.states[r].host for r in result.rows], result


def _raw(table, host, weigher=None):
    """The raw weight of one host, asked as the scheduler asks (weigh_rows)."""
    rows = np.array([table.row_of(host, host)])
    (value,) = fakes.weigh(weigher or MetricsWeigher(), table, fakes.make_spec(),
                           rows=rows)
    return value


# -- weighing (nova's cases) --------------------------------------------------


def test_single_metric():
    hosts, result = _weigh([f"{IDLE}=1"])
    assert hosts[0] == "host4" and result.totals[0] == 1.0


def test_several_metrics():
    # idle * 0.0001 + kernel: host2 (0.1024 + 2) wins.
    hosts, result = _weigh([f"{IDLE}=0.0001", f"{KERNEL}=1"])
    assert hosts[0] == "host2" and result.totals[0] == 1.0


def test_a_metric_named_twice_counts_twice():
    # idle * (-2 + 1): the host with the least idle time wins.
    hosts, result = _weigh([f"{IDLE}=-2", f"{IDLE}=1"])
    assert hosts[0] == "host1" and result.totals[0] == 1.0


def test_negative_ratio():
    hosts, _ = _weigh([f"{IDLE}=-1"])
    assert hosts == ["host1", "host5", "host2", "host6", "host3", "host4"]


def test_empty_setting_weighs_nothing():
    hosts, result = _weigh([])
    assert hosts == [f"host{i}" for i in range(1, 7)]
    assert not result.totals.any()


def test_weight_multiplier_scales_and_flips():
    CONF.set_override("weight_multiplier", -2.0, "metrics")
    hosts, result = _weigh([f"{IDLE}=1"])
    assert hosts[0] == "host1" and result.totals[-1] == -2.0


def test_whitespace_around_names_and_ratios():
    hosts, _ = _weigh([f" {IDLE} = 0.0001 ", f"{KERNEL}= 1"])
    assert hosts[0] == "host2"


# -- missing metrics ----------------------------------------------------------


def test_required_metric_missing_fails_the_request():
    assert CONF.metrics.required is True
    with pytest.raises(metrics.ComputeHostMetricNotFound) as err:
        _weigh([f"{IDLE}=1", f"{USER}=2"])
    assert isinstance(err.value, exception.NoValidHost)
    message = err.value.message
    assert "host1" in message and repr(USER) in message
    assert "MetricsFilter" in message and "required" in message


def test_required_metric_missing_on_a_host_without_metrics():
    table = fakes.make_table([dict(host="host1", metrics=[]), dict(host="host2")])
    with pytest.raises(metrics.ComputeHostMetricNotFound):
        _weigh([f"{IDLE}=1"], table)


def test_required_only_counts_the_candidates():
    # Hosts the filters removed are not weighed: no error for them.
    CONF.set_override("weight_setting", [f"{USER}=1"], "metrics")
    table = _table()
    rows = np.array([table.row_of("host5", "host5"), table.row_of("host6", "host6")])
    result = weights.HostWeightHandler.weigh([MetricsWeigher()],
                                             fakes.cycle(table, fakes.make_spec()), rows)
    assert [table.states[r].host for r in result.rows] == ["host6", "host5"]


def test_not_required_missing_metric_weighs_weight_of_unavailable():
    # nova's test_metric_not_found_non_required: host5 wins, the hosts
    # without cpu.user.time weigh -10000 and come last.
    CONF.set_override("required", False, "metrics")
    hosts, result = _weigh([f"{IDLE}=0.0001", f"{USER}=-1"])
    assert hosts[0] == "host5" and result.totals[0] == 1.0
    assert set(hosts[2:]) == {"host1", "host2", "host3", "host4"}
    weigher = MetricsWeigher()
    table = _table()
    assert _raw(table, "host1", weigher) == -10000.0
    CONF.set_override("weight_of_unavailable", -1.0, "metrics")
    assert _raw(table, "host1", weigher) == -1.0


def test_not_required_missing_metric_with_ratio_zero_is_skipped():
    CONF.set_override("required", False, "metrics")
    CONF.set_override("weight_setting", [f"{IDLE}=1", f"{USER}=0"], "metrics")
    assert _raw(_table(), "host4") == 8192.0


def test_not_required_missing_metric_with_multiplier_zero_is_skipped():
    CONF.set_override("required", False, "metrics")
    CONF.set_override("weight_multiplier", 0.0, "metrics")
    CONF.set_override("weight_setting", [f"{IDLE}=1", f"{USER}=1"], "metrics")
    assert _raw(_table(), "host4") == 8192.0


@pytest.mark.parametrize("reported", [
    [{"name": IDLE, "value": "fast"}],
    [{"name": IDLE, "value": None}],
    [{"name": IDLE, "value": True}],
    [{"name": IDLE, "value": float("nan")}],
    [{"name": IDLE}],
    [{"value": 5}],
    ["cpu.idle.time=5"],
    None,
])
def test_malformed_reported_metrics_count_as_missing(reported):
    CONF.set_override("weight_setting", [f"{IDLE}=1"], "metrics")
    table = fakes.make_table([dict(host="h", metrics=reported)])
    with pytest.raises(metrics.ComputeHostMetricNotFound):
        _raw(table, "h")
    CONF.set_override("required", False, "metrics")
    assert _raw(table, "h") == -10000.0


# -- parsing weight_setting ---------------------------------------------------


@pytest.mark.parametrize("setting, expected", [
    ([], []),
    ([f"{IDLE}=1"], [(IDLE, 1.0)]),
    ([f"{IDLE}=1", f"{KERNEL}=-2.1"], [(IDLE, 1.0), (KERNEL, -2.1)]),
    ([f"{IDLE} = 1e-4"], [(IDLE, 0.0001)]),
    ([f"{IDLE}=1", f"{IDLE}=2"], [(IDLE, 1.0), (IDLE, 2.0)]),
])
def test_parse_weight_setting(setting, expected):
    assert metrics.parse_weight_setting(setting) == expected


@pytest.mark.parametrize("bad", [
    f"{IDLE}=a1",       # not a number
    IDLE,               # no ratio
    "=5",               # no name
    f"{KERNEL} = 2.0t",
    f"{IDLE}=",
    f"{IDLE}=nan",
    f"{IDLE}=inf",
])
def test_bad_settings_are_configuration_errors(bad):
    # nova logs and ignores such entries; here the daemon refuses to start.
    with pytest.raises(exception.ConfigurationError) as err:
        metrics.parse_weight_setting([f"{KERNEL}=-2.1", bad])
    assert "[metrics] weight_setting" in err.value.message
    assert repr(bad) in err.value.message
    assert repr(f"{KERNEL}=-2.1") not in err.value.message


def test_a_bad_setting_fails_when_the_weigher_is_loaded():
    CONF.set_override("weight_setting", [f"{IDLE}=1", "oops"], "metrics")
    with pytest.raises(exception.ConfigurationError):
        weights.HostWeightHandler().get_weighers(["MetricsWeigher"])


def test_the_setting_is_read_for_each_decision():
    weigher = MetricsWeigher()
    table = _table()
    assert _raw(table, "host4", weigher) == 0.0
    CONF.set_override("weight_setting", [f"{IDLE}=2"], "metrics")
    assert _raw(table, "host4", weigher) == 16384.0
    CONF.set_override("required", False, "metrics")
    CONF.set_override("weight_setting", [f"{USER}=1"], "metrics")
    assert _raw(table, "host4", weigher) == -10000.0


def test_the_setting_is_prepared_once_per_decision():
    # What prepare read holds for the whole decision.
    CONF.set_override("weight_setting", [f"{IDLE}=1"], "metrics")
    weigher = MetricsWeigher()
    table = _table()
    cycle = fakes.cycle(table, fakes.make_spec())
    rows = table.active_rows()
    first = weigher.weigh_rows(cycle, rows)
    CONF.set_override("weight_setting", [f"{IDLE}=2"], "metrics")
    np.testing.assert_array_equal(weigher.weigh_rows(cycle, rows), first)
    # The next decision reads the new setting.
    np.testing.assert_array_equal(
        weigher.weigh_rows(fakes.cycle(table, fakes.make_spec()), rows), 2 * first)


def test_the_weigher_keeps_no_state_of_its_own():
    # Everything a decision reads lives on the cycle (and the host's report).
    weigher = MetricsWeigher()
    assert vars(weigher) == {}


def test_the_first_candidate_lacking_a_metric_is_named():
    CONF.set_override("weight_setting", [f"{IDLE}=1", f"{USER}=1", "gpu.load=1"],
                      "metrics")
    table = _table()
    rows = table.active_rows()[[4, 2, 0]]  # host5 has all but gpu.load
    with pytest.raises(metrics.ComputeHostMetricNotFound) as err:
        fakes.weigh(MetricsWeigher(), table, fakes.make_spec(), rows=rows)
    assert "host5" in err.value.message and "'gpu.load'" in err.value.message
    with pytest.raises(metrics.ComputeHostMetricNotFound) as err:
        fakes.weigh(MetricsWeigher(), table, fakes.make_spec(), rows=rows[1:])
    assert "host3" in err.value.message and repr(USER) in err.value.message


def test_a_new_report_brings_new_metrics():
    CONF.set_override("weight_setting", [f"{IDLE}=1"], "metrics")
    table = _table()
    assert _raw(table, "host4") == 8192.0
    fakes.add_node(table, "host4", metrics=_m([(IDLE, 5)]))
    assert _raw(table, "host4") == 5.0


# -- per-aggregate multiplier -------------------------------------------------


def test_multiplier_from_the_option_and_aggregates():
    # nova's test_metrics_weigher_multiplier: the key is metrics_weight_multiplier.
    CONF.set_override("weight_multiplier", -1.0, "metrics")
    weigher = MetricsWeigher()
    table = _table()
    assert weigher.weight_multiplier(fakes.state(table, "host1")) == -1.0
    table = _table([dict(hosts=["host1"], metadata={"metrics_weight_multiplier": "2"})])
    assert weigher.weight_multiplier(fakes.state(table, "host1")) == 2.0
    table = _table([
        dict(hosts=["host1"], metadata={"metrics_weight_multiplier": "2"}),
        dict(hosts=["host1"], metadata={"metrics_weight_multiplier": "1.5"}),
    ])
    assert weigher.weight_multiplier(fakes.state(table, "host1")) == 1.5
    table = _table([dict(hosts=["host1"], metadata={"metrics_weight_multiplier": "x"})])
    assert weigher.weight_multiplier(fakes.state(table, "host1")) == -1.0
    # The option's own name is not the aggregate key.
    table = _table([dict(hosts=["host1"], metadata={"weight_multiplier": "5"})])
    assert weigher.weight_multiplier(fakes.state(table, "host1")) == -1.0


def test_host_with_aggregate():
    # nova's test_host_with_agg.
    table = _table([dict(hosts=[f"host{i}" for i in range(1, 7)],
                         metadata={"metrics_weight_multiplier": "1.5"})])
    hosts, result = _weigh([f"{IDLE}=0.0001", f"{KERNEL}=1"], table)
    assert hosts[0] == "host2" and result.totals[0] == 1.5


def test_aggregate_multiplier_zero_skips_a_missing_metric_for_its_hosts():
    CONF.set_override("required", False, "metrics")
    table = _table([dict(hosts=["host1"], metadata={"metrics_weight_multiplier": "0"})])
    CONF.set_override("weight_setting", [f"{IDLE}=1", f"{USER}=1"], "metrics")
    rows = table.active_rows()
    raw = fakes.weigh(MetricsWeigher(), table, fakes.make_spec())
    by_host = {table.states[r].host: v for r, v in zip(rows, raw)}
    assert by_host["host1"] == 512.0          # its multiplier is 0
    assert by_host["host2"] == -10000.0       # the option's is 1
    assert by_host["host5"] == 769.0


# -- through the scheduler ------------------------------------------------------


def _fault_messages(uuid):
    with db_api.session_scope() as s:
        return s.execute(sa.select(models.InstanceFault.message).where(
            models.InstanceFault.instance_uuid == uuid)).scalars().all()


def _vm_state(uuid):
    with db_api.session_scope() as s:
        return s.execute(sa.select(models.Instance.vm_state).where(
            models.Instance.uuid == uuid)).scalar_one()


def test_a_missing_required_metric_fails_the_request_not_the_daemon(manager, ctxt):
    CONF.set_override("weight_setting", ["cpu.percent=-1"], "metrics")
    for host in ("c1", "c2"):
        manager.compute_node_update(ctxt, compute_report(host))  # no metrics
    spec = boot_request()
    manager.run_instance(ctxt, spec, "pw", [], None, True, {})
    uuid = spec["instance_uuids"][0]
    assert _vm_state(uuid) == "error"
    (fault,) = _fault_messages(uuid)
    assert "cpu.percent" in fault and "c1" in fault
    assert manager.cycle.compute_api.casts == []

    # select_destinations answers NoValidHost (all or nothing) with the reason.
    with pytest.raises(messaging.ExpectedException) as err:
        manager.select_destinations(ctxt, boot_request(count=2), {})
    assert isinstance(err.value.exc_info[1], metrics.ComputeHostMetricNotFound)

    # Once the nodes report the metric, the next request is placed: the
    # lowest cpu.percent wins.
    for host, percent in (("c1", 60.0), ("c2", 12.5)):
        manager.compute_node_update(ctxt, compute_report(
            host, metrics=[{"name": "cpu.percent", "value": percent, "source": "fake"}]))
    spec = boot_request()
    manager.run_instance(ctxt, spec, "pw", [], None, True, {})
    assert [c["host"] for c in manager.cycle.compute_api.casts] == ["c2"]


def test_a_single_candidate_lacking_a_required_metric_is_placed(manager, ctxt):
    # nova's rule: one host left after filtering is not weighed, so
    # MetricsWeigher cannot fail the request.
    CONF.set_override("weight_setting", ["cpu.percent=-1"], "metrics")
    manager.compute_node_update(ctxt, compute_report("c1"))  # no metrics
    spec = boot_request()
    manager.run_instance(ctxt, spec, "pw", [], None, True, {})
    assert _vm_state(spec["instance_uuids"][0]) != "error"
    assert [c["host"] for c in manager.cycle.compute_api.casts] == ["c1"]
