"""Weighers and their handler: normalisation, ordering, loading."""

from __future__ import annotations

import numpy as np
import pytest

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler import weights
from nova_sched.scheduler.weights.build_failure import BuildFailureWeigher
from nova_sched.scheduler.weights.cpu import CPUWeigher
from nova_sched.scheduler.weights.disk import DiskWeigher
from nova_sched.scheduler.weights.metrics import ComputeHostMetricNotFound, MetricsWeigher
from nova_sched.scheduler.weights.ram import RAMWeigher
from tests.unit.scheduler import fakes

# -- normalize ---------------------------------------------------------------


@pytest.mark.parametrize("values, expected, minval, maxval", [
    # nova's test_normalization table.
    ((), (), None, None),
    ((0.0, 0.0), (0.0, 0.0), None, None),
    ((1.0, 1.0), (0.0, 0.0), None, None),
    ((20.0, 50.0), (0.0, 1.0), None, None),
    ((20.0, 50.0), (0.0, 0.375), None, 100.0),
    ((20.0, 50.0), (0.4, 1.0), 0.0, None),
    ((20.0, 50.0), (0.2, 0.5), 0.0, 100.0),
    # Values beyond minval/maxval are clamped first (nova's weigh_objects).
    ((-512.0, 512.0, 8192.0), (0.0, 0.0625, 1.0), 0.0, None),
    ((-5.0, -3.0), (0.0, 0.0), 0.0, None),
    ((50.0, 150.0), (0.5, 1.0), 0.0, 100.0),
    # All equal to minval, or all equal without bounds: zeros.
    ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0), 0.0, None),
    ((7.0,), (0.0,), None, None),
    # All equal but above minval: the range still starts at minval.
    ((1000.0, 1000.0), (1.0, 1.0), 0.0, None),
])
def test_normalize(values, expected, minval, maxval):
    result = weights.normalize(np.array(values, dtype=np.float64), minval, maxval)
    assert isinstance(result, np.ndarray)
    assert result.dtype == np.float64
    np.testing.assert_allclose(result, np.array(expected, dtype=np.float64))


def test_normalize_accepts_integer_arrays_and_lists():
    np.testing.assert_allclose(weights.normalize(np.array([1, 3])), [0.0, 1.0])
    np.testing.assert_allclose(weights.normalize([2, 4], 0), [0.5, 1.0])


def test_normalize_does_not_modify_its_input():
    raw = np.array([-1.0, 4.0])
    weights.normalize(raw, 0.0)
    assert raw.tolist() == [-1.0, 4.0]


# -- helpers -------------------------------------------------------------------


def _weigh(weighers, table, rows=None, spec=None, group=None):
    rows = table.active_rows() if rows is None else np.asarray(rows, dtype=np.int64)
    cycle = fakes.cycle(table, spec or fakes.make_spec(), group)
    result = weights.HostWeightHandler.weigh(weighers, cycle, rows)
    hosts = [table.states[r].host for r in result.rows]
    return hosts, result


def _ram_table():
    # nova's RAM weigher hosts.
    return fakes.make_table([
        dict(host="host1", memory_mb=1024, claimed_memory_mb=512),   # 512 free
        dict(host="host2", memory_mb=2048, claimed_memory_mb=1024),  # 1024
        dict(host="host3", memory_mb=4096, reserved_memory_mb=1024),  # 3072
        dict(host="host4", memory_mb=8192),                           # 8192
    ])


# -- RAMWeigher ----------------------------------------------------------------


def test_ram_spreads_by_default():
    hosts, result = _weigh([RAMWeigher()], _ram_table())
    assert hosts == ["host4", "host3", "host2", "host1"]
    assert result.totals[0] == 1.0
    np.testing.assert_allclose(result.totals, [1.0, 3072 / 8192, 1024 / 8192, 512 / 8192])


def test_ram_multiplier_scales():
    CONF.set_override("ram_weight_multiplier", 2.0, "filter_scheduler")
    hosts, result = _weigh([RAMWeigher()], _ram_table())
    assert hosts[0] == "host4"
    assert result.totals[0] == 2.0


def test_ram_negative_multiplier_stacks():
    CONF.set_override("ram_weight_multiplier", -1.0, "filter_scheduler")
    hosts, result = _weigh([RAMWeigher()], _ram_table())
    assert hosts == ["host1", "host2", "host3", "host4"]
    assert result.totals[-1] == -1.0


def test_ram_zero_multiplier_keeps_filter_order():
    CONF.set_override("ram_weight_multiplier", 0.0, "filter_scheduler")
    table = _ram_table()
    rows = table.active_rows()[[2, 0, 3, 1]]
    hosts, result = _weigh([RAMWeigher()], table, rows)
    assert hosts == ["host3", "host1", "host4", "host2"]
    assert not result.totals.any()


def test_ram_negative_free_ram_weighs_as_zero():
    # nova's test_ram_filter_negative: the overcommitted host loses, at 0.
    table = _ram_table()
    fakes.add_node(table, "negative", memory_mb=8192, claimed_memory_mb=8704)
    hosts, result = _weigh([RAMWeigher()], table)
    assert hosts[0] == "host4" and result.totals[0] == 1.0
    assert hosts[-1] == "negative" and result.totals[-1] == 0.0
    assert result.totals[hosts.index("host1")] == 512 / 8192


def test_overcommitted_hosts_tie_and_keep_filter_order():
    table = fakes.make_table([
        dict(host="a", memory_mb=1024, claimed_memory_mb=1536),  # -512
        dict(host="b", memory_mb=1024, claimed_memory_mb=1100),  # -76
        dict(host="c", memory_mb=1024),
    ])
    hosts, result = _weigh([RAMWeigher()], table)
    assert hosts == ["c", "a", "b"]
    assert result.totals.tolist() == [1.0, 0.0, 0.0]
    CONF.set_override("ram_weight_multiplier", -1.0, "filter_scheduler")
    hosts, _ = _weigh([RAMWeigher()], table)
    assert hosts == ["a", "b", "c"]


def test_ram_free_is_physical_whatever_the_ratio():
    # nova's free_ram_mb: total - reserved - claimed; neither the option's
    # nor the node's own ratio changes it.
    CONF.set_override("ram_allocation_ratio", 3.0, "filter_scheduler")
    table = _ram_table()
    fakes.add_node(table, "own-ratio", memory_mb=4096, node_ram_ratio=10.0)
    raw = fakes.weigh(RAMWeigher(), table, fakes.make_spec())
    np.testing.assert_allclose(raw, [512, 1024, 3072, 8192, 4096])


# -- CPUWeigher and DiskWeigher ---------------------------------------------------


def _cpu_table():
    return fakes.make_table([
        dict(host="host1", vcpus=4, claimed_vcpus=60),     # 4 free at ratio 16
        dict(host="host2", vcpus=8, claimed_vcpus=8),      # 120
        dict(host="host3", vcpus=4, reserved_cpus=2),      # 62
        dict(host="host4", vcpus=2, claimed_vcpus=40),     # -8 -> 0
    ])


def test_cpu_spreads_by_free_vcpus_under_ratio():
    hosts, result = _weigh([CPUWeigher()], _cpu_table())
    assert hosts == ["host2", "host3", "host1", "host4"]
    np.testing.assert_allclose(result.totals, [1.0, 62 / 120, 4 / 120, 0.0])


def test_cpu_ratio_changes_free_vcpus():
    CONF.set_override("cpu_allocation_ratio", 1.0, "filter_scheduler")
    table = fakes.make_table([dict(host="a", vcpus=8, claimed_vcpus=6),   # 2
                              dict(host="b", vcpus=4, claimed_vcpus=1)])  # 3
    hosts, _ = _weigh([CPUWeigher()], table)
    assert hosts == ["b", "a"]


def test_cpu_uses_the_node_own_ratio():
    # nova's host_state.cpu_allocation_ratio: the node's reported ratio
    # wins over the option.
    CONF.set_override("cpu_allocation_ratio", 1.0, "filter_scheduler")
    table = fakes.make_table([
        dict(host="a", vcpus=8, claimed_vcpus=6),                       # 8 - 6 = 2
        dict(host="b", vcpus=4, claimed_vcpus=1, node_cpu_ratio=4.0),  # 16 - 1 = 15
        dict(host="c", vcpus=4, reserved_cpus=1, node_cpu_ratio=0.0),  # none: 4 - 1
    ])
    raw = fakes.weigh(CPUWeigher(), table, fakes.make_spec())
    np.testing.assert_allclose(raw, [2, 15, 3])


def test_cpu_uses_the_aggregate_ratio_when_aggregate_core_filter_runs():
    aggregate = dict(hosts=["b"], metadata={"cpu_allocation_ratio": "2.0"})
    table = fakes.make_table([dict(host="a", vcpus=4), dict(host="b", vcpus=4)],
                             [aggregate])
    CONF.set_override("cpu_allocation_ratio", 1.0, "filter_scheduler")
    CONF.set_override("enabled_filters", ["CoreFilter"], "filter_scheduler")
    np.testing.assert_allclose(fakes.weigh(CPUWeigher(), table, fakes.make_spec()),
                               [4, 4])
    CONF.set_override("enabled_filters", ["AggregateCoreFilter"], "filter_scheduler")
    # The figures the filters, limits and claim read (scheduler.cloud.resources).
    np.testing.assert_allclose(fakes.weigh(CPUWeigher(), table, fakes.make_spec()),
                               [4, 8])


def test_cpu_negative_multiplier_stacks():
    CONF.set_override("cpu_weight_multiplier", -2.0, "filter_scheduler")
    hosts, result = _weigh([CPUWeigher()], _cpu_table())
    assert hosts == ["host4", "host1", "host3", "host2"]
    assert result.totals[-1] == -2.0


def _disk_table():
    return fakes.make_table([
        dict(host="host1", local_gb=10, claimed_disk_mb=2048),      # 8192 free
        dict(host="host2", local_gb=20),                            # 20480
        dict(host="host3", local_gb=30, reserved_disk_mb=20480),    # 10240
        dict(host="host4", local_gb=1, claimed_disk_mb=4096),       # -3072 -> 0
    ])


def test_disk_spreads_by_free_disk():
    hosts, result = _weigh([DiskWeigher()], _disk_table())
    assert hosts == ["host2", "host3", "host1", "host4"]
    np.testing.assert_allclose(result.totals, [1.0, 0.5, 0.4, 0.0])


def test_disk_free_is_physical_whatever_the_ratio():
    CONF.set_override("disk_allocation_ratio", 2.0, "filter_scheduler")
    table = _disk_table()
    fakes.add_node(table, "own-ratio", local_gb=4, node_disk_ratio=8.0)
    raw = fakes.weigh(DiskWeigher(), table, fakes.make_spec())
    np.testing.assert_allclose(raw, [8192, 20480, 10240, -3072, 4096])


def test_disk_negative_multiplier_stacks():
    CONF.set_override("disk_weight_multiplier", -1.0, "filter_scheduler")
    hosts, _ = _weigh([DiskWeigher()], _disk_table())
    assert hosts == ["host4", "host1", "host3", "host2"]


# -- the handler -----------------------------------------------------------------


def test_contributions_add_up_to_totals():
    CONF.set_override("cpu_weight_multiplier", 0.5, "filter_scheduler")
    table = fakes.make_table([
        dict(host="a", memory_mb=4096, vcpus=2, local_gb=10),
        dict(host="b", memory_mb=1024, vcpus=16, local_gb=100),
        dict(host="c", memory_mb=2048, vcpus=8, local_gb=50),
    ])
    weighers = [RAMWeigher(), CPUWeigher(), DiskWeigher()]
    hosts, result = _weigh(weighers, table)
    assert set(result.contributions) == {"RAMWeigher", "CPUWeigher", "DiskWeigher"}
    np.testing.assert_allclose(sum(result.contributions.values()), result.totals)
    assert list(result.totals) == sorted(result.totals, reverse=True)
    # b: ram 0.25, cpu 0.5 * 1.0, disk 1.0
    np.testing.assert_allclose(result.totals[hosts.index("b")], 1.75)


def test_ties_keep_the_filter_order():
    table = fakes.make_table([dict(host=f"h{i}", memory_mb=2048) for i in range(6)])
    rows = table.active_rows()[[4, 1, 5, 0, 3, 2]]
    hosts, _ = _weigh([RAMWeigher(), CPUWeigher(), DiskWeigher()], table, rows)
    assert hosts == ["h4", "h1", "h5", "h0", "h3", "h2"]


def test_no_candidates():
    hosts, result = _weigh([RAMWeigher()], _ram_table(), rows=np.array([], dtype=np.int64))
    assert hosts == [] and len(result.totals) == 0


def test_custom_weigher_with_only_weigh_object():
    table = fakes.make_table([dict(host="busy", num_instances=9),
                              dict(host="idle", num_instances=0),
                              dict(host="some", num_instances=3)])
    assert fakes.FewestInstancesWeigher.per_host
    hosts, result = _weigh([fakes.FewestInstancesWeigher()], table)
    assert hosts == ["idle", "some", "busy"]
    np.testing.assert_allclose(result.totals, [1.0, 6 / 9, 0.0])


def test_custom_weigher_is_asked_host_by_host_with_the_request():
    seen = []

    class Recording(weights.BaseHostWeigher):
        def _weigh_object(self, host_state, spec):
            seen.append((host_state.host, spec))
            return host_state.num_instances

    table = fakes.make_table([dict(host="a", num_instances=1),
                              dict(host="b", num_instances=2)])
    spec = fakes.make_spec()
    rows = table.active_rows()[::-1]
    hosts, _ = _weigh([Recording()], table, rows, spec)
    assert seen == [("b", spec), ("a", spec)]
    assert hosts == ["b", "a"]


def test_a_weigher_overriding_nothing_cannot_weigh():
    class Nothing(weights.BaseHostWeigher):
        pass

    table = fakes.make_table([dict(host="a"), dict(host="b")])
    with pytest.raises(NotImplementedError):
        _weigh([Nothing()], table)


class _HalfFreeRAM(RAMWeigher):
    """A subclass of a built-in overriding nova's method, calling its parent."""

    def _weigh_object(self, host_state, spec):
        return super()._weigh_object(host_state, spec) / 2 - 100


def test_a_subclass_overriding_weigh_object_is_honoured():
    assert not RAMWeigher.per_host and _HalfFreeRAM.per_host
    table = _ram_table()
    # Its parent's figure reaches it: the built-in's weigh_all on one row.
    raw = fakes.weigh(_HalfFreeRAM(), table, fakes.make_spec())
    np.testing.assert_allclose(raw, [156, 412, 1436, 3996])
    hosts, result = _weigh([_HalfFreeRAM()], table)
    assert hosts == ["host4", "host3", "host2", "host1"]
    # minval 0 stays: normalised over [0, 3996].
    np.testing.assert_allclose(result.totals, [1.0, 1436 / 3996, 412 / 3996,
                                               156 / 3996])


def test_a_subclass_of_a_subclass_keeps_the_override():
    class Deeper(_HalfFreeRAM):
        multiplier_option = "ram_weight_multiplier"

    assert Deeper.per_host
    np.testing.assert_allclose(fakes.weigh(Deeper(), _ram_table(), fakes.make_spec()),
                               [156, 412, 1436, 3996])


def test_a_subclass_overriding_weigh_all_again_is_column_wise():
    class Doubled(_HalfFreeRAM):
        def weigh_all(self, cycle, rows):
            return 2 * RAMWeigher.weigh_all(self, cycle, rows)

    assert not Doubled.per_host
    np.testing.assert_allclose(fakes.weigh(Doubled(), _ram_table(), fakes.make_spec()),
                               [1024, 2048, 6144, 16384])


# -- nova's single-host rule -------------------------------------------------------


class _MustNotBeAsked(weights.BaseHostWeigher):
    def weigh_all(self, cycle, rows):
        raise AssertionError("a single candidate is not weighed")


def test_a_single_candidate_is_not_weighed():
    table = _ram_table()
    rows = table.active_rows()[[3]]
    weighers = [RAMWeigher(), CPUWeigher(), _MustNotBeAsked()]
    hosts, result = _weigh(weighers, table, rows)
    assert hosts == ["host4"]
    assert result.totals.tolist() == [0.0]
    # Every weigher is listed, with a share of 0.0.
    assert set(result.contributions) == {"RAMWeigher", "CPUWeigher", "_MustNotBeAsked"}
    assert all(share.tolist() == [0.0] for share in result.contributions.values())


def test_a_single_candidate_weighs_zero_whatever_its_figures():
    # With one host nova reports 0.0, not the weigher's multiplier.
    CONF.set_override("ram_weight_multiplier", 5.0, "filter_scheduler")
    CONF.set_override("build_failure_weight_multiplier", 1e6, "filter_scheduler")
    table = fakes.make_table([dict(host="only", memory_mb=8192,
                                   stats={"failed_builds": 3})])
    weighers = weights.HostWeightHandler().get_weighers(
        ["RAMWeigher", "BuildFailureWeigher"])
    _, result = _weigh(weighers, table)
    assert result.totals.tolist() == [0.0]


def test_two_candidates_are_weighed():
    table = _ram_table()
    hosts, result = _weigh([RAMWeigher()], table, table.active_rows()[[0, 3]])
    assert hosts == ["host4", "host1"]
    np.testing.assert_allclose(result.totals, [1.0, 512 / 8192])


def test_a_single_candidate_missing_a_required_metric_does_not_fail():
    # nova weighs nothing for one host, so MetricsWeigher cannot raise.
    assert CONF.metrics.required is True
    CONF.set_override("weight_setting", ["cpu.percent=1"], "metrics")
    table = fakes.make_table([dict(host="bare", metrics=[]),
                              dict(host="good", metrics=[
                                  {"name": "cpu.percent", "value": 3.0}])])
    hosts, result = _weigh([MetricsWeigher()], table, table.active_rows()[[0]])
    assert hosts == ["bare"] and result.totals.tolist() == [0.0]
    # Two candidates are weighed, and the missing metric fails the request.
    with pytest.raises(ComputeHostMetricNotFound):
        _weigh([MetricsWeigher()], table)


# -- per-aggregate multipliers (cycle.aggregate_number) -----------------------------


def test_multipliers_are_the_option_without_aggregates():
    table = _ram_table()
    cycle = fakes.cycle(table, fakes.make_spec())
    CONF.set_override("ram_weight_multiplier", 2.5, "filter_scheduler")
    assert RAMWeigher().multipliers(cycle, table.active_rows()) == 2.5
    # An aggregate setting another key does not matter.
    table = fakes.make_table([dict(host="a")],
                             [dict(hosts=["a"], metadata={"cpu_weight_multiplier": "3"})])
    assert RAMWeigher().multipliers(fakes.cycle(table, fakes.make_spec()),
                                    table.active_rows()) == 2.5


def test_multipliers_per_aggregate_smallest_value_wins():
    table = fakes.make_table(
        [dict(host=f"h{i}") for i in range(4)],
        [dict(hosts=["h1", "h2"], metadata={"ram_weight_multiplier": "3"}),
         dict(hosts=["h2"], metadata={"ram_weight_multiplier": "0.5"}),
         dict(hosts=["h3"], metadata={"ram_weight_multiplier": "lots"})])
    weigher = RAMWeigher()
    rows = table.active_rows()
    multipliers = weigher.multipliers(fakes.cycle(table, fakes.make_spec()), rows)
    # h0: none (the option); h1: 3; h2: min(3, 0.5); h3: not a number (the option).
    np.testing.assert_allclose(multipliers, [1.0, 3.0, 0.5, 1.0])
    # The same as nova's host-by-host weight_multiplier.
    assert [weigher.weight_multiplier(table.states[r]) for r in rows] == [1.0, 3.0,
                                                                         0.5, 1.0]
    # Only the candidates asked for, in their order.
    np.testing.assert_allclose(
        weigher.multipliers(fakes.cycle(table, fakes.make_spec()), rows[[2, 0]]),
        [0.5, 1.0])


def test_per_aggregate_multipliers_change_the_order():
    # host4 has the most free RAM, but its aggregate makes RAM count against it.
    table = fakes.make_table(
        [dict(host="host1", memory_mb=1024), dict(host="host2", memory_mb=2048),
         dict(host="host4", memory_mb=8192)],
        [dict(hosts=["host4"], metadata={"ram_weight_multiplier": "-1"})])
    hosts, result = _weigh([RAMWeigher()], table)
    assert hosts == ["host2", "host1", "host4"]
    np.testing.assert_allclose(result.totals, [0.25, 0.125, -1.0])
    np.testing.assert_allclose(result.contributions["RAMWeigher"], result.totals)


def test_multiplier_sign_applies_to_aggregate_values():
    table = fakes.make_table(
        [dict(host="a", stats={"failed_builds": 2}),
         dict(host="b", stats={"failed_builds": 2}),
         dict(host="c")],
        [dict(hosts=["b"], metadata={"build_failure_weight_multiplier": "10"})])
    weigher = BuildFailureWeigher()
    assert weigher.multiplier_sign == -1.0
    np.testing.assert_allclose(
        weigher.multipliers(fakes.cycle(table, fakes.make_spec()), table.active_rows()),
        [-1e6, -10.0, -1e6])
    hosts, result = _weigh([weigher], table)
    assert hosts == ["c", "b", "a"]
    np.testing.assert_allclose(result.totals, [0.0, -10.0, -1e6])


# -- loading ---------------------------------------------------------------------


def test_builtin_weighers():
    names = {cls.__name__ for cls in weights.all_weighers()}
    assert {"RAMWeigher", "CPUWeigher", "DiskWeigher"} <= names
    assert not any(name.startswith(("Base", "_")) for name in names)


def test_load_by_name():
    loaded = weights.HostWeightHandler().get_weighers(["RAMWeigher", "DiskWeigher"])
    assert [type(w) for w in loaded] == [RAMWeigher, DiskWeigher]


def test_unknown_name_is_a_configuration_error():
    with pytest.raises(exception.ConfigurationError) as err:
        weights.HostWeightHandler().get_weighers(["RAMWeigher", "NoSuchWeigher"])
    assert "NoSuchWeigher" in str(err.value)
    assert "RAMWeigher" in str(err.value)  # lists what exists


def test_load_by_dotted_path():
    handler = weights.HostWeightHandler()
    loaded = handler.get_weighers([
        "nova_sched.scheduler.weights.ram.RAMWeigher",
        "tests.unit.scheduler.fakes.FewestInstancesWeigher",
    ])
    assert [type(w) for w in loaded] == [RAMWeigher, fakes.FewestInstancesWeigher]


def test_dotted_path_to_a_family():
    loaded = weights.HostWeightHandler().get_weighers(
        ["nova_sched.scheduler.weights.all_weighers"])
    assert {type(w) for w in loaded} == set(weights.all_weighers())


def test_the_default_option_loads_every_builtin():
    names = CONF.filter_scheduler.weight_classes
    loaded = weights.HostWeightHandler().get_weighers(names)
    assert {type(w) for w in loaded} == set(weights.all_weighers())


def test_duplicates_are_loaded_once():
    loaded = weights.HostWeightHandler().get_weighers(
        ["RAMWeigher", "nova_sched.scheduler.weights.ram.RAMWeigher",
         "nova_sched.scheduler.weights.all_weighers"])
    assert [type(w) for w in loaded].count(RAMWeigher) == 1


@pytest.mark.parametrize("path", [
    "tests.unit.scheduler.fakes.NotAWeigher",
    "nova_sched.scheduler.weights.ram.NoSuchClass",
    "no_such_package.weighers.Weigher",
    "nova_sched.scheduler.filters.ram_filter.RamFilter",
])
def test_bad_dotted_paths_are_configuration_errors(path):
    with pytest.raises(exception.ConfigurationError) as err:
        weights.HostWeightHandler().get_weighers([path])
    assert "weight_classes" in str(err.value)
