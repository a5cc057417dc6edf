"""One way to write a filter: built-ins judge column-wise, custom plugins
host by host, and the two meet in the base class.

* Every built-in implements ``filter_all`` (and ``prepare``) only.
* Property-style, over a few hundred random nodes (overcommitted ones,
  disabled ones, stale heartbeats, zones, aggregates, capabilities, NUMA
  cells, PCI pools, addresses) and random requests and server groups: a
  built-in's verdict on a host does not depend on which other hosts are
  asked with it (its alike-host grouping and per-decision preparation are
  sound), and ``BaseHostFilter.host_passes`` of a built-in, the adapter a
  subclass calls through ``super()``, agrees with ``filter_all``.
* A custom subclass of a built-in that overrides ``host_passes`` is asked
  host by host by the handler (``HostFilterHandler.run``), so overriding
  nova's method always takes effect.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler import filters
from nova_sched.scheduler.filters import compute_filter
from nova_sched.scheduler.filters.compute_capabilities_filter import (
    ComputeCapabilitiesFilter)
from nova_sched.scheduler.filters.image_props_filter import ImagePropertiesFilter
from tests.unit.scheduler import fakes

NOW = 1_700_000_000.0
N_HOSTS = 300
SPECS_PER_SEED = 12
# Rows of each random request also judged one at a time.
SINGLE_ROWS = 40

_TRIPLES = [["x86_64", "kvm", "hvm"], ["x86_64", "qemu", "hvm"], ["i686", "qemu", "hvm"],
            ["x86_64", "xen", "xen"], ["aarch64", "kvm", "hvm"], ["AMD64", "KVM", "HVM"]]
_EXTRA_SPECS = [
    {},
    {"capabilities:hypervisor_type": "kvm"},
    {"hypervisor_type": "<or> kvm <or> qemu"},
    {"capabilities:cpu_info:vendor": "Intel"},
    {"capabilities:cpu_info:features": "<in> avx"},
    {"rack": "= 2"},
    {"capabilities:stats:rack": "s== 1", "hw:cpu_policy": "dedicated"},
    {"free_ram_mb": ">= 2048"},
    {"capabilities:hypervisor_version": ">= 2000000"},
    {"pci_passthrough:alias": "nic:1"},
    {"pci_passthrough:alias": "nic:2,gpu:1"},
    {"hw:numa_nodes": "1"},
    {"hw:numa_nodes": "2"},
]
_IMAGE_PROPS = [
    {},
    {"hw_architecture": "x86_64"},
    {"img_hv_type": "qemu", "img_hv_requested_version": ">=2.0"},
    {"architecture": "i686", "vm_mode": "hvm"},
    {"hw_vm_mode": "xen"},
    {"hw_architecture": "amd64", "img_hv_type": "kvm",
     "img_hv_requested_version": ">=2.11,<7"},
]
_HINTS = [
    {},
    {"build_near_host_ip": "10.0.1.1"},
    {"build_near_host_ip": "10.0.0.0", "cidr": "/16"},
    {"query": json.dumps(["and", [">=", "$free_ram_mb", 1024], ["=", "$stats.rack", "1"]])},
    {"query": json.dumps(["=", "$cpu_info.vendor", "AMD"])},
]
_ZONES = [None, "nova", "az1", "az2", "az3"]
_NIC = {"vendor_id": "8086", "product_id": "154d"}
_GPU = {"vendor_id": "10de", "product_id": "1eb8"}
# Metadata the Aggregate* filters read, one dict per random aggregate
# (good and bad numbers, comma-separated lists).
_AGGREGATE_METADATA = [
    {"ram_allocation_ratio": "2.0", "max_io_ops_per_host": "4",
     "filter_tenant_id": "project, other", "hw_vm_mode": "hvm"},
    {"ram_allocation_ratio": "0.5", "cpu_allocation_ratio": "not a number",
     "instance_type": "m1.big", "rack": "2,3"},
    {"disk_allocation_ratio": "3", "max_instances_per_host": "30",
     "hw_architecture": "x86_64, i686"},
    {"cpu_allocation_ratio": "4", "max_instances_per_host": "x",
     "filter_tenant_id_gr1": "someone", "instance_type": "m1.test, m1.big"},
]


@functools.lru_cache(maxsize=None)
def _table_for(seed: int):
    # Filters only read the table: one per seed serves every filter's test.
    return _random_table(np.random.default_rng(seed))


def _cells(count, cpus, memory, cpu_usage, memory_usage):
    return {"cells": [{"id": c, "cpus": list(range(c * cpus, (c + 1) * cpus)),
                       "memory_mb": memory, "cpu_usage": cpu_usage,
                       "memory_usage": memory_usage} for c in range(count)]}


# A few kinds of NUMA node, shared by many nodes with different ratios, so
# that grouping alike hosts by their cells alone would show.
_NUMA_KINDS = [None, {"cells": []},
               _cells(1, 8, 8192, 0, 0), _cells(2, 4, 4096, 3, 1024),
               _cells(2, 4, 4096, 4, 4096), _cells(4, 2, 2048, 2, 1536)]


def _numa(rng):
    return _NUMA_KINDS[int(rng.integers(0, len(_NUMA_KINDS)))]


def _pci(rng):
    pools = []
    for tags in (_NIC, _GPU):
        if rng.random() < 0.4:
            pools.append(dict(count=int(rng.integers(0, 3)), **tags))
    return pools


def _random_table(rng):
    nodes = []
    for i in range(N_HOSTS):
        host = f"host{i // 2}"  # two nodes on most hosts
        memory = int(rng.choice([0, 512, 2048, 8192, 65536]))
        vcpus = int(rng.choice([0, 1, 4, 16, 64]))
        local_gb = int(rng.choice([0, 10, 40, 500]))
        over = rng.random() < 0.3  # claims beyond the physical size
        cpu_info = rng.choice([None, "", "not json", json.dumps(
            {"vendor": str(rng.choice(["Intel", "AMD"])),
             "features": list(rng.choice(["avx", "sse", "avx2"], size=2))})])
        nodes.append(dict(
            host=host,
            nodename=f"node{i}",
            memory_mb=memory,
            vcpus=vcpus,
            disk_mb=local_gb * 1024,
            reserved_memory_mb=int(rng.integers(0, 1024)) if memory else 0,
            reserved_cpus=int(rng.integers(0, 2)),
            reserved_disk_mb=int(rng.integers(0, 2048)) if local_gb else 0,
            claimed_memory_mb=int(rng.integers(0, memory * (2 if over else 1) + 1)),
            claimed_vcpus=int(rng.integers(0, vcpus * (20 if over else 1) + 1)),
            claimed_disk_mb=int(rng.integers(0, local_gb * 1024 * (2 if over else 1) + 1)),
            # Some nodes report their own ratios (0.0: none).
            node_cpu_ratio=float(rng.choice([0.0, 0.0, 1.0, 4.0])),
            node_ram_ratio=float(rng.choice([0.0, 0.0, 1.0, 1.5])),
            num_instances=int(rng.integers(0, 60)),
            num_io_ops=int(rng.integers(0, 12)),
            service_updated=float(rng.choice([0.0, NOW - 10, NOW - 59.5, NOW - 61,
                                               NOW - 3600, NOW + 5])),
            disabled=bool(rng.random() < 0.15),
            hypervisor_type=rng.choice([None, "QEMU", "kvm", "qemu", "xen"]),
            hypervisor_version=rng.choice([None, 0, 1000000, 2011000, 6000000]),
            cpu_info=cpu_info,
            host_ip=rng.choice([None, "junk", "10.0.1.7", "10.0.2.9", "10.1.0.1",
                                "2001:db8::1"]),
            supported_instances=[_TRIPLES[j] for j in rng.choice(
                len(_TRIPLES), size=int(rng.integers(0, 3)), replace=False)],
            stats={"rack": str(rng.integers(0, 4))} if rng.random() < 0.7 else {},
            numa_topology=_numa(rng),
            pci_stats=_pci(rng),
        ))
    hosts = sorted({n["host"] for n in nodes})
    aggregates = []
    for number, zone in enumerate(["az1", "az2", None, "az1"]):
        members = {h for h in hosts if rng.random() < 0.3}
        metadata = {"availability_zone": zone} if zone else {"ssd": "true"}
        metadata.update(_AGGREGATE_METADATA[number])
        aggregates.append(dict(name=f"agg{number}", hosts=members, metadata=metadata))
    return fakes.make_table(nodes, aggregates=aggregates)


def _pick(rng, options):
    return options[int(rng.integers(0, len(options)))]


def _random_spec(rng, table):
    rows = table.active_rows()
    tried = [(table.states[r].host, table.states[r].nodename)
             for r in rng.choice(rows, size=int(rng.integers(0, 4)), replace=False)]
    return fakes.make_spec(
        memory_mb=int(rng.choice([0, 256, 2048, 8192, 70000])),
        vcpus=int(rng.choice([0, 1, 2, 8, 40])),
        root_gb=int(rng.choice([0, 1, 20, 400, 600])),
        ephemeral_gb=int(rng.choice([0, 5])),
        swap=int(rng.choice([0, 512, 1025])),
        availability_zone=_pick(rng, _ZONES),
        extra_specs=_pick(rng, _EXTRA_SPECS),
        image_props=_pick(rng, _IMAGE_PROPS),
        scheduler_hints=_pick(rng, _HINTS),
        retry_hosts=tried or None,
    )


def _random_group(rng, table):
    policy = _pick(rng, [None, "affinity", "anti-affinity", "soft-affinity"])
    if policy is None:
        return None
    hosts = sorted(table.host_rows)
    placed = {str(h): int(rng.integers(1, 3))
              for h in rng.choice(hosts, size=int(rng.integers(0, 5)), replace=False)}
    return fakes.group(policy, hosts=placed,
                       rules={"max_server_per_host": int(rng.integers(1, 3))})


def _set_random_options(rng):
    for name in ("ram_allocation_ratio", "cpu_allocation_ratio", "disk_allocation_ratio"):
        CONF.set_override(name, float(rng.choice([0.0, 0.5, 1.0, 1.5, 16.0])),
                          "filter_scheduler")
    # Whether aggregates may set the ratios (their Aggregate*Filter runs).
    enabled = [name for name in ("AggregateRamFilter", "AggregateCoreFilter",
                                 "AggregateDiskFilter") if rng.random() < 0.5]
    CONF.set_override("enabled_filters", ["RamFilter", *enabled], "filter_scheduler")


@pytest.fixture(autouse=True)
def _frozen_clock_and_aliases(monkeypatch):
    monkeypatch.setattr(compute_filter.time, "time", lambda: NOW)
    CONF.set_override("alias", [json.dumps(dict(name="nic", **_NIC)),
                                json.dumps(dict(name="gpu", **_GPU))], "pci")


def _verdicts(flt, cycle, rows):
    """filter_rows' mask, or the InvalidRequestSpec it raised."""
    try:
        return np.asarray(flt.filter_rows(cycle, rows), dtype=bool)
    except exception.InvalidRequestSpec as err:
        return err.message


@pytest.mark.parametrize("filter_cls", filters.all_filters(), ids=lambda c: c.__name__)
def test_built_ins_judge_column_wise_only(filter_cls):
    below_base = filter_cls.__mro__[:filter_cls.__mro__.index(filters.BaseHostFilter)]
    assert not any("host_passes" in vars(klass) for klass in below_base)
    assert not filter_cls.per_host
    assert not hasattr(filter_cls, "run_filter_once_per_request")


@pytest.mark.parametrize("filter_cls", filters.all_filters(), ids=lambda c: c.__name__)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_hosts_verdict_does_not_depend_on_the_other_hosts_asked(filter_cls, seed):
    table = _table_for(seed)
    rng = np.random.default_rng([seed, 1])
    for _ in range(SPECS_PER_SEED):
        _set_random_options(rng)
        spec = _random_spec(rng, table)
        group = _random_group(rng, table)
        flt = filter_cls()
        everyone = table.active_rows()
        whole = _verdicts(flt, fakes.cycle(table, spec, group), everyone)
        rows = rng.permutation(everyone)[: int(rng.integers(1, N_HOSTS))]
        mask = _verdicts(flt, fakes.cycle(table, spec, group), rows)
        if isinstance(whole, str):  # a request the filter refuses
            assert mask == whole
            continue
        assert mask.shape == rows.shape
        expected = whole[np.searchsorted(everyone, rows)]
        disagree = [table.states[r].nodename for r in rows[mask != expected]]
        assert not disagree, f"{filter_cls.__name__}: subset disagrees on {disagree[:5]}"
        for i in rng.permutation(len(rows))[:SINGLE_ROWS]:
            row, state = rows[i], table.states[rows[i]]
            alone = _verdicts(flt, fakes.cycle(table, spec, group), rows[i:i + 1])
            assert bool(alone[0]) == mask[i], (filter_cls.__name__, state.nodename)
            if group is None:
                # The adapter a subclass reaches through super().host_passes.
                assert flt.host_passes(state, spec) == mask[i], (
                    filter_cls.__name__, state.nodename, row)


def test_random_tables_exercise_both_outcomes():
    # Guard against a generator so lenient or strict that agreement is trivial.
    table = _table_for(1)
    rng = np.random.default_rng([1, 1])
    rows = table.active_rows()
    classes = {c.__name__: c for c in filters.all_filters()}
    for name in ("RamFilter", "CoreFilter", "DiskFilter", "ComputeFilter",
                 "AvailabilityZoneFilter", "ComputeCapabilitiesFilter",
                 "ImagePropertiesFilter", "NUMATopologyFilter", "PciPassthroughFilter",
                 "SimpleCIDRAffinityFilter", "JsonFilter",
                 "ServerGroupAntiAffinityFilter"):
        flt = classes[name]()
        outcomes = set()
        for _ in range(4 * SPECS_PER_SEED):
            _set_random_options(rng)
            spec, group = _random_spec(rng, table), _random_group(rng, table)
            verdicts = _verdicts(flt, fakes.cycle(table, spec, group), rows)
            if not isinstance(verdicts, str):
                outcomes.update(verdicts.tolist())
        assert outcomes == {True, False}, name


# -- custom subclasses of built-ins -------------------------------------------

class AskedImageFilter(ImagePropertiesFilter):
    """A custom filter: the parent's verdict, asked host by host."""

    def __init__(self):
        super().__init__()
        self.asked: list[str] = []

    def host_passes(self, host_state, spec) -> bool:
        self.asked.append(host_state.nodename)
        return super().host_passes(host_state, spec)


class NoOddNodesCapabilitiesFilter(ComputeCapabilitiesFilter):
    """A custom filter narrowing its parent: odd-numbered nodes never pass."""

    def host_passes(self, host_state, spec) -> bool:
        if int(host_state.nodename.removeprefix("node")) % 2:
            return False
        return super().host_passes(host_state, spec)


def _run(flt, table, spec):
    rows = table.active_rows()
    result = filters.HostFilterHandler.run([flt], fakes.cycle(table, spec), rows)
    return result.rows


@pytest.mark.parametrize("seed", [1, 2])
def test_subclass_overriding_host_passes_is_asked_and_agrees_with_its_parent(seed):
    table = _table_for(seed)
    rng = np.random.default_rng([seed, 2])
    assert AskedImageFilter.per_host and NoOddNodesCapabilitiesFilter.per_host
    for _ in range(SPECS_PER_SEED):
        _set_random_options(rng)
        spec = _random_spec(rng, table)
        custom = AskedImageFilter()
        kept = _run(custom, table, spec)
        assert sorted(custom.asked) == sorted(
            table.states[r].nodename for r in table.active_rows())
        assert kept.tolist() == _run(ImagePropertiesFilter(), table, spec).tolist()

        narrowed = _run(NoOddNodesCapabilitiesFilter(), table, spec)
        parent = _run(ComputeCapabilitiesFilter(), table, spec)
        assert narrowed.tolist() == [
            r for r in parent.tolist() if int(table.states[r].nodename[4:]) % 2 == 0]


def test_subclass_overriding_host_passes_is_honoured_after_a_column_wise_filter():
    table = fakes.make_table([
        dict(host=f"h{i}", nodename=f"node{i}",
             supported_instances=[["x86_64", "kvm", "hvm"]] if i < 4 else [],
             stats={"rack": "1"}) for i in range(6)])
    spec = fakes.make_spec(image_props={"hw_architecture": "x86_64"},
                           extra_specs={"rack": "1"})
    custom = NoOddNodesCapabilitiesFilter()
    result = filters.HostFilterHandler.run([ImagePropertiesFilter(), custom],
                                           fakes.cycle(table, spec), table.active_rows())
    assert [table.states[r].host for r in result.rows] == ["h0", "h2"]
    assert result.removed_counts() == [("ImagePropertiesFilter", 2),
                                       ("NoOddNodesCapabilitiesFilter", 2)]
