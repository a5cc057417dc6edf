"""One decision's filter + weigh path, timed, and checked against nova's way.

    python bench/decision_bench.py [--sizes 1000,10000,100000] [--catalogue]
                                   [--sample N] [--breakdown] [--repeats N]
                                   [--seed 0] [--smoke]

Builds ``HostManager().table`` directly (``HostTable.upsert`` with
``HostState`` objects, no database, no RPC) for each fleet size, with the
demo's host shapes (nova_sched.sim.flavors) and random claims of 0-70% of
each node. For each kind of request it times ``FilterScheduler.decide()``
followed by ``selection(0)`` (prepare, filter, weigh, the first candidate
ready to claim; no claim) and prints p50 and p99.

For every fleet size and request kind it also runs, in the same process, a
per-host reference: each filter's ``host_passes(host_state, spec)`` asked
host by host over the survivors of the previous filters, each weigher's
``_weigh_object(host_state, spec)`` host by host with nova's per-host
multiplier, normalised and summed as the handler does, then a stable sort
(nova's way, through the base classes' adapters for built-ins). It prints
the reference's time and its ratio to the column-wise p50, and checks that
both keep the same hosts and order them identically, with identical
weights; any difference is printed and the exit code is 1.

``--catalogue`` enables every built-in filter and weigher (as
tests/functional/test_catalogue.py does) on a fleet that also reports NUMA
cells, PCI pools, metrics and addresses, with aggregates, and adds request
kinds that exercise them. ``--sample N`` sets ``max_hosts_to_score``
(candidate sampling). ``--smoke`` is a seconds-long run of both
configurations on small fleets, for CI.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gc
import json
import random
import sys
import time
import tracemalloc
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import nova_sched  # noqa: E402,F401  (selects oslo.service's threading backend)
import numpy as np  # noqa: E402

from nova_sched.conf import CONF  # noqa: E402
from nova_sched.db.aggregates import AggregateInfo  # noqa: E402
from nova_sched.scheduler.wire import request
from nova_sched.scheduler.decision.cycle_state import CycleState  # noqa: E402
from nova_sched.scheduler.filter_scheduler import FilterScheduler  # noqa: E402
from nova_sched.scheduler.filters import HostFilterHandler  # noqa: E402
from nova_sched.scheduler.host_manager import HostManager  # noqa: E402
from nova_sched.scheduler.cloud.host_state import HostState  # noqa: E402
from nova_sched.scheduler.decision.server_groups import GroupContext  # noqa: E402
from nova_sched.scheduler.weights import (  # noqa: E402
    HostWeightHandler, Ranking, normalize)
from nova_sched.sim import flavors  # noqa: E402

# Decisions timed per request kind, by fleet size (p99 needs a hundred or so).
_REPEATS = {1_000: 500, 10_000: 300, 100_000: 100}
_SMOKE_SIZES = (300, 1_000)
_SMOKE_REPEATS = 20

# The whole catalogue, in tests/functional/test_catalogue.py's order.
CATALOGUE_FILTERS = [
    "RetryFilter", "AvailabilityZoneFilter", "ComputeFilter", "AllHostsFilter",
    "IsolatedHostsFilter", "AggregateMultiTenancyIsolation",
    "AggregateTypeAffinityFilter", "AggregateImagePropertiesIsolation",
    "AggregateInstanceExtraSpecsFilter", "ComputeCapabilitiesFilter",
    "ImagePropertiesFilter", "JsonFilter", "SameHostFilter", "DifferentHostFilter",
    "SimpleCIDRAffinityFilter", "ServerGroupAntiAffinityFilter",
    "ServerGroupAffinityFilter", "RamFilter", "AggregateRamFilter", "CoreFilter",
    "AggregateCoreFilter", "DiskFilter", "AggregateDiskFilter", "IoOpsFilter",
    "AggregateIoOpsFilter", "NumInstancesFilter", "AggregateNumInstancesFilter",
    "MetricsFilter", "PciPassthroughFilter", "NUMATopologyFilter",
]
CATALOGUE_WEIGHERS = [
    "RAMWeigher", "CPUWeigher", "DiskWeigher", "IoOpsWeigher", "MetricsWeigher",
    "ServerGroupSoftAffinityWeigher", "ServerGroupSoftAntiAffinityWeigher",
    "BuildFailureWeigher", "NumInstancesWeigher", "HypervisorVersionWeigher",
]
_PCI_NIC = {"vendor_id": "8086", "product_id": "154d"}
_ISOLATED_IMAGE = "1f0d5d6e-0b1c-4d5e-9f3a-150c0a7e1e50"


def configure(catalogue: bool, sample: int) -> None:
    """The options of one run (defaults, or the whole catalogue)."""
    CONF.clear_override("max_hosts_to_score", "filter_scheduler")
    if sample:
        CONF.set_override("max_hosts_to_score", sample, "filter_scheduler")
    overrides = {
        "filter_scheduler": {
            "enabled_filters": CATALOGUE_FILTERS,
            "weight_classes": CATALOGUE_WEIGHERS,
            "isolated_hosts": ["sim-general-00003"],
            "isolated_images": [_ISOLATED_IMAGE],
            "max_io_ops_per_host": 40,
            "soft_affinity_weight_multiplier": 100.0,
            "soft_anti_affinity_weight_multiplier": 100.0,
            "num_instances_weight_multiplier": -1.0,
        },
        "metrics": {"weight_setting": ["cpu.percent=-1.0"]},
        "pci": {"alias": [json.dumps(dict(name="nic", **_PCI_NIC))]},
    }
    for group, options in overrides.items():
        for name, value in options.items():
            if catalogue:
                CONF.set_override(name, value, group)
            else:
                CONF.clear_override(name, group)


# -- the fleet ---------------------------------------------------------------------

def _cpu_info(shape: flavors.HostShape) -> str:
    return json.dumps({"arch": shape.arch, "model": "bench", "vendor": "nova-sched",
                       "topology": {"sockets": 1, "cores": shape.vcpus, "threads": 1},
                       "features": ["sse4_2", "avx2"]})


def _numa(shape: flavors.HostShape, used: float) -> dict:
    """Two cells splitting the node, used as much as the node is."""
    cells, half = [], shape.vcpus // 2
    for cell in range(2):
        memory = shape.memory_mb // 2
        cells.append({"id": cell, "cpus": list(range(cell * half, (cell + 1) * half)),
                      "memory_mb": memory, "cpu_usage": int(half * 4 * used),
                      "memory_usage": int(memory * used)})
    return {"cells": cells}


def build_host_manager(size: int, rng: random.Random,
                       catalogue: bool = False) -> HostManager:
    """A HostManager whose table holds ``size`` live nodes (no database).

    With ``catalogue`` the nodes also report NUMA cells, PCI pools (the
    compute shape) and a ``cpu.percent`` metric (all but 1%), and belong to
    a few aggregates (a zone, tighter ratios, a tenant's, a flavor's, an
    I/O limit, a weight multiplier).
    """
    manager = HostManager()
    table = manager.table
    now = time.time()
    cpu_infos = {shape.name: _cpu_info(shape) for shape in flavors.HOST_SHAPES}
    hosts_by_shape: dict[str, list[str]] = collections.defaultdict(list)
    for node_id, (name, shape) in enumerate(flavors.fleet(rng, size), start=1):
        used = rng.random() * 0.7
        stats = dict(shape.stats)
        stats.update(num_instances=0, io_workload=0)
        extra: dict = {}
        if catalogue:
            hosts_by_shape[shape.name].append(name)
            extra = dict(
                numa_topology=_numa(shape, used),
                pci_stats=[dict(_PCI_NIC, count=rng.randrange(3), dev_type="type-PCI")]
                if shape.name == "compute" else [],
                metrics=[] if rng.random() < 0.01 else [
                    {"name": "cpu.percent", "value": round(rng.random() * 100, 1),
                     "source": "bench", "timestamp": "2013-10-17T00:00:00Z"}])
        state = HostState(
            host=name,
            nodename=name,
            node_id=node_id,
            hypervisor_type="kvm",
            hypervisor_version=6002000,
            hypervisor_hostname=name,
            cpu_info=cpu_infos[shape.name],
            host_ip=f"10.{node_id >> 16 & 255}.{node_id >> 8 & 255}.{node_id & 255}",
            supported_instances=[[shape.arch, "kvm", "hvm"]],
            stats=stats,
            **extra,
        )
        table.upsert(state, {
            "memory_mb": shape.memory_mb,
            "vcpus": shape.vcpus,
            "disk_mb": shape.local_gb * 1024,
            "reserved_memory_mb": shape.reserved_host_memory_mb,
            "reserved_disk_mb": 0,
            "reserved_cpus": 0,
            "claimed_memory_mb": int(shape.memory_mb * 1.5 * used),
            "claimed_vcpus": int(shape.vcpus * 4 * used),
            "claimed_disk_mb": int(shape.local_gb * 1024 * used),
            "num_instances": int(20 * used),
            "num_io_ops": rng.randrange(3),
            "service_updated": now,
            "disabled": False,
        })
    if catalogue:
        names = [state.host for state in table.states]
        table.set_aggregates([
            AggregateInfo(1, "az1", frozenset(names[::3]),
                          {"availability_zone": "az1", "ssd": "true"}),
            AggregateInfo(2, "tight", frozenset(names[1::20]),
                          {"ram_allocation_ratio": "1.0", "cpu_allocation_ratio": "4.0",
                           "disk_allocation_ratio": "0.9", "max_io_ops_per_host": "1",
                           "max_instances_per_host": "12"}),
            AggregateInfo(3, "tenant", frozenset(names[2::100]),
                          {"filter_tenant_id": "project-01"}),
            AggregateInfo(4, "arm", frozenset(hosts_by_shape["arm"]),
                          {"instance_type": "m1.large,m1.xlarge"}),
            AggregateInfo(5, "favoured", frozenset(names[5::7]),
                          {"ram_weight_multiplier": "2.0"}),
        ])
    return manager


def memory_per_host(size: int, seed: int, catalogue: bool) -> float:
    """Bytes allocated per node by a table of ``size`` nodes (tracemalloc),
    with the kind codes the request kinds' decisions make it keep."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    manager = build_host_manager(size, random.Random(seed), catalogue)
    scheduler = FilterScheduler(manager)
    for kind in request_kinds(manager, catalogue).values():
        decide(scheduler, kind)
    del scheduler
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    del manager
    return grown / size


# -- requests --------------------------------------------------------------------

def _spec(flavor_name: str, image_name: str, extra_specs: dict | None = None,
          zone: str | None = None, **filter_props) -> request.RequestSpec:
    flavor = next(f for f in flavors.FLAVORS if f.name == flavor_name)
    image = next(img for img, _ in flavors.IMAGES if img["name"] == image_name)
    uuid = "00000000-0000-4000-8000-000000000001"
    raw = flavors._request_spec(flavor, image, [uuid], "project-00")
    raw["instance_type"]["extra_specs"].update(extra_specs or {})
    raw["instance_properties"]["availability_zone"] = zone
    filter_props.setdefault("scheduler_hints", {})
    return request.parse(raw, filter_props)


def request_kinds(manager: HostManager, catalogue: bool) -> dict[str, CycleState]:
    """The decisions timed: common, extra specs, ARM image, anti-affinity,
    retry; with the catalogue also a JSON query, NUMA cells, a PCI device,
    an address range, a zone and a soft-anti-affinity group."""
    states = manager.table.states
    every = max(len(states) // 50, 1)
    placed = {states[i].host: 1 for i in range(0, len(states), every)}
    anti = GroupContext(ref="bench-group", policy="anti-affinity", rules={},
                        hosts=placed)
    kinds = {
        "m1.small, x86_64 image": CycleState(_spec("m1.small", "cirros-x86_64")),
        "s1.large (capabilities:disk_type=ssd)": CycleState(
            _spec("s1.large", "cirros-x86_64")),
        "m1.large, aarch64 image": CycleState(_spec("m1.large", "ubuntu-arm64")),
        "m1.medium, anti-affinity group of 50": CycleState(
            _spec("m1.medium", "cirros-x86_64"), group=anti),
        "m1.small, retry after 2 hosts failed": CycleState(_spec(
            "m1.small", "cirros-x86_64",
            retry={"num_attempts": 2, "hosts": [[states[0].host, states[0].nodename],
                                                [states[1].host, states[1].nodename]]})),
    }
    if catalogue:
        soft = GroupContext(ref="bench-soft", policy="soft-anti-affinity", rules={},
                            hosts=placed)
        query = ["and", [">=", "$free_ram_mb", 8192], ["<", "$num_io_ops", 2],
                 ["=", "$hypervisor_type", "kvm"]]
        kinds.update({
            "m1.small, JSON query": CycleState(_spec(
                "m1.small", "cirros-x86_64",
                scheduler_hints={"query": json.dumps(query)})),
            "m1.medium, 2 NUMA cells": CycleState(_spec(
                "m1.medium", "cirros-x86_64", {"hw:numa_nodes": "2"})),
            "m1.small, PCI device nic:1": CycleState(_spec(
                "m1.small", "cirros-x86_64", {"pci_passthrough:alias": "nic:1"})),
            "m1.small, near 10.0.0.0/20": CycleState(_spec(
                "m1.small", "cirros-x86_64",
                scheduler_hints={"build_near_host_ip": "10.0.0.0", "cidr": "/20"})),
            "m1.small in zone az1 (extra spec ssd)": CycleState(_spec(
                "m1.small", "cirros-x86_64",
                {"aggregate_instance_extra_specs:ssd": "true"}, zone="az1")),
            "m1.medium, soft-anti-affinity group": CycleState(
                _spec("m1.medium", "cirros-x86_64"), group=soft),
        })
    return kinds


# -- the column-wise decision and nova's way ---------------------------------------

def decide(scheduler: FilterScheduler, kind: CycleState):
    """One decision and its first candidate, ready to claim (what is timed)."""
    decision = scheduler.decide(dataclasses.replace(kind))
    if len(decision.order):
        decision.selection(0)
    return decision


def reference(scheduler: FilterScheduler, kind: CycleState,
              sampled: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """nova's way, host by host: (rows passing the filters, weighed rows best
    first, their totals). ``sampled``: the hosts the decision weighed when
    sampling (the reference weighs the same ones)."""
    cycle = dataclasses.replace(kind)
    spec = cycle.spec
    cycle.table = table = scheduler.host_manager.table
    forced = bool(spec.force_hosts or spec.force_nodes)
    filters = [] if forced else scheduler.filters
    cycle.prepare(filters + scheduler.weighers)
    rows, _, _ = scheduler._candidates(cycle)
    for flt in filters:
        if not len(rows):
            break
        rows = rows[cycle.ask_each(flt.host_passes, rows, bool)]
    passing = rows
    if sampled is not None:
        rows = sampled
    totals = np.zeros(len(rows), dtype=np.float64)
    if len(rows) > 1:
        states = table.states
        for weigher in scheduler.weighers:
            raw = cycle.ask_each(weigher._weigh_object, rows, np.float64)
            multipliers = np.array([weigher.weight_multiplier(states[r]) for r in rows])
            totals = totals + multipliers * normalize(raw, weigher.minval,
                                                      weigher.maxval)
    order = np.argsort(-totals, kind="stable")
    return passing, rows[order], totals[order]


def compare(decision, passing, rows, totals) -> list[str]:
    """How the column-wise decision differs from the reference ([] if not)."""
    problems = []
    if not np.array_equal(decision.filtered.rows, passing):
        problems.append(f"filters keep {len(decision.filtered.rows)} hosts, "
                        f"the reference {len(passing)}")
    ours = decision.weighed.rows
    if not np.array_equal(ours, rows):
        differ = int(np.argmax(ours != rows)) if len(ours) == len(rows) else 0
        problems.append(f"weighed order differs from position {differ}")
    elif not np.array_equal(decision.weighed.totals, totals):
        problems.append("weights differ")
    first = [int(decision.order[p]) for p in range(min(len(decision.order), 20))]
    if isinstance(decision.order, Ranking) and first != rows[:len(first)].tolist():
        problems.append("the decision's first candidates are not the reference's")
    return problems


def _percentile(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples) * 1000.0, q))


def run_case(scheduler, kind, repeats: int, breakdown) -> dict:
    """Time ``repeats`` decisions of one kind, then the reference once."""
    table = scheduler.host_manager.table
    # Heartbeats stay fresh however long the reference takes.
    table.col("service_updated")[:] = time.time()
    # A clean heap first (collecting the table build's or the previous
    # reference's garbage must not land in a sample), then warm-up
    # decisions, which also bring the columns back into the CPU's caches.
    gc.collect()
    before_warm_up = collections.Counter(breakdown or {})
    for _ in range(max(5, repeats // 10)):
        decide(scheduler, kind)
    if breakdown is not None:
        breakdown.subtract(breakdown - before_warm_up)
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        decision = decide(scheduler, kind)
        samples.append(time.perf_counter() - started)
    sampled = decision.weighed.candidates
    if len(sampled) == len(decision.filtered.rows):
        sampled = None
    started = time.perf_counter()
    passing, rows, totals = reference(scheduler, kind, sampled)
    reference_s = time.perf_counter() - started
    return {"p50": _percentile(samples, 50), "p99": _percentile(samples, 99),
            "reference_ms": reference_s * 1000.0, "passing": len(decision.filtered.rows),
            "weighed": len(decision.weighed.candidates),
            "problems": compare(decision, passing, rows, totals)}


def _wrap_for_breakdown(scheduler: FilterScheduler, totals: collections.Counter) -> None:
    """Accumulate the time of each filter, weigher and stage into ``totals``."""
    def timed(obj, method, label):
        inner = getattr(obj, method)

        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                totals[label] += time.perf_counter() - started
        setattr(obj, method, wrapper)

    for flt in scheduler.filters:
        timed(flt, "filter_rows", f"filter  {type(flt).__name__}")
    for weigher in scheduler.weighers:
        timed(weigher, "_raw_weights", f"weigher {type(weigher).__name__}")
    timed(HostFilterHandler, "run", "stage   filter (all filters)")
    timed(HostWeightHandler, "weigh", "stage   weigh (all weighers, normalise, sum)")
    timed(Ranking, "_sorted", "stage   order the first candidates")


def run(sizes, seed: int, catalogue: bool, sample: int, breakdown: bool,
        repeats: int | None, memory: bool = True) -> bool:
    """Every size and request kind of one configuration; True if all agree."""
    configure(catalogue, sample)
    what = "every built-in filter and weigher" if catalogue else \
        "the default filters and weighers"
    print(f"\n== {what}" + (f", max_hosts_to_score = {sample}" if sample else ""))
    agree = True
    for size in sizes:
        started = time.perf_counter()
        manager = build_host_manager(size, random.Random(seed), catalogue)
        build_s = time.perf_counter() - started
        scheduler = FilterScheduler(manager)
        totals: collections.Counter | None = None
        if breakdown:
            totals = collections.Counter()
            originals = {(cls, m): vars(cls)[m] for cls, m in (
                (HostFilterHandler, "run"), (HostWeightHandler, "weigh"),
                (Ranking, "_sorted"))}
            _wrap_for_breakdown(scheduler, totals)
        count = repeats or _REPEATS.get(size, max(20, 400_000 // size))
        print(f"\n{size:,} hosts (table built in {build_s:.2f} s; {count} decisions "
              "per kind, then the reference once)")
        print(f"  {'request':42s} {'p50 ms':>8s} {'p99 ms':>8s} {'ref ms':>10s} "
              f"{'ratio':>8s}  hosts passing")
        decisions = 0
        for label, kind in request_kinds(manager, catalogue).items():
            case = run_case(scheduler, kind, count, totals)
            decisions += count
            weighed = (f", {case['weighed']:,} weighed"
                       if case["weighed"] < case["passing"] else "")
            print(f"  {label:42s} {case['p50']:8.3f} {case['p99']:8.3f} "
                  f"{case['reference_ms']:10.1f} "
                  f"{case['reference_ms'] / case['p50']:7.0f}x"
                  f"  {case['passing']:,}{weighed}", flush=True)
            for problem in case["problems"]:
                agree = False
                print(f"    DIFFERS FROM THE REFERENCE: {problem}")
        if breakdown:
            for (cls, method), original in originals.items():
                setattr(cls, method, original)
            for label, seconds in sorted(totals.items(), key=lambda kv: -kv[1]):
                print(f"    {label:46s} {seconds / decisions * 1000:8.3f} ms/decision")
        del manager, scheduler
        gc.collect()
        if memory:
            per_host = memory_per_host(size, seed, catalogue)
            print(f"  memory per host: {per_host:,.0f} bytes "
                  f"({per_host * size / 2**20:,.1f} MiB for the table)")
    return agree


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000",
                        help="comma-separated fleet sizes (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--catalogue", action="store_true",
                        help="enable every built-in filter and weigher")
    parser.add_argument("--sample", type=int, default=0, metavar="N",
                        help="[filter_scheduler] max_hosts_to_score (default 0: "
                        "weigh every host that passes)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="decisions timed per request kind (default by size)")
    parser.add_argument("--breakdown", action="store_true",
                        help="also print the time of each filter, weigher and stage")
    parser.add_argument("--smoke", action="store_true",
                        help="small fleets, few decisions, both configurations "
                        "(seconds; for CI)")
    args = parser.parse_args(argv)
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}; per decision: "
          "prepare + filter + weigh + first candidate, no database")
    if args.smoke:
        agree = all([run(_SMOKE_SIZES, args.seed, catalogue, args.sample, False,
                         args.repeats or _SMOKE_REPEATS, memory=False)
                     for catalogue in (False, True)])
    else:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
        agree = run(sizes, args.seed, args.catalogue, args.sample, args.breakdown,
                    args.repeats)
    if not agree:
        print("\nFAILED: the column-wise decisions differ from the per-host reference")
        return 1
    print("\nOK: every decision chose the same hosts in the same order as the "
          "per-host reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
