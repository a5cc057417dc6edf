"""Built-in weighers over random fleets: nova's formulas, one host or many.

Property-style: a few hundred random nodes (overcommitted ones, several
nodes per host, their own allocation ratios or none, stats and metrics good
and malformed, hypervisor versions, aggregates carrying every weigher's
multiplier key and allocation ratios, some values bad) and random requests
(server groups of every policy with members' hosts). For each weigher
discovered in the package, over a shuffled subset of rows:

* ``weigh_rows`` gives what nova's ``_weigh_object`` computes host by host
  from the HostState (written out below as the reference);
* the ``_weigh_object`` adapter (the built-in's ``weigh_all`` on one row)
  agrees with ``weigh_rows`` over many rows, and a subclass overriding
  ``_weigh_object`` with its parent's is asked host by host and weighs and
  orders the hosts exactly as its parent;
* ``multipliers`` agrees with nova's per-host ``weight_multiplier``.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from nova_sched.conf import CONF
from nova_sched.scheduler import weights
from nova_sched.scheduler.weights.affinity import (
    ServerGroupSoftAffinityWeigher,
    ServerGroupSoftAntiAffinityWeigher,
)
from nova_sched.scheduler.weights.metrics import ComputeHostMetricNotFound, MetricsWeigher
from tests.unit.scheduler import fakes

N_HOSTS = 240
METRIC_NAMES = ["cpu.percent", "cpu.frequency", "numa.membw.current"]
POLICIES = [None, "affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity"]
SETTINGS = [[], ["cpu.percent=-1.0"], ["cpu.percent=0.5", "cpu.frequency=0.001"],
            ["cpu.percent=1", "numa.membw.current=0", "cpu.percent=-2"]]
RATIO_KEYS = ["ram_allocation_ratio", "cpu_allocation_ratio", "disk_allocation_ratio"]
GROUP_WEIGHERS = (ServerGroupSoftAffinityWeigher, ServerGroupSoftAntiAffinityWeigher)


# -- nova's _weigh_object, host by host over HostState ----------------------------


# nova.objects.monitor_metric.FIELDS_REQUIRING_CONVERSION: stored / 100 by
# the compute, multiplied back by MonitorMetricList.from_json.
_NOVA_PERCENTAGES = {"cpu.user.percent", "cpu.kernel.percent", "cpu.idle.percent",
                     "cpu.iowait.percent", "cpu.percent"}


def _nova_metrics(host_state, multiplier: float) -> float:
    """nova's MetricsWeigher._weigh_object over MonitorMetricList.from_json's
    objects: percentages x 100, every value through MonitorMetric's
    IntegerField (int(), truncating); non-numeric values count as missing."""
    found = {}
    for metric in host_state.metrics or ():
        if not isinstance(metric, dict) or not isinstance(metric.get("name"), str):
            continue
        value = metric.get("value")
        if (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value)):
            if metric["name"] in _NOVA_PERCENTAGES:
                value = value * 100
            found[metric["name"]] = int(value)
    value = 0.0
    for item in CONF.metrics.weight_setting:
        name, _, ratio = item.partition("=")
        name, ratio = name.strip(), float(ratio)
        if name in found:
            value += found[name] * ratio
        elif CONF.metrics.required:
            raise ComputeHostMetricNotFound(host_state.host, host_state.nodename, name)
        elif ratio * multiplier != 0:
            return CONF.metrics.weight_of_unavailable
    return value


def _nova_group(policy: str, sign: int):
    def weigh(host_state, group, weigher):
        if group is None or group.policy != policy:
            return 0
        return sign * group.hosts.get(host_state.host, 0)
    return weigh


NOVA = {
    "RAMWeigher": lambda s, g, w: s.free_ram_mb,
    "DiskWeigher": lambda s, g, w: s.free_disk_mb,
    "CPUWeigher": lambda s, g, w: s.vcpus_total * s.cpu_allocation_ratio - s.vcpus_used,
    "IoOpsWeigher": lambda s, g, w: s.num_io_ops,
    "NumInstancesWeigher": lambda s, g, w: s.num_instances,
    "HypervisorVersionWeigher": lambda s, g, w: s.hypervisor_version or 0,
    "BuildFailureWeigher": lambda s, g, w: s.failed_builds,
    "MetricsWeigher": lambda s, g, w: _nova_metrics(s, w.weight_multiplier(s)),
    "ServerGroupSoftAffinityWeigher": _nova_group("soft-affinity", 1),
    "ServerGroupSoftAntiAffinityWeigher": _nova_group("soft-anti-affinity", -1),
}


# -- random fleets and requests ------------------------------------------------------


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


def _own_ratio(rng) -> float:
    # Most nodes report none (0.0), as Havana's compute nodes do.
    return float(rng.choice([0.0, 0.0, 0.0, 1.0, 2.5, 16.0]))


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
            node_ram_ratio=_own_ratio(rng),
            node_cpu_ratio=_own_ratio(rng),
            node_disk_ratio=_own_ratio(rng),
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
        for key in RATIO_KEYS:
            if rng.random() < 0.3:
                metadata[key] = str(rng.choice(["0.5", "3.0", "oops"]))
        aggregates.append(dict(name=f"agg{number}", hosts=members, metadata=metadata))
    return fakes.make_table(nodes, aggregates), hosts


def _random_group(rng, hosts):
    policy = POLICIES[int(rng.integers(0, len(POLICIES)))]
    if policy is None:
        return None
    members: dict[str, int] = {}
    for host in rng.choice(hosts, size=int(rng.integers(0, 12))):
        members[str(host)] = members.get(str(host), 0) + 1
    if rng.random() < 0.2:
        members["no-such-host"] = 2
    return fakes.group(policy, members)


def _random_options(rng, case: int) -> None:
    for key in RATIO_KEYS:
        CONF.set_override(key, float(rng.choice([0.5, 1.0, 1.5, 16.0])),
                          "filter_scheduler")
    # The aggregates' ratios count only while the Aggregate*Filter runs.
    enabled = ["RamFilter", "CoreFilter", "DiskFilter"]
    enabled += [name for name in ("AggregateRamFilter", "AggregateCoreFilter",
                                  "AggregateDiskFilter") if rng.random() < 0.5]
    CONF.set_override("enabled_filters", enabled, "filter_scheduler")
    CONF.set_override("weight_setting", SETTINGS[case % len(SETTINGS)], "metrics")
    CONF.set_override("weight_of_unavailable", float(rng.choice([-10000.0, 3.0])),
                      "metrics")


def _cases(seed: int):
    """(table, rows, group) per random case, with the options set for it."""
    table, hosts = _table_for(seed)
    rng = np.random.default_rng(1000 + seed)
    CONF.set_override("required", False, "metrics")
    for case in range(8):
        _random_options(rng, case)
        rows = rng.permutation(table.active_rows())[: int(rng.integers(2, N_HOSTS))]
        yield case, table, rows, _random_group(rng, hosts)


def _overriding(cls: type) -> type:
    """A custom subclass of ``cls`` spelled with nova's method only."""
    def _weigh_object(self, host_state, spec):
        return super(subclass, self)._weigh_object(host_state, spec)

    subclass = type(f"Custom{cls.__name__}", (cls,), {"_weigh_object": _weigh_object})
    return subclass


# -- the properties ------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_weigh_rows_is_nova_weigh_object(seed):
    spec = fakes.make_spec()
    for case, table, rows, group in _cases(seed):
        for cls in weights.all_weighers():
            weigher = cls()
            vector = fakes.weigh(weigher, table, spec, group, rows)
            nova = [NOVA[cls.__name__](table.states[r], group, weigher) for r in rows]
            assert vector.shape == (len(rows),)
            np.testing.assert_allclose(vector, nova, err_msg=f"{cls.__name__} {case}")


@pytest.mark.parametrize("seed", range(6))
def test_one_host_agrees_with_many(seed):
    # The adapter weighs one row with the built-in's own weigh_all; the
    # request's group is not part of nova's API, so compare without one.
    spec = fakes.make_spec()
    for case, table, rows, _ in _cases(seed):
        for cls in weights.all_weighers():
            weigher = cls()
            vector = fakes.weigh(weigher, table, spec, None, rows)
            single = [weigher._weigh_object(table.states[r], spec) for r in rows]
            np.testing.assert_allclose(vector, single, err_msg=f"{cls.__name__} {case}")


@pytest.mark.parametrize("seed", range(3))
def test_a_subclass_overriding_weigh_object_agrees_with_its_parent(seed):
    spec = fakes.make_spec()
    for case, table, rows, group in _cases(seed):
        for cls in weights.all_weighers():
            # See test_a_custom_soft_affinity_subclass_sees_the_group.
            ctx = None if cls in GROUP_WEIGHERS else group
            parent, custom = cls(), _overriding(cls)()
            assert custom.per_host and not parent.per_host
            name = f"{cls.__name__} {case}"
            # Its raw weights are the adapter's (test_one_host_agrees_with_many);
            # through the handler it ranks the hosts as its parent does.
            ours = weights.HostWeightHandler.weigh(
                [custom], fakes.cycle(table, spec, ctx), rows)
            theirs = weights.HostWeightHandler.weigh(
                [parent], fakes.cycle(table, spec, ctx), rows)
            assert ours.rows.tolist() == theirs.rows.tolist(), name
            np.testing.assert_allclose(ours.totals, theirs.totals, err_msg=name)


@pytest.mark.parametrize("cls", GROUP_WEIGHERS)
def test_a_custom_soft_affinity_subclass_sees_the_group(cls):
    table = fakes.make_table([dict(host="a"), dict(host="b")])
    group = fakes.group(cls.policy, {"b": 2})
    spec = fakes.make_spec()
    np.testing.assert_allclose(fakes.weigh(_overriding(cls)(), table, spec, group),
                               fakes.weigh(cls(), table, spec, group))


@pytest.mark.parametrize("seed", range(6))
def test_multipliers_agree_with_weight_multiplier(seed):
    table, _ = _table_for(seed)
    rows = np.random.default_rng(seed).permutation(table.active_rows())
    cycle = fakes.cycle(table, fakes.make_spec())
    for cls in weights.all_weighers():
        weigher = cls()
        vector = np.broadcast_to(weigher.multipliers(cycle, rows), (len(rows),))
        single = [weigher.weight_multiplier(table.states[r]) for r in rows]
        np.testing.assert_allclose(vector, single, err_msg=cls.__name__)


def test_every_builtin_weigher_is_covered():
    names = {cls.__name__ for cls in weights.all_weighers()}
    assert names == set(NOVA)


def test_required_metrics_fail_alike_one_host_or_many():
    table, _ = _table_for(0)
    CONF.set_override("weight_setting", ["cpu.percent=1"], "metrics")
    weigher = MetricsWeigher()
    spec = fakes.make_spec()
    rows = table.active_rows()
    complete = np.array([
        any(isinstance(m, dict) and m.get("name") == "cpu.percent"
            and isinstance(m.get("value"), float) for m in table.states[r].metrics)
        for r in rows])
    assert complete.any() and not complete.all()
    np.testing.assert_allclose(
        fakes.weigh(weigher, table, spec, rows=rows[complete]),
        [weigher._weigh_object(table.states[r], spec) for r in rows[complete]])
    missing = rows[~complete][0]
    with pytest.raises(ComputeHostMetricNotFound):
        weigher._weigh_object(table.states[missing], spec)
    with pytest.raises(ComputeHostMetricNotFound) as err:
        fakes.weigh(weigher, table, spec, rows=np.append(rows[complete][:5], missing))
    assert table.states[missing].nodename in err.value.message
