"""What Placement's candidate search costs in memory (placement_model.candidates).

    python bench/placement_search.py [--roots 10000 100000] [--repeat 200]

Per cloud size it prints the index build, the index catching up after one
claim (``add_usage``), and per request: ``search(...).hosts()`` (the
decision's step), ``removed()`` (the reasons, asked only when hosts are
missing or for ``explain``) and ``candidates_of`` one host (the claim's
candidate). Clouds: flat roots with VCPU, MEMORY_MB and DISK_GB, 100 traits
each out of 300, one of 20 aggregates each (nova's libvirt nodes); and the
same number of providers as roots with two NUMA children and a GPU child
each (trees).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nova_sched.scheduler.placement_model import candidates  # noqa: E402
from nova_sched.scheduler.placement_model.providers import (  # noqa: E402
    Inventory, Provider, ProviderModel)
from nova_sched.scheduler.placement_model.resource_request import (  # noqa: E402
    ResourceRequest)
from nova_sched.scheduler.placement_model.search_context import index_of  # noqa: E402

TRAITS = [f"CUSTOM_TRAIT_{i}" for i in range(300)] + [
    "OWNER_NOVA", "COMPUTE_STATUS_DISABLED", "CUSTOM_SSD", "HW_CPU_X86_AVX2"]
AGGS = [f"00000000-0000-4000-8000-{i:012d}" for i in range(20)]


def flat_cloud(n: int, seed: int = 1) -> ProviderModel:
    rnd = random.Random(seed)
    providers = []
    for i in range(n):
        traits = set(rnd.sample(TRAITS[:300], 100)) | {"OWNER_NOVA"}
        if rnd.random() < 0.1:
            traits.add("CUSTOM_SSD")
        if rnd.random() < 0.01:
            traits.add("COMPUTE_STATUS_DISABLED")
        providers.append(Provider(
            uuid=f"cn-{i}", inventories={
                "VCPU": Inventory(64, allocation_ratio=4.0),
                "MEMORY_MB": Inventory(262144, reserved=512, allocation_ratio=1.5),
                "DISK_GB": Inventory(2000)},
            usages={"VCPU": rnd.randint(0, 256), "MEMORY_MB": rnd.randint(0, 393216),
                    "DISK_GB": rnd.randint(0, 2000)},
            traits=frozenset(traits), aggregates=frozenset({rnd.choice(AGGS)})))
    return _model(providers)


def tree_cloud(n: int, seed: int = 1) -> ProviderModel:
    """``n`` providers as trees: a root with memory, two NUMA nodes with
    VCPU, one GPU with VGPU."""
    rnd = random.Random(seed)
    providers = []
    for i in range(n // 4):
        root = f"cn-{i}"
        providers.append(Provider(uuid=root, inventories={"MEMORY_MB": Inventory(262144)},
                                  usages={"MEMORY_MB": rnd.randint(0, 262144)},
                                  traits=frozenset({"OWNER_NOVA"})))
        for numa in range(2):
            providers.append(Provider(
                uuid=f"{root}-numa{numa}", parent_uuid=root, root_uuid=root,
                inventories={"VCPU": Inventory(32, allocation_ratio=4.0)},
                usages={"VCPU": rnd.randint(0, 128)}))
        providers.append(Provider(uuid=f"{root}-gpu", parent_uuid=root, root_uuid=root,
                                  inventories={"VGPU": Inventory(4)},
                                  usages={"VGPU": rnd.randint(0, 4)}))
    return _model(providers)


def _model(providers) -> ProviderModel:
    model = ProviderModel()
    model.apply(providers, traits=TRAITS, classes={"VCPU", "MEMORY_MB", "DISK_GB", "VGPU"})
    return model


def nova_request(**resources) -> ResourceRequest:
    request = ResourceRequest(root_required={"OWNER_NOVA"},
                              root_forbidden={"COMPUTE_STATUS_DISABLED"}, limit=1000)
    request.unnumbered.resources = dict(resources)
    return request


def _ms(samples: list[float]) -> str:
    samples = sorted(samples)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    return f"p50 {statistics.median(samples) * 1e3:8.3f} ms  p99 {p99 * 1e3:8.3f} ms"


def _time(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def run(name: str, model: ProviderModel, requests: dict, repeat: int) -> None:
    t0 = time.perf_counter()
    index_of(model)
    print(f"{name}: {len(model.providers):,} providers, index built in "
          f"{(time.perf_counter() - t0) * 1e3:.0f} ms")
    uuids = [p.uuid for p in model.roots()]

    def one_claim():
        model.add_usage({random.choice(uuids): {"MEMORY_MB": 1}})
        index_of(model)
    print(f"  index after one claim          {_ms(_time(one_claim, repeat))}")
    for label, request in requests.items():
        search = candidates.search(model, [request])
        hosts = search.hosts()
        print(f"  {label}: {len(hosts):,} hosts")
        print(f"    search + hosts()             "
              f"{_ms(_time(lambda: candidates.search(model, [request]).hosts(), repeat))}")
        print(f"    removed()                    "
              f"{_ms(_time(lambda: candidates.search(model, [request]).removed(), max(5, repeat // 10)))}")
        if hosts:
            host = sorted(hosts)[0]
            print(f"    candidates_of(one host)      "
                  f"{_ms(_time(lambda: search.candidates_of(host), repeat))}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roots", type=int, nargs="+", default=[10000, 100000])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args(argv)
    plain = nova_request(VCPU=4, MEMORY_MB=8192, DISK_GB=40)
    ssd = nova_request(VCPU=4, MEMORY_MB=8192, DISK_GB=40)
    ssd.unnumbered.required_traits = {"CUSTOM_SSD"}
    for n in args.roots:
        run(f"flat {n:,}", flat_cloud(n), {"plain flavor": plain, "trait:CUSTOM_SSD": ssd},
            args.repeat)
    vgpu = nova_request(VCPU=4, MEMORY_MB=8192)
    vgpu.group("1").resources = {"VGPU": 1}
    for n in args.roots:
        run(f"trees {n:,}", tree_cloud(n), {"plain flavor": nova_request(VCPU=4, MEMORY_MB=8192),
                                            "vGPU flavor": vgpu}, max(5, args.repeat // 10))
    return 0


if __name__ == "__main__":
    sys.exit(main())
