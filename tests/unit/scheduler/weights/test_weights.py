"""Weighers and their handler: normalisation, ordering, loading."""

from __future__ import annotations

import numpy as np
import pytest

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler import weights
from nova_sched.scheduler.weights.cpu import CPUWeigher
from nova_sched.scheduler.weights.disk import DiskWeigher
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


def _weigh(weighers, table, rows=None, spec=None):
    rows = table.active_rows() if rows is None else np.asarray(rows)
    result = weights.HostWeightHandler.weigh(weighers, table, rows, spec or fakes.make_spec())
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


def test_weigh_all_agrees_with_weigh_object():
    rng = np.random.default_rng(7)
    nodes = []
    for i in range(200):
        memory = int(rng.choice([0, 1024, 8192]))
        vcpus = int(rng.choice([0, 2, 16]))
        local_gb = int(rng.choice([0, 20, 400]))
        nodes.append(dict(
            host=f"h{i}", memory_mb=memory, vcpus=vcpus, disk_mb=local_gb * 1024,
            reserved_memory_mb=int(rng.integers(0, 512)),
            reserved_cpus=int(rng.integers(0, 2)),
            reserved_disk_mb=int(rng.integers(0, 1024)),
            claimed_memory_mb=int(rng.integers(0, 2 * memory + 1)),
            claimed_vcpus=int(rng.integers(0, 20 * vcpus + 1)),
            claimed_disk_mb=int(rng.integers(0, 2 * local_gb * 1024 + 1)),
            num_instances=int(rng.integers(0, 50)),
            num_io_ops=int(rng.integers(0, 10)),
        ))
    table = fakes.make_table(nodes)
    spec = fakes.make_spec()
    rows = rng.permutation(table.active_rows())[:150]
    for ratio in (0.5, 1.0, 16.0):
        CONF.set_override("cpu_allocation_ratio", ratio, "filter_scheduler")
        for cls in weights.all_weighers():
            weigher = cls()
            vector = np.asarray(weigher.weigh_all(table, rows, spec), dtype=np.float64)
            single = np.array([weigher._weigh_object(table.states[r], spec) for r in rows],
                              dtype=np.float64)
            np.testing.assert_allclose(vector, single, err_msg=cls.__name__)


def test_custom_weigher_with_only_weigh_object():
    table = fakes.make_table([dict(host="busy", num_instances=9),
                              dict(host="idle", num_instances=0),
                              dict(host="some", num_instances=3)])
    hosts, result = _weigh([fakes.FewestInstancesWeigher()], table)
    assert hosts == ["idle", "some", "busy"]
    np.testing.assert_allclose(result.totals, [1.0, 6 / 9, 0.0])


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
