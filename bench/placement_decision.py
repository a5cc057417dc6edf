"""One whole decision where the host source keeps Placement's model, timed.

    python bench/placement_decision.py [--sizes 10000,100000] [--repeats N]

For each fleet size, a host table of ``size`` compute nodes (no database)
and Placement's model of their providers as nova 34's libvirt driver
leaves them: each root with VCPU (ratio 16), MEMORY_MB (1.5), DISK_GB,
OWNER_NOVA and 80-130 traits of os-traits' kinds; one node in ten with two
vGPU children; one in ten with PCPU instead of VCPU; random usage. Then,
for each kind of request, ``FilterScheduler.decide`` and ``selection(0)``
(the Placement step, nova 34's default filters, the weighers, the chosen
host's candidate) timed as the cycle calls them, with p50 and p99 and the
process's peak memory (tracemalloc is off while timing).

What it does not include: reading Placement's database (bench/
placement_db_read.py), RPC, the claim (bench/nova_cloud_bench.py has them
end to end).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import time
import types
import uuid as uuidlib
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import nova_sched  # noqa: E402,F401  (selects oslo.service's threading backend)
import numpy as np  # noqa: E402

from nova_sched.conf import CONF  # noqa: E402
from nova_sched.scheduler.cloud.host_state import HostState, HostTable  # noqa: E402
from nova_sched.scheduler.decision.cycle_state import CycleState  # noqa: E402
from nova_sched.scheduler.filter_scheduler import FilterScheduler  # noqa: E402
from nova_sched.scheduler.placement_model.providers import (  # noqa: E402
    Inventory, Provider, ProviderModel)
from nova_sched.scheduler.wire import request  # noqa: E402

NOVA_FILTERS = ["ComputeFilter", "ComputeCapabilitiesFilter", "ImagePropertiesFilter",
                "ServerGroupAntiAffinityFilter", "ServerGroupAffinityFilter"]
# Trait names of the kinds libvirt reports (CPU flags, compute capabilities).
TRAITS = ([f"HW_CPU_X86_{flag}" for flag in (
    "AVX", "AVX2", "AVX512F", "AVX512CD", "AVX512BW", "AVX512DQ", "AVX512VL", "SSE",
    "SSE2", "SSE3", "SSSE3", "SSE41", "SSE42", "AESNI", "FMA3", "BMI", "BMI2", "F16C",
    "CLMUL", "SHA", "VMX", "SVM", "MMX", "ABM", "MPX")]
    + [f"COMPUTE_{kind}_{n}" for kind in ("NET_VIF_MODEL", "STORAGE_BUS", "GRAPHICS_MODEL",
                                          "IMAGE_TYPE", "SOUND_MODEL") for n in range(22)])
# The one cell every node is in (a move is kept there).
CELL = "1f0c9e5e-6f55-4c1e-9d59-2c1f5a7b6d3e"
# Per kind of request: the flavor's extra specs, and what conductor adds
# beside them (filter properties).
KINDS = {
    "plain 2 vCPU / 4 GB": ({}, {}),
    "trait required": ({"trait:HW_CPU_X86_AVX512F": "required"}, {}),
    "vGPU": ({"resources:VGPU": "1"}, {}),
    "dedicated CPUs": ({"hw:cpu_policy": "dedicated"}, {}),
    # nova 34's live migration without a host: the source ignored, the
    # instance's cell kept.
    "live migration": ({}, {"ignore_hosts": ["node-0"], "requested_destination": {
        "host": None, "node": None, "cell": CELL}}),
}


def build(size: int, rng: random.Random):
    """The host table and the model of ``size`` nodes."""
    table, model, providers = HostTable(capacity=size), ProviderModel(), []
    now = time.time()
    for n in range(size):
        node = str(uuidlib.UUID(int=rng.getrandbits(128)))
        traits = frozenset(rng.sample(TRAITS, rng.randint(80, min(130, len(TRAITS))))
                           + ["OWNER_NOVA"])
        pinned = n % 10 == 1
        cpu = "PCPU" if pinned else "VCPU"
        inventories = {cpu: Inventory(64, allocation_ratio=1.0 if pinned else 16.0),
                       "MEMORY_MB": Inventory(262144, reserved=512, allocation_ratio=1.5),
                       "DISK_GB": Inventory(2000)}
        usages = {cpu: rng.randint(0, 60 if pinned else 900),
                  "MEMORY_MB": rng.randint(0, 380000), "DISK_GB": rng.randint(0, 1900)}
        providers.append(Provider(uuid=node, name=f"node-{n}", generation=1,
                                  inventories=inventories, usages=usages, traits=traits))
        if n % 10 == 0:
            for gpu in range(2):
                providers.append(Provider(
                    uuid=str(uuidlib.UUID(int=rng.getrandbits(128))),
                    name=f"node-{n}_pgpu{gpu}", generation=1, parent_uuid=node,
                    root_uuid=node, inventories={"VGPU": Inventory(4)},
                    usages={"VGPU": rng.randint(0, 4)}))
        state = HostState(host=f"node-{n}", nodename=f"node-{n}", node_id=n + 1,
                          hypervisor_hostname=f"node-{n}", uuid=node, cell_uuid=CELL,
                          hypervisor_type="QEMU", hypervisor_version=8002000)
        table.upsert(state, {"memory_mb": 393216, "vcpus": 1024, "disk_mb": 2000 * 1024,
                             "service_updated": now, "disabled": False})
    model.apply(providers, traits=set(TRAITS) | {"OWNER_NOVA", "COMPUTE_STATUS_DISABLED"},
                classes={"VCPU", "PCPU", "MEMORY_MB", "DISK_GB", "VGPU"})
    return table, model


def host_manager(table: HostTable, model: ProviderModel):
    """What the driver reads of a host manager, over this table and model."""
    import threading

    source = types.SimpleNamespace(provider_model=model, min_compute_version=lambda: 73)
    return types.SimpleNamespace(table=table, source=source, lock=threading.RLock(),
                                 candidates=table.active_rows,
                                 unreachable_cells=frozenset,
                                 hosts_of=lambda uuids: {})


def spec_of(extra_specs: dict, fprops: dict):
    body = {"instance_properties": {"uuid": str(uuidlib.uuid4()), "memory_mb": 4096,
                                    "vcpus": 2, "root_gb": 20, "ephemeral_gb": 0,
                                    "project_id": "p1", "user_id": "u1"},
            "instance_type": {"name": "bench", "memory_mb": 4096, "vcpus": 2,
                              "root_gb": 20, "ephemeral_gb": 0, "swap": 0,
                              "extra_specs": extra_specs},
            "image": {"id": "img", "properties": {}}, "num_instances": 1}
    return request.parse(body, fprops)


def run(size: int, repeats: int, rng: random.Random) -> list[dict]:
    started = time.perf_counter()
    table, model = build(size, rng)
    built = time.perf_counter() - started
    driver = FilterScheduler(host_manager(table, model))
    rows = []
    for kind, (extra_specs, fprops) in KINDS.items():
        spec = spec_of(extra_specs, fprops)
        times, hosts = [], 0
        for attempt in range(repeats + 3):
            cycle = CycleState(spec=spec, hosts_of=lambda uuids: {})
            t0 = time.perf_counter()
            decision = driver.decide(cycle)
            if len(decision.order):
                chosen = decision.selection(0)
                assert chosen.candidate is not None
            elapsed = time.perf_counter() - t0
            if attempt >= 3:  # the first ones build the index and the kept lists
                times.append(elapsed)
            hosts = len(decision.filtered.rows)
        times_ms = np.array(times) * 1000
        rows.append({"size": size, "providers": len(model.providers), "kind": kind,
                     "hosts_left": hosts, "p50_ms": float(np.percentile(times_ms, 50)),
                     "p99_ms": float(np.percentile(times_ms, 99)),
                     "setup_s": built})
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for row in rows:
        row["peak_rss_mb"] = peak
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--repeats", type=int, default=0,
                        help="decisions timed per kind (default 200, 50 at 100,000)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    CONF([], project="nova-sched")
    CONF.set_override("enabled_filters", NOVA_FILTERS, "filter_scheduler")
    rng = random.Random(0)
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        repeats = args.repeats or (50 if size >= 100_000 else 200)
        for row in run(size, repeats, rng):
            results.append(row)
            if not args.json:
                print(f"{row['size']:>7} nodes ({row['providers']:>7} providers)  "
                      f"{row['kind']:<22} hosts left {row['hosts_left']:>7}  "
                      f"p50 {row['p50_ms']:7.2f} ms  p99 {row['p99_ms']:7.2f} ms  "
                      f"peak RSS {row['peak_rss_mb']:.0f} MB", flush=True)
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
