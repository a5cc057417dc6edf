"""The shapes of the benchmark's nodes in Placement (issue 39).

``plain``: every node as nova-compute with the fake driver leaves it (one
root provider, VCPU / MEMORY_MB / DISK_GB, the driver's traits).

``varied``: nodes as a libvirt cloud's nova-compute leaves them, made from
the same template, deterministic per node index ``i``:

* every root holds 80-130 traits as libvirt reports them: the driver's
  capabilities, ``COMPUTE_NODE`` and ``OWNER_NOVA``, then CPU flags and
  ``COMPUTE_*`` capabilities (real names from os-traits) up to a count
  drawn from ``i``; the AVX-512 family (``HW_CPU_X86_AVX512F`` ...) on
  about 30 % of the roots (the trait a flavor requires);
* every root is in one of ``aggregate_count`` Placement aggregates, one in
  ten in a second one;
* one node in ten has more (``i % 100``): 0-3 a GPU host, two physical GPU
  child providers with 8 ``VGPU`` each (libvirt's nested ``<host>_pci_...``
  providers); 4-6 a PCI host, two child providers holding one
  ``CUSTOM_PCI_8086_1572`` each with ``COMPUTE_MANAGED_PCI_DEVICE``
  (``[pci] report_in_placement``); 7-9 a dedicated-CPU host, 16 ``PCPU``
  on the root (``[compute] cpu_dedicated_set``) and a NUMA topology in its
  ``compute_nodes`` row (two cells of 8 dedicated CPUs).

Pure Python (no nova import): ``nova_cloud_register.py`` writes the rows,
``nova_cloud_bench.py`` reads the constants to build flavors and check
claims.
"""

from __future__ import annotations

import random
import uuid

SHAPES = ("plain", "varied")
REQUIRED_TRAIT = "HW_CPU_X86_AVX512F"
PCI_RC = "CUSTOM_PCI_8086_1572"
PCI_TRAIT = "COMPUTE_MANAGED_PCI_DEVICE"
GPUS_PER_HOST, VGPU_PER_GPU = 2, 8
PCI_PER_HOST = 2
PCPU_PER_HOST = 16
AVX512_SHARE = 0.3

# Traits a filler never adds: they change what nova asks or refuses
# (a disabled compute, remote-managed ports, hyperthreading for
# cpu_thread_policy) or belong to the AVX-512 draw.
_NEVER = {"COMPUTE_STATUS_DISABLED", "COMPUTE_REMOTE_MANAGED_PORTS",
          "HW_CPU_HYPERTHREADING", PCI_TRAIT}
# What every x86-64 host of the last decade reports.
_COMMON_CPU = ("HW_CPU_X86_MMX", "HW_CPU_X86_SSE", "HW_CPU_X86_SSE2", "HW_CPU_X86_SSE3",
               "HW_CPU_X86_SSSE3", "HW_CPU_X86_SSE41", "HW_CPU_X86_SSE42",
               "HW_CPU_X86_AVX", "HW_CPU_X86_AVX2", "HW_CPU_X86_AESNI",
               "HW_CPU_X86_CLMUL", "HW_CPU_X86_FMA3", "HW_CPU_X86_F16C",
               "HW_CPU_X86_BMI", "HW_CPU_X86_BMI2", "HW_CPU_X86_VMX")


def shape_of(index: int, shapes: str) -> str:
    """``vm``, ``gpu``, ``pci`` or ``pcpu``."""
    if shapes != "varied":
        return "vm"
    bucket = index % 100
    return "gpu" if bucket < 4 else "pci" if bucket < 7 else "pcpu" if bucket < 10 else "vm"


def _uuid(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, name))


def aggregate_uuid(k: int) -> str:
    return _uuid(f"bench-aggregate-{k}")


def root_traits(index: int, base: list[str], known: list[str]) -> list[str]:
    """80-130 traits of root ``index``: ``base`` (the driver's), the
    common CPU flags, AVX-512 on about 30 %, then others of ``known``
    (os-traits' names) drawn from the index."""
    rng = random.Random(index)
    target = rng.randint(80, 130)
    avx512 = [t for t in known if t.startswith("HW_CPU_X86_AVX512")]
    chosen = set(base) | {t for t in _COMMON_CPU if t in known}
    if rng.random() < AVX512_SHARE:
        chosen |= set(avx512)
    pool = sorted(t for t in known
                  if (t.startswith("COMPUTE_") or t.startswith("HW_CPU_X86_"))
                  and t not in _NEVER and t not in avx512 and t not in chosen)
    rng.shuffle(pool)
    while len(chosen) < target and pool:
        chosen.add(pool.pop())
    return sorted(chosen)


def aggregates_of(index: int, count: int) -> list[str]:
    aggs = [aggregate_uuid(index % count)]
    if index % 10 == 5 and count > 1:
        aggs.append(aggregate_uuid((index // count + 1 + index) % count))
    return sorted(set(aggs))


def _inventory(total: int) -> dict:
    return {"total": total, "reserved": 0, "min_unit": 1, "max_unit": total,
            "step_size": 1, "allocation_ratio": 1.0}


def root_extra_inventory(shape: str) -> dict[str, dict]:
    return {"PCPU": _inventory(PCPU_PER_HOST)} if shape == "pcpu" else {}


def children(host: str, shape: str) -> list[dict]:
    """Child providers of a node: name, uuid, inventory, traits."""
    if shape == "gpu":
        return [{"name": f"{host}_pci_0000_{0x81 + k:02x}_00_0",
                 "uuid": _uuid(f"{host}_pci_0000_{0x81 + k:02x}_00_0"),
                 "inventory": {"VGPU": _inventory(VGPU_PER_GPU)}, "traits": []}
                for k in range(GPUS_PER_HOST)]
    if shape == "pci":
        return [{"name": f"{host}_0000:3b:00.{k}", "uuid": _uuid(f"{host}_0000:3b:00.{k}"),
                 "inventory": {PCI_RC: _inventory(1)}, "traits": [PCI_TRAIT]}
                for k in range(PCI_PER_HOST)]
    return []


# The flavors of ``--flavors varied``: name -> (vcpus, extra specs,
# what the claim must hold in total; where the non-root part must be).
FLAVORS = {
    "plain": (1, {}, {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}),
    "trait": (1, {f"trait:{REQUIRED_TRAIT}": "required"},
              {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}),
    "pcpu": (2, {"hw:cpu_policy": "dedicated"},
             {"PCPU": 2, "MEMORY_MB": 512, "DISK_GB": 1}),
    "vgpu": (1, {"resources:VGPU": "1"},
             {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1, "VGPU": 1}),
    "pci": (1, {f"resources:{PCI_RC}": "1", f"trait:{PCI_TRAIT}": "required"},
            {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1, PCI_RC: 1}),
}
FLAVOR_SETS = {"plain": ("plain",), "varied": ("plain", "trait", "pcpu", "vgpu", "pci")}
# Resource classes held by child providers, not the root, in these shapes.
CHILD_CLASSES = {"VGPU", PCI_RC}
