"""Column-wise filters over kind codes agree with nova's rules host by host.

The filters that judge once per kind of host (ImagePropertiesFilter,
ComputeCapabilitiesFilter, PciPassthroughFilter, MetricsFilter,
SimpleCIDRAffinityFilter, NUMATopologyFilter, JsonFilter and the
aggregate filters) read kind codes the host table keeps current. Over
random fleets and requests, each is compared with a per-host oracle that
reads only the HostState (for JsonFilter, nova's evaluation written out
host by host below), before and after the table changes under them: new
reports describing nodes differently, new nodes, deleted nodes, new
aggregates.
"""

from __future__ import annotations

import ipaddress
import json
import math

import numpy as np
import pytest

from nova_sched.conf import CONF
from nova_sched.db.aggregates import AggregateInfo
from nova_sched.scheduler import filters
from nova_sched.scheduler.cloud import aggregate_metadata
from nova_sched.scheduler.filters import compute_capabilities_filter as caps
from nova_sched.scheduler.filters import (
    json_filter, numa_topology_filter, pci_passthrough_filter)
from nova_sched.scheduler.weights.metrics import MetricsWeigher
from tests.unit.scheduler import fakes

N_HOSTS = 160
_NIC = {"vendor_id": "8086", "product_id": "154d"}
_TRIPLES = [["x86_64", "kvm", "hvm"], ["aarch64", "kvm", "hvm"], ["i686", "qemu", "hvm"]]


def _random_node(rng, i):
    def pick(options):
        return options[int(rng.integers(0, len(options)))]

    cells = int(rng.integers(0, 4))
    return dict(
        host=f"host{i // 2}", nodename=f"node{i}",
        memory_mb=int(pick([2048, 8192, 65536])), vcpus=int(pick([4, 16])),
        disk_mb=int(pick([10, 500])) * 1024,
        claimed_memory_mb=int(rng.integers(0, 9000)),
        claimed_vcpus=int(rng.integers(0, 40)),
        num_instances=int(rng.integers(0, 30)), num_io_ops=int(rng.integers(0, 9)),
        node_cpu_ratio=float(pick([0.0, 0.0, 4.0])),
        disabled=bool(rng.random() < 0.2),
        hypervisor_type=pick([None, "kvm", "qemu", "QEMU"]),
        hypervisor_version=pick([None, 6000000, 7001000]),
        cpu_info=pick([None, "junk", json.dumps({
            "vendor": pick(["Intel", "AMD"]), "features": ["avx", pick(["sse", "vmx"])]})]),
        host_ip=pick([None, "junk", f"10.0.{int(rng.integers(0, 4))}.{i}",
                      f"10.1.0.{i}", "2001:db8::1", " 10.0.1.9 "]),
        supported_instances=[_TRIPLES[j] for j in rng.choice(
            len(_TRIPLES), size=int(rng.integers(0, 3)), replace=False)],
        stats=pick([{}, {"rack": pick(["1", "2", 3])},
                    {"rack": "1", "gpu": pick([True, "yes", 2.0, None]),
                     "failed_builds": int(rng.integers(0, 3))}]),
        metrics=pick([[], [{"name": "cpu.percent", "value": float(rng.integers(0, 100))}],
                      [{"name": "cpu.percent", "value": "bad"}]]),
        pci_stats=pick([[], [dict(_NIC, count=int(rng.integers(0, 3)))],
                        [dict(_NIC, count=1, dev_type="type-PF")]]),
        numa_topology=None if not cells else {"cells": [
            {"id": c, "cpus": list(range(c * 4, c * 4 + 4)), "memory_mb": 4096,
             "cpu_usage": int(rng.integers(0, 5)),
             "memory_usage": int(rng.integers(0, 4097))} for c in range(cells)]},
    )


def _random_aggregates(rng, table):
    hosts = sorted(table.host_rows)
    metadata = [{"availability_zone": "az1", "ssd": "true"},
                {"filter_tenant_id": "project,other", "instance_type": "m1.test"},
                {"hw_architecture": "x86_64", "rack": "1,2", "ssd": "false"}]
    return [AggregateInfo(id=n + 1, name=f"agg{n}",
                          hosts=frozenset(h for h in hosts if rng.random() < 0.3),
                          metadata=md) for n, md in enumerate(metadata)]


def _change(rng, table, step):
    """New reports, new nodes, deleted nodes, new aggregates."""
    for i in rng.choice(N_HOSTS, size=20, replace=False).tolist():
        node = _random_node(rng, i)
        fakes.add_node(table, **node, node_id=table.states[table.row_of(
            node["host"], node["nodename"])].node_id)
    for i in range(N_HOSTS + 10 * step, N_HOSTS + 10 * step + 10):
        fakes.add_node(table, **_random_node(rng, i))
    for row in rng.choice(table.active_rows(), size=5, replace=False).tolist():
        table.deactivate(row)
    table.set_aggregates(_random_aggregates(rng, table))


# -- per-host oracles -----------------------------------------------------------

def _image(flt, cycle, state):
    requirement = cycle.prepared(flt)
    return requirement is None or flt._supported(
        (state.supported_instances, state.hypervisor_version), requirement)


def _capabilities(flt, cycle, state):
    return all(caps._passes(req, caps._reading(state, req))
               for req in cycle.prepared(flt))


def _pci(flt, cycle, state):
    requests = cycle.prepared(flt)
    return not requests or pci_passthrough_filter.pools_satisfy(state.pci_stats, requests)


def _metrics(flt, cycle, state):
    return {"cpu.percent"} <= state.numeric_metrics().keys()


def _cidr(flt, cycle, state):
    network = cycle.prepared(flt)
    if network is None:
        return True
    try:
        address = ipaddress.ip_address(state.host_ip.strip())
    except (AttributeError, ValueError):
        return False
    return address.version == network.version and address in network


def _numa(flt, cycle, state):
    guest = cycle.prepared(flt)
    if guest is None:
        return True
    cells = numa_topology_filter.host_cells(state.numa_topology)
    return cells is not None and numa_topology_filter.fit(
        guest.cells, cells, state.cpu_allocation_ratio,
        state.ram_allocation_ratio) is not None


def _zone(flt, cycle, state):
    wanted = cycle.spec.availability_zone
    zones = aggregate_metadata.values_for_key(state.aggregates, "availability_zone")
    return not wanted or (wanted in zones if zones else wanted == "nova")


def _extra_specs_on_aggregates(flt, cycle, state):
    metadata = aggregate_metadata.metadata(state.aggregates)
    return all(any(check(v) for v in metadata.get(key, ()))
               for key, _, check in cycle.prepared(flt))


ORACLES = {
    "ImagePropertiesFilter": _image,
    "ComputeCapabilitiesFilter": _capabilities,
    "PciPassthroughFilter": _pci,
    "MetricsFilter": _metrics,
    "SimpleCIDRAffinityFilter": _cidr,
    "NUMATopologyFilter": _numa,
    "AvailabilityZoneFilter": _zone,
    "AggregateInstanceExtraSpecsFilter": _extra_specs_on_aggregates,
}

_SPECS = [
    dict(image_props={"hw_architecture": "x86_64"}),
    dict(image_props={"img_hv_type": "qemu", "img_hv_requested_version": ">=6.1"}),
    dict(extra_specs={"capabilities:hypervisor_type": "s== kvm", "rack": "1"}),
    dict(extra_specs={"capabilities:cpu_info:vendor": "Intel", "gpu": "True"}),
    dict(extra_specs={"free_ram_mb": ">= 4096", "capabilities:stats:rack": "<in> 1"}),
    dict(extra_specs={"num_instances": "s< 2", "vcpus_used": "<or> 3 <or> 4",
                      "capabilities:hypervisor_version": ">= 6100000"}),
    dict(extra_specs={"capabilities:aggregates": "<in> agg", "failed_builds": "= 1",
                      "aggregate_instance_extra_specs:ssd": "true"}),
    dict(extra_specs={"pci_passthrough:alias": "nic:1"}),
    dict(extra_specs={"pci_passthrough:alias": "nic:2"}),
    dict(extra_specs={"hw:numa_nodes": "2"}, memory_mb=2048, vcpus=2),
    dict(extra_specs={"hw:numa_nodes": "1"}, memory_mb=1024, vcpus=4),
    dict(scheduler_hints={"build_near_host_ip": "10.0.1.0", "cidr": "/23"}),
    dict(scheduler_hints={"build_near_host_ip": "2001:db8::", "cidr": "/64"}),
    dict(availability_zone="az1"),
    dict(availability_zone="nova", extra_specs={"rack": "2"}),
]


@pytest.fixture(autouse=True)
def _options():
    CONF.set_override("alias", [json.dumps(dict(name="nic", **_NIC))], "pci")
    CONF.set_override("weight_setting", ["cpu.percent=-1.0"], "metrics")
    CONF.set_override("required", False, "metrics")
    CONF.set_override("enabled_filters", ["AggregateCoreFilter"], "filter_scheduler")


def _check(table, name):
    flt = next(cls for cls in filters.all_filters() if cls.__name__ == name)()
    oracle = ORACLES[name]
    rows = table.active_rows()
    for options in _SPECS:
        spec = fakes.make_spec(**{"memory_mb": 512, "vcpus": 1, **options})
        cycle = fakes.cycle(table, spec)
        ours = flt.filter_rows(cycle, rows)
        expected = [oracle(flt, cycle, table.states[r]) for r in rows.tolist()]
        wrong = [table.states[r].nodename
                 for r, a, b in zip(rows.tolist(), ours, expected) if a != b]
        assert not wrong, (name, options, wrong[:5])


@pytest.mark.parametrize("name", sorted(ORACLES))
@pytest.mark.parametrize("seed", [1, 2])
def test_filters_over_kinds_agree_with_each_host_as_the_table_changes(name, seed):
    rng = np.random.default_rng(seed)
    table = fakes.make_table([_random_node(rng, i) for i in range(N_HOSTS)])
    table.set_aggregates(_random_aggregates(rng, table))
    _check(table, name)
    for step in range(3):
        _change(rng, table, step)
        _check(table, name)


@pytest.mark.parametrize("seed", [1, 2])
def test_metrics_weigher_reads_each_report_as_the_table_changes(seed):
    rng = np.random.default_rng(seed)
    table = fakes.make_table([_random_node(rng, i) for i in range(N_HOSTS)])
    weigher = MetricsWeigher()
    for step in range(3):
        rows = table.active_rows()
        ours = fakes.weigh(weigher, table, fakes.make_spec(), rows=rows)
        expected = []
        for r in rows.tolist():
            value = table.states[r].numeric_metrics().get("cpu.percent")
            expected.append(-10000.0 if value is None else -1.0 * value)
        assert ours.tolist() == expected
        _change(rng, table, step)


# -- JsonFilter against nova's evaluation, host by host -----------------------------

def _nova_compile(query):
    """nova's JsonFilter evaluation of one host (with this project's rules:
    unorderable comparisons are false, a sub-query's ``not`` counts as any)."""
    if not query:
        return lambda state: True
    command = json_filter._COMMANDS[query[0]]
    args = []
    for arg in query[1:]:
        if arg is None or arg == "":
            continue
        if isinstance(arg, list):
            sub = _nova_compile(arg)
            args.append(lambda state, sub=sub: json_filter._collapse(sub(state)))
        elif isinstance(arg, str) and arg.startswith("$"):
            path = tuple(arg[1:].split("."))
            args.append(lambda state, path=path: json_filter._lookup(state, path))
        else:
            args.append(arg)

    def evaluate(state):
        values = [a(state) if callable(a) else a for a in args]
        return command([v for v in values if v is not json_filter._MISSING])

    return evaluate


_VARIABLES = ["$free_ram_mb", "$free_disk_mb", "$vcpus_used", "$num_instances",
              "$num_io_ops", "$ram_allocation_ratio", "$cpu_allocation_ratio",
              "$service_disabled", "$total_usable_disk_gb", "$host", "$nodename",
              "$hypervisor_type", "$hypervisor_version", "$stats.rack", "$stats.gpu",
              "$stats", "$cpu_info.vendor", "$cpu_info.features", "$aggregates",
              "$availability_zones", "$disabled_reason", "$free_ram_mb.x", "$foo",
              "$_table", "$numeric_metrics", "$host_ip", "$failed_builds",
              "$supported_instances", "$stats.rack.x"]
_LITERALS = [0, 1, 3, 2048, 4096.5, -1, 2 ** 60, 2 ** 70, 1e300, True, False, "1", "kvm",
             "Intel", "", None, "r", "host3", {"a": 1}, "node7"]


def _random_query(rng, depth=0):
    op = str(rng.choice(list(json_filter._COMMANDS)))
    args = []
    for _ in range(int(rng.integers(0, 4))):
        roll = rng.random()
        if roll < 0.25 and depth < 3:
            args.append(_random_query(rng, depth + 1))
        elif roll < 0.65:
            args.append(str(rng.choice(_VARIABLES)))
        else:
            args.append(_LITERALS[int(rng.integers(0, len(_LITERALS)))])
    return [op, *args]


@pytest.mark.parametrize("seed", range(4))
def test_json_queries_agree_with_nova_host_by_host(seed):
    rng = np.random.default_rng(seed)
    table = fakes.make_table([_random_node(rng, i) for i in range(N_HOSTS)])
    table.set_aggregates(_random_aggregates(rng, table))
    table.states[3].disabled_reason = "maintenance"
    flt = json_filter.JsonFilter()
    for step in range(4):
        rows = table.active_rows()
        for _ in range(60):
            query = _random_query(rng)
            spec = fakes.make_spec(scheduler_hints={"query": json.dumps(query)})
            ours = flt.filter_rows(fakes.cycle(table, spec), rows)
            nova = _nova_compile(query)
            expected = [json_filter._truth(nova(table.states[r])) for r in rows.tolist()]
            assert ours.tolist() == expected, query
            # Any subset of rows gets the same verdicts.
            some = np.sort(rng.choice(rows, size=7, replace=False))
            alone = flt.filter_rows(fakes.cycle(table, spec), some)
            assert alone.tolist() == [expected[i] for i in np.searchsorted(rows, some)]
        _change(rng, table, step)


def test_huge_numbers_compare_as_python_does():
    table = fakes.make_table([dict(host="h", memory_mb=2 ** 62, stats={"n": 2 ** 70})])
    flt = json_filter.JsonFilter()
    for query, expected in [([">", "$free_ram_mb", 2 ** 62 - 1], True),
                            (["<", "$free_ram_mb", 2 ** 70], True),
                            (["=", "$free_ram_mb", float(2 ** 62)], True),
                            (["=", "$free_ram_mb", 2 ** 62 + 1], False),
                            ([">", "$stats.n", "$free_ram_mb"], True),
                            (["<", "$free_ram_mb", math.inf], True)]:
        spec = fakes.make_spec(scheduler_hints={"query": json.dumps(query)})
        kept = [h for h, _ in fakes.passes(flt, table, spec)]
        assert kept == (["h"] if expected else []), query
