"""Every built-in filter's vectorised filter_all agrees with its host_passes.

Property-style: a few hundred random nodes (overcommitted ones, disabled
ones, stale heartbeats, zones, capabilities...) and random requests; for
each filter the mask filter_all returns over a shuffled subset of rows must
equal host_passes asked host by host.
"""

from __future__ import annotations

import dataclasses
import functools
import json

import numpy as np
import pytest

from nova_sched.conf import CONF
from nova_sched.scheduler import filters
from nova_sched.scheduler.filters import compute_filter
from tests.unit.scheduler import fakes

NOW = 1_700_000_000.0
N_HOSTS = 300
SPECS_PER_SEED = 12

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
_ZONES = [None, "nova", "az1", "az2", "az3"]
# Metadata the Aggregate* filters read, one dict per random aggregate
# (good and bad numbers, comma-separated lists); fixed, so the random
# stream is the same as without it.
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
            num_instances=int(rng.integers(0, 60)),
            num_io_ops=int(rng.integers(0, 12)),
            service_updated=float(rng.choice([0.0, NOW - 10, NOW - 59.5, NOW - 61,
                                               NOW - 3600, NOW + 5])),
            disabled=bool(rng.random() < 0.15),
            hypervisor_type=rng.choice([None, "QEMU", "kvm", "qemu", "xen"]),
            hypervisor_version=rng.choice([None, 0, 1000000, 2011000, 6000000]),
            cpu_info=cpu_info,
            supported_instances=[_TRIPLES[j] for j in rng.choice(
                len(_TRIPLES), size=int(rng.integers(0, 3)), replace=False)],
            stats={"rack": str(rng.integers(0, 4))} if rng.random() < 0.7 else {},
        ))
    hosts = sorted({n["host"] for n in nodes})
    aggregates = []
    for number, zone in enumerate(["az1", "az2", None, "az1"]):
        members = {h for h in hosts if rng.random() < 0.3}
        metadata = {"availability_zone": zone} if zone else {"ssd": "true"}
        metadata.update(_AGGREGATE_METADATA[number])
        aggregates.append(dict(name=f"agg{number}", hosts=members, metadata=metadata))
    return fakes.make_table(nodes, aggregates=aggregates)


def _random_spec(rng, table):
    rows = table.active_rows()
    tried = [(table.states[r].host, table.states[r].nodename)
             for r in rng.choice(rows, size=int(rng.integers(0, 4)), replace=False)]
    spec = fakes.make_spec(
        memory_mb=int(rng.choice([0, 256, 2048, 8192, 70000])),
        vcpus=int(rng.choice([0, 1, 2, 8, 40])),
        root_gb=int(rng.choice([0, 1, 20, 400, 600])),
        ephemeral_gb=int(rng.choice([0, 5])),
        swap=int(rng.choice([0, 512, 1025])),
        availability_zone=_ZONES[int(rng.integers(0, len(_ZONES)))],
        extra_specs=_EXTRA_SPECS[int(rng.integers(0, len(_EXTRA_SPECS)))],
        image_props=_IMAGE_PROPS[int(rng.integers(0, len(_IMAGE_PROPS)))],
        retry_hosts=tried or None,
    )
    # Server-group fields, where the request model has them.
    if all(hasattr(spec, f) for f in ("group_policy", "group_hosts", "group_rules")):
        hosts = sorted(table.host_rows)
        placed = {str(h): int(rng.integers(1, 3))
                  for h in rng.choice(hosts, size=int(rng.integers(0, 5)), replace=False)}
        spec = dataclasses.replace(
            spec,
            group_policy=rng.choice([None, "affinity", "anti-affinity"]),
            group_hosts=placed,
            group_rules={"max_server_per_host": int(rng.integers(1, 3))},
        )
    return spec


def _set_random_ratios(rng):
    for name in ("ram_allocation_ratio", "cpu_allocation_ratio", "disk_allocation_ratio"):
        CONF.set_override(name, float(rng.choice([0.0, 0.5, 1.0, 1.5, 16.0])),
                          "filter_scheduler")


@pytest.fixture(autouse=True)
def _frozen_clock(monkeypatch):
    monkeypatch.setattr(compute_filter.time, "time", lambda: NOW)


@pytest.mark.parametrize("filter_cls", filters.all_filters(), ids=lambda c: c.__name__)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_filter_all_agrees_with_host_passes(filter_cls, seed):
    table = _table_for(seed)
    rng = np.random.default_rng([seed, 1])
    for _ in range(SPECS_PER_SEED):
        _set_random_ratios(rng)
        spec = _random_spec(rng, table)
        rows = rng.permutation(table.active_rows())[: int(rng.integers(1, N_HOSTS))]
        flt = filter_cls()
        mask = np.asarray(flt.filter_all(table, rows, spec), dtype=bool)
        assert mask.shape == rows.shape
        expected = np.array([bool(flt.host_passes(table.states[r], spec)) for r in rows])
        disagree = [(table.states[r].host, table.states[r].nodename)
                    for r in rows[mask != expected]]
        assert not disagree, f"{filter_cls.__name__} disagrees on {disagree[:5]}"


def test_random_tables_exercise_both_outcomes():
    # Guard against a generator so lenient or strict that agreement is trivial.
    table = _table_for(1)
    rng = np.random.default_rng([1, 1])
    rows = table.active_rows()
    for name in ("RamFilter", "CoreFilter", "DiskFilter", "ComputeFilter",
                 "AvailabilityZoneFilter", "ComputeCapabilitiesFilter",
                 "ImagePropertiesFilter"):
        flt = next(c for c in filters.all_filters() if c.__name__ == name)()
        outcomes = set()
        for _ in range(SPECS_PER_SEED):
            _set_random_ratios(rng)
            outcomes.update(flt.filter_all(table, rows, _random_spec(rng, table)).tolist())
        assert outcomes == {True, False}, name
