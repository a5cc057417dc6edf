"""Time of one decision's filter + weigh path, and memory per host.

    python bench/decision_bench.py [--sizes 1000,10000,100000] [--seed 0]
                                   [--breakdown]

Builds ``HostManager().table`` directly (``HostTable.upsert`` with
``HostState`` objects, no database, no RPC) for each fleet size, with the
demo's host shapes (nova_sched.sim.flavors) and random claims of 0-70% of
each node, then times ``FilterScheduler.decide()`` (prepare, filter and
weigh; no claim) with the default enabled filters and weighers for a few
kinds of request. Prints
figures, not pass/fail: see bench/README.md.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gc
import json
import random
import statistics
import sys
import time
import tracemalloc

import nova_sched  # noqa: F401  (selects oslo.service's threading backend)

from nova_sched.scheduler import request
from nova_sched.scheduler.cycle_state import CycleState
from nova_sched.scheduler.filter_scheduler import FilterScheduler
from nova_sched.scheduler.host_manager import HostManager
from nova_sched.scheduler.host_state import HostState
from nova_sched.scheduler.server_groups import GroupContext
from nova_sched.sim import flavors

# Decisions timed per request kind, by fleet size (enough for a stable median).
_REPEATS = {1_000: 300, 10_000: 60, 100_000: 12}


def _cpu_info(shape: flavors.HostShape) -> str:
    return json.dumps({"arch": shape.arch, "model": "bench", "vendor": "nova-sched",
                       "topology": {"sockets": 1, "cores": shape.vcpus, "threads": 1},
                       "features": ["sse4_2", "avx2"]})


def build_host_manager(size: int, rng: random.Random) -> HostManager:
    """A HostManager whose table holds ``size`` live nodes (no database)."""
    manager = HostManager()
    table = manager.table
    now = time.time()
    cpu_infos = {shape.name: _cpu_info(shape) for shape in flavors.HOST_SHAPES}
    for node_id, (name, shape) in enumerate(flavors.fleet(rng, size), start=1):
        used = rng.random() * 0.7
        stats = dict(shape.stats)
        stats.update(num_instances=0, io_workload=0)
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
            metrics=[],
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
    return manager


def memory_per_host(size: int, seed: int) -> float:
    """Bytes allocated per node by a table of ``size`` nodes (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    manager = build_host_manager(size, random.Random(seed))
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    del manager
    return grown / size


def _spec(flavor_name: str, image_name: str, **extra_filter_props) -> request.RequestSpec:
    flavor = next(f for f in flavors.FLAVORS if f.name == flavor_name)
    image = next(img for img, _ in flavors.IMAGES if img["name"] == image_name)
    uuid = "00000000-0000-4000-8000-000000000001"
    raw = flavors._request_spec(flavor, image, [uuid], "project-00")
    return request.parse(raw, {"scheduler_hints": {}, **extra_filter_props})


def request_kinds(manager: HostManager) -> dict[str, CycleState]:
    """The decisions timed: common, extra specs, ARM image, anti-affinity, retry."""
    states = manager.table.states
    anti = GroupContext(
        ref="bench-group", policy="anti-affinity", rules={},
        hosts={states[i].host: 1 for i in range(0, len(states), max(len(states) // 50, 1))})
    return {
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


def _time_decisions(scheduler: FilterScheduler, kind: CycleState, repeats: int,
                    breakdown: collections.Counter | None) -> tuple[float, int]:
    """Median milliseconds of one decision; the number of survivors."""
    # Warm up (not counted in the breakdown), and start from a clean heap so
    # that collecting the table build's garbage does not land in a sample.
    before_warm_up = collections.Counter(breakdown or {})
    for _ in range(max(2, repeats // 10)):
        scheduler.decide(dataclasses.replace(kind))
    if breakdown is not None:
        breakdown.subtract(breakdown - before_warm_up)
    gc.collect()
    samples = []
    survivors = 0
    for _ in range(repeats):
        started = time.perf_counter()
        decision = scheduler.decide(dataclasses.replace(kind))
        samples.append(time.perf_counter() - started)
        survivors = len(decision.order)
    return statistics.median(samples) * 1000.0, survivors


def _wrap_for_breakdown(scheduler: FilterScheduler, totals: collections.Counter) -> None:
    """Accumulate the time of each filter and weigher into ``totals``."""
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
        timed(weigher, "weigh_rows", f"weigher {type(weigher).__name__}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000",
                        help="comma-separated fleet sizes (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--breakdown", action="store_true",
                        help="also print the time of each filter and weigher")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    print(f"python {sys.version.split()[0]}; prepare + filter + weigh per decision (median), "
          "default filters and weighers, no database")
    for size in sizes:
        started = time.perf_counter()
        manager = build_host_manager(size, random.Random(args.seed))
        build_s = time.perf_counter() - started
        scheduler = FilterScheduler(manager)
        totals: collections.Counter = collections.Counter()
        if args.breakdown:
            _wrap_for_breakdown(scheduler, totals)
        repeats = _REPEATS.get(size, max(10, 300_000 // size))
        print(f"\n{size:,} hosts (table built in {build_s:.2f} s; "
              f"{repeats} decisions per kind)")
        decisions = 0
        for label, kind in request_kinds(manager).items():
            ms, survivors = _time_decisions(scheduler, kind, repeats, totals)
            decisions += repeats
            print(f"  {label:42s} {ms:8.3f} ms  ({survivors:,} hosts pass)")
        if args.breakdown:
            for label, seconds in totals.most_common():
                print(f"    {label:40s} {seconds / decisions * 1000:8.3f} ms/decision")
        del manager, scheduler
        gc.collect()
        per_host = memory_per_host(size, args.seed)
        print(f"  memory per host: {per_host:,.0f} bytes "
              f"({per_host * size / 2**20:,.1f} MiB for the table)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
