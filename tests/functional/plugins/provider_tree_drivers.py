"""Fake virt drivers that report Placement's richer provider trees.

nova's own fake drivers report only VCPU, MEMORY_MB and DISK_GB on one
root provider, and no NUMA topology: enough for plain VMs, not for the
clouds issue 39 is about. These drivers subclass nova's ``FakeDriver`` and
change only what a real driver of that kind reports to Placement (through
``update_provider_tree``) and to the resource tracker (through
``get_available_resource``), so that nova-scheduler, nova-sched and
nova-compute's own claim see the same cloud a libvirt or Ironic deployment
would show them.

They run inside nova-compute, from the nova venv, so they import only nova
and the standard library. nova loads ``compute_driver`` relative to
``nova.virt``; ``nova_compute_plugins.py`` beside this file registers this
module as ``nova.virt.provider_tree_drivers`` and then runs nova-compute,
so the driver of a compute is, e.g.,
``provider_tree_drivers.PinnedCPUDriver`` (``novacloud.start_compute``
uses that launcher for any driver whose module lives in this folder).

Every host is small (4 CPUs, 4 GB, 100 GB of local disk) so that the
tests' counts are exact and a flavor's disk larger than 100 GB fits only
where a sharing provider serves it.
"""

from __future__ import annotations

import os_traits

from nova import objects
from nova.virt import fake

# The Placement aggregate the diskless computes are put in; the test makes
# a sharing DISK_GB provider in the same aggregate.
SHARED_DISK_AGGREGATE = "5e0f5d4c-3d1b-4c1e-9a51-6c7a2f0d5a11"
# Child providers of GPUHostDriver: names (after the node's) and VGPU each.
PGPUS = ("pgpu0", "pgpu1")
VGPUS_PER_PGPU = 1
# Nodes of BaremetalDriver: (suffix of the node's name, resource class).
BAREMETAL_NODES = (("gold-0", "CUSTOM_BAREMETAL_GOLD"),
                   ("gold-1", "CUSTOM_BAREMETAL_GOLD"),
                   ("silver-0", "CUSTOM_BAREMETAL_SILVER"))


def _inventory(total: int, ratio: float = 1.0, reserved: int = 0) -> dict:
    """One inventory record as nova's report client sends it."""
    return {"total": total, "reserved": reserved, "min_unit": 1, "max_unit": total,
            "step_size": 1, "allocation_ratio": ratio}


class SmallHostDriver(fake.FakeDriver):
    """A shared-CPU host: 4 VCPU, 4 GB, 100 GB, no trait of its own."""

    vcpus = 4
    memory_mb = 4096
    local_gb = 100
    # Traits this host reports on its root beside nova's own capability
    # traits (the resource tracker adds those and OWNER_NOVA).
    extra_traits: tuple[str, ...] = ()

    def update_provider_tree(self, provider_tree, nodename, allocations=None):
        super().update_provider_tree(provider_tree, nodename, allocations)
        if self.extra_traits:
            provider_tree.add_traits(nodename, *self.extra_traits)


class SSDHostDriver(SmallHostDriver):
    """A shared-CPU host whose root has ``CUSTOM_SSD`` (as an operator sets it)."""

    extra_traits = ("CUSTOM_SSD",)


class AVX2HostDriver(SmallHostDriver):
    """A shared-CPU host whose root has ``HW_CPU_X86_AVX2`` (as libvirt reports it)."""

    extra_traits = (os_traits.HW_CPU_X86_AVX2,)


class PinnedCPUDriver(SmallHostDriver):
    """A host with ``[compute] cpu_dedicated_set`` covering all its CPUs.

    libvirt then reports PCPU instead of VCPU and a NUMA topology whose
    cell has every CPU in ``pcpuset``: nova's NUMATopologyFilter and the
    compute's own claim pin a dedicated-CPU instance against that
    topology, so both are reported, as libvirt does.
    """

    capabilities = dict(fake.FakeDriver.capabilities, supports_pcpus=True)

    def get_available_resource(self, nodename):
        resources = super().get_available_resource(nodename)
        if resources:
            resources["numa_topology"] = self._numa_topology()._to_json()
        return resources

    def _numa_topology(self):
        cpus = set(range(self.vcpus))
        cell = objects.NUMACell(
            id=0, socket=0, cpuset=set(), pcpuset=cpus, memory=self.memory_mb,
            cpu_usage=0, memory_usage=0, pinned_cpus=set(),
            siblings=[{cpu} for cpu in sorted(cpus)],
            mempages=[objects.NUMAPagesTopology(size_kb=4,
                                                total=self.memory_mb * 256, used=0)],
            network_metadata=objects.NetworkMetadata(physnets=set(), tunneled=False))
        return objects.NUMATopology(cells=[cell])

    def update_provider_tree(self, provider_tree, nodename, allocations=None):
        super().update_provider_tree(provider_tree, nodename, allocations)
        inventory = dict(provider_tree.data(nodename).inventory)
        vcpu = inventory.pop("VCPU")
        inventory["PCPU"] = dict(vcpu, allocation_ratio=1.0, reserved=0)
        provider_tree.update_inventory(nodename, inventory)


class GPUHostDriver(SmallHostDriver):
    """A shared-CPU host with two physical GPUs, each a child provider with VGPU.

    As libvirt's mdev support does: the root keeps VCPU, MEMORY_MB and
    DISK_GB; ``<node>_pgpuN`` under it has the VGPU inventory.
    """

    def update_provider_tree(self, provider_tree, nodename, allocations=None):
        super().update_provider_tree(provider_tree, nodename, allocations)
        for pgpu in PGPUS:
            name = f"{nodename}_{pgpu}"
            if not provider_tree.exists(name):
                provider_tree.new_child(name, nodename)
            provider_tree.update_inventory(name, {"VGPU": _inventory(VGPUS_PER_PGPU)})
            provider_tree.add_traits(name, os_traits.OWNER_NOVA)


class DisklessHostDriver(SmallHostDriver):
    """A shared-CPU host without local disk, in the shared storage's aggregate.

    Its root has no DISK_GB inventory: a flavor's disk is served by a
    provider with DISK_GB and ``MISC_SHARES_VIA_AGGREGATE`` in the same
    Placement aggregate (the test makes it). The aggregate is added, not
    set, so that nova's aggregate API may add others beside it.
    """

    local_gb = 0

    def update_provider_tree(self, provider_tree, nodename, allocations=None):
        super().update_provider_tree(provider_tree, nodename, allocations)
        inventory = dict(provider_tree.data(nodename).inventory)
        inventory.pop("DISK_GB", None)
        provider_tree.update_inventory(nodename, inventory)
        provider_tree.add_aggregates(nodename, SHARED_DISK_AGGREGATE)


class BaremetalDriver(fake.FakeDriver):
    """One nova-compute service for several bare metal nodes, as Ironic's.

    Each node is a root provider of its own named after it, with one unit
    of its ``CUSTOM_BAREMETAL_*`` class and nothing else: a flavor takes a
    whole node with ``resources:CUSTOM_BAREMETAL_<X>=1`` and zero VCPU,
    MEMORY_MB and DISK_GB.
    """

    vcpus = 1
    memory_mb = 1024
    local_gb = 10

    def init_host(self, host):
        super().init_host(host)
        self._set_nodes([f"{host}-{suffix}" for suffix, _ in BAREMETAL_NODES])

    def update_provider_tree(self, provider_tree, nodename, allocations=None):
        classes = {f"{self._host}-{suffix}": rc for suffix, rc in BAREMETAL_NODES}
        provider_tree.update_inventory(nodename, {classes[nodename]: _inventory(1)})
