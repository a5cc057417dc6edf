"""Every built-in weigher's vectorised weigh_all agrees with _weigh_object,
and its multipliers() with weight_multiplier() asked host by host.

Property-style: a few hundred random nodes (overcommitted ones, several
nodes per host, stats and metrics good and malformed, hypervisor versions,
aggregates carrying every weigher's multiplier key, some values bad) and
random requests (server-group policies with members' hosts); for each
weigher discovered in the package, over a shuffled subset of rows.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from nova_sched.conf import CONF
from nova_sched.scheduler import weights
from nova_sched.scheduler.weights.metrics import (
    ComputeHostMetricNotFound,
    MetricsWeigher,
    reported_metrics,
)
from tests.unit.scheduler import fakes

N_HOSTS = 240
METRIC_NAMES = ["cpu.percent", "cpu.frequency", "numa.membw.current"]
POLICIES = [None, "affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity"]
SETTINGS = [[], ["cpu.percent=-1.0"], ["cpu.percent=0.5", "cpu.frequency=0.001"],
            ["cpu.percent=1", "numa.membw.current=0", "cpu.percent=-2"]]


def _multiplier_keys() -> list[str]:
    """Each weigher's aggregate metadata key (its multiplier option's name)."""
    keys = (cls()._metadata_key for cls in weights.all_weighers())
    return [key for key in keys if key]


def _random_metrics(rng) -> list:
    found = []
    for name in METRIC_NAMES:
        kind = rng.integers(0, 6)
        if kind == 0:
            continue  # not reported
        if kind == 1:
            found.append({"name": name, "value": "bad"})
        else:
            found.append({"name": name, "value": float(rng.normal(50, 40)),
                          "source": "fake"})
    if rng.random() < 0.1:
        found.append("not-a-metric")
    return found


def _random_stats(rng) -> dict:
    choice = rng.integers(0, 6)
    if choice == 0:
        return {}
    if choice == 1:
        return {"failed_builds": str(int(rng.integers(0, 5)))}
    if choice == 2:
        return {"failed_builds": "garbage"}
    return {"failed_builds": int(rng.integers(0, 30)), "io_workload": 1}


@functools.cache
def _table_for(seed: int):
    rng = np.random.default_rng(seed)
    nodes = []
    for i in range(N_HOSTS):
        memory = int(rng.choice([0, 1024, 8192, 65536]))
        vcpus = int(rng.choice([0, 2, 16]))
        local_gb = int(rng.choice([0, 20, 400]))
        host = f"h{i // 2}" if rng.random() < 0.3 else f"h{i}"  # some multi-node
        nodes.append(dict(
            host=host, nodename=f"{host}-n{i}",
            memory_mb=memory, vcpus=vcpus, disk_mb=local_gb * 1024,
            reserved_memory_mb=int(rng.integers(0, 512)),
            reserved_cpus=int(rng.integers(0, 2)),
            reserved_disk_mb=int(rng.integers(0, 1024)),
            claimed_memory_mb=int(rng.integers(0, 2 * memory + 1)),
            claimed_vcpus=int(rng.integers(0, 20 * vcpus + 1)),
            claimed_disk_mb=int(rng.integers(0, 2 * local_gb * 1024 + 1)),
            num_instances=int(rng.integers(0, 50)),
            num_io_ops=int(rng.integers(0, 10)),
            hypervisor_version=(None if rng.random() < 0.1
                                else int(rng.choice([1000000, 2011000, 6002000]))),
            stats=_random_stats(rng),
            metrics=_random_metrics(rng),
        ))
    hosts = sorted({n["host"] for n in nodes})
    aggregates = []
    keys = _multiplier_keys()
    for number in range(6):
        members = [h for h in hosts if rng.random() < 0.25]
        metadata = {}
        for key in keys:
            if rng.random() < 0.5:
                metadata[key] = str(rng.choice(["2", "0", "-1.5", "0.25", "oops", ""]))
        aggregates.append(dict(name=f"agg{number}", hosts=members, metadata=metadata))
    return fakes.make_table(nodes, aggregates), hosts


def _random_spec(rng, hosts):
    policy = POLICIES[int(rng.integers(0, len(POLICIES)))]
    members = {}
    if policy:
        for host in rng.choice(hosts, size=int(rng.integers(0, 12))):
            members[str(host)] = members.get(str(host), 0) + 1
        if rng.random() < 0.2:
            members["no-such-host"] = 2
    return dataclasses.replace(fakes.make_spec(), group_policy=policy,
                               group_hosts=members)


def _agree(weigher, table, rows, spec, name):
    vector = np.asarray(weigher.weigh_all(table, rows, spec), dtype=np.float64)
    single = np.array([weigher._weigh_object(table.states[r], spec) for r in rows],
                      dtype=np.float64)
    assert vector.shape == (len(rows),), name
    np.testing.assert_allclose(vector, single, err_msg=name)


@pytest.mark.parametrize("seed", range(6))
def test_weigh_all_agrees_with_weigh_object(seed):
    table, hosts = _table_for(seed)
    rng = np.random.default_rng(1000 + seed)
    CONF.set_override("required", False, "metrics")
    for case in range(8):
        CONF.set_override("cpu_allocation_ratio", float(rng.choice([0.5, 1.0, 16.0])),
                          "filter_scheduler")
        CONF.set_override("weight_setting", SETTINGS[case % len(SETTINGS)], "metrics")
        CONF.set_override("weight_of_unavailable", float(rng.choice([-10000.0, 3.0])),
                          "metrics")
        spec = _random_spec(rng, hosts)
        rows = rng.permutation(table.active_rows())[: int(rng.integers(1, N_HOSTS))]
        for cls in weights.all_weighers():
            _agree(cls(), table, rows, spec, f"{cls.__name__} case {case}")


@pytest.mark.parametrize("seed", range(6))
def test_multipliers_agree_with_weight_multiplier(seed):
    table, _ = _table_for(seed)
    rows = np.random.default_rng(seed).permutation(table.active_rows())
    for cls in weights.all_weighers():
        weigher = cls()
        vector = np.broadcast_to(weigher.multipliers(table, rows), (len(rows),))
        single = [weigher.weight_multiplier(table.states[r]) for r in rows]
        np.testing.assert_allclose(vector, single, err_msg=cls.__name__)


def test_every_builtin_weigher_is_covered():
    names = {cls.__name__ for cls in weights.all_weighers()}
    assert {"RAMWeigher", "CPUWeigher", "DiskWeigher", "IoOpsWeigher",
            "MetricsWeigher", "ServerGroupSoftAffinityWeigher",
            "ServerGroupSoftAntiAffinityWeigher", "BuildFailureWeigher",
            "NumInstancesWeigher", "HypervisorVersionWeigher"} <= names


def test_required_metrics_both_paths_fail_alike():
    table, _ = _table_for(0)
    CONF.set_override("weight_setting", ["cpu.percent=1"], "metrics")
    weigher = MetricsWeigher()
    spec = fakes.make_spec()
    rows = table.active_rows()
    complete = np.array([bool(reported_metrics(table.states[r]).get("cpu.percent")
                              is not None) for r in rows])
    assert complete.any() and not complete.all()
    _agree(weigher, table, rows[complete], spec, "MetricsWeigher required")
    missing = rows[~complete][0]
    with pytest.raises(ComputeHostMetricNotFound):
        weigher._weigh_object(table.states[missing], spec)
    with pytest.raises(ComputeHostMetricNotFound):
        weigher.weigh_all(table, np.append(rows[complete][:5], missing), spec)
