"""Placement's whole model end to end, beside nova-scheduler (issue 39, item 6).

The same scenarios run in two clouds of nova 34 + Placement 16 alike
(tests/functional/novacloud.py), one with nova's own nova-scheduler (the
reference: it validates the cloud and the expectations), one with
nova-sched (``[scheduler] host_source = nova_cells``, ``claims =
placement``, ``[placement_database] connection`` at the cloud's Placement
database). One cloud per scheduler for the whole module: each test takes
the cloud as the indirect parameter ``placement_cloud``, which pytest
orders so that every nova-scheduler test runs in the first cloud, then
every nova-sched test in the second.

The computes report what a richer deployment reports to Placement, with
the fake drivers of tests/functional/plugins/provider_tree_drivers.py
(4 CPUs, 4 GB and 100 GB each unless said):

- ``shared``: VCPU, no trait of its own (the host that must not be chosen);
- ``pinned``: PCPU instead of VCPU and a NUMA topology (``cpu_dedicated_set``);
- ``ssd``: root trait ``CUSTOM_SSD``; ``avx2``: root trait ``HW_CPU_X86_AVX2``;
- ``gpu``: two child providers ``gpu_pgpu0``/``gpu_pgpu1`` with 1 VGPU each;
- ``diskless``: no DISK_GB, in a Placement aggregate with the sharing
  provider ``shared-disk`` (1,000 GB, ``MISC_SHARES_VIA_AGGREGATE``) that
  the module makes through Placement's API;
- ``ironic``: one nova-compute service for three bare metal nodes, each
  a root provider with one unit: ``ironic-gold-0``, ``ironic-gold-1``
  (``CUSTOM_BAREMETAL_GOLD``), ``ironic-silver-0`` (``..._SILVER``).

nova.conf (and nova-sched's config) set ``[scheduler]
limit_tenants_to_placement_aggregate`` and add NUMATopologyFilter to the
enabled filters, as a cloud that pins CPUs must. Every test checks where
its servers landed and their allocations in Placement (which providers,
which classes), and ends with a request no host can take: ERROR with
NoValidHost and no allocation. Each starts and ends with an empty cloud.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

import novacloud
import novacloud_stubs
from novacloud import fault_of, host_of
from test_nova_cloud import NO_VALID_HOST, Scenario, module_cloud, scenario_in

# nova-sched's NoValidHost reason counts the hosts it judged (CONTRACT
# section 3), whether its constraints are filters or Placement's terms.
COUNTED_REASON = re.compile(r"\d+/\d+ hosts")

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DRIVERS = "provider_tree_drivers."
COMPUTES = {
    "shared": DRIVERS + "SmallHostDriver",
    "pinned": DRIVERS + "PinnedCPUDriver",
    "ssd": DRIVERS + "SSDHostDriver",
    "avx2": DRIVERS + "AVX2HostDriver",
    "gpu": DRIVERS + "GPUHostDriver",
    "diskless": DRIVERS + "DisklessHostDriver",
    "ironic": DRIVERS + "BaremetalDriver",
}
# Kept equal to provider_tree_drivers (which imports nova, absent here).
HOST_VCPUS = 4
IRONIC_NODES = {"ironic-gold-0": "CUSTOM_BAREMETAL_GOLD",
                "ironic-gold-1": "CUSTOM_BAREMETAL_GOLD",
                "ironic-silver-0": "CUSTOM_BAREMETAL_SILVER"}
PGPUS = ("gpu_pgpu0", "gpu_pgpu1")
SHARED_DISK_AGGREGATE = "5e0f5d4c-3d1b-4c1e-9a51-6c7a2f0d5a11"
SHARED_DISK = "shared-disk"
SHARED_DISK_GB = 1000
# The glance stub's image that requires HW_CPU_X86_AVX2 (novacloud_stubs).
AVX2_IMAGE = next(image for image, props in novacloud_stubs.IMAGE_PROPERTIES.items()
                  if props.get("trait:HW_CPU_X86_AVX2") == "required")
# Every provider the computes register, each a host's root or a child.
PROVIDERS = [h for h in COMPUTES if h != "ironic"] + list(IRONIC_NODES) + list(PGPUS)

NOVA_SCHEDULER_FILTERS = ["ComputeFilter", "ComputeCapabilitiesFilter",
                          "ImagePropertiesFilter", "ServerGroupAntiAffinityFilter",
                          "ServerGroupAffinityFilter", "NUMATopologyFilter"]
NOVA_OVERRIDES = {
    "scheduler": {"limit_tenants_to_placement_aggregate": True},
    "filter_scheduler": {"enabled_filters": ",".join(NOVA_SCHEDULER_FILTERS)},
}


def nova_sched_overrides() -> dict:
    """The same [scheduler] choice; nova-sched's own default filters plus
    NUMATopologyFilter (its defaults name filters nova 34 no longer has)."""
    from nova_sched.conf.filter_scheduler import DEFAULT_ENABLED_FILTERS

    filters = [*DEFAULT_ENABLED_FILTERS]
    if "NUMATopologyFilter" not in filters:
        filters.append("NUMATopologyFilter")
    return {"scheduler": dict(NOVA_OVERRIDES["scheduler"]),
            "filter_scheduler": {"enabled_filters": ",".join(filters)}}


def on_both_schedulers():
    """Run the test in nova-scheduler's cloud, then in nova-sched's."""
    return pytest.mark.parametrize(
        "placement_cloud",
        [pytest.param("nova-scheduler", id="nova-scheduler"),
         pytest.param("nova-sched", id="nova-sched")],
        indirect=True)


# -- the cloud ------------------------------------------------------------------
def make_sharing_disk_provider(cloud: novacloud.NovaCloud) -> str:
    """``shared-disk``: DISK_GB shared with the roots of its aggregate; its uuid."""
    placement = cloud.placement
    rp = placement.post("/resource_providers", {"name": SHARED_DISK})
    rp_uuid, generation = rp["uuid"], rp["generation"]
    generation = placement.put(f"/resource_providers/{rp_uuid}/inventories", {
        "resource_provider_generation": generation,
        "inventories": {"DISK_GB": {"total": SHARED_DISK_GB, "max_unit": SHARED_DISK_GB,
                                    "allocation_ratio": 1.0}},
    })["resource_provider_generation"]
    generation = placement.put(f"/resource_providers/{rp_uuid}/traits", {
        "resource_provider_generation": generation,
        "traits": ["MISC_SHARES_VIA_AGGREGATE"],
    })["resource_provider_generation"]
    placement.put(f"/resource_providers/{rp_uuid}/aggregates", {
        "resource_provider_generation": generation,
        "aggregates": [SHARED_DISK_AGGREGATE],
    })
    return rp_uuid


def start_cloud(cloud: novacloud.NovaCloud, scheduler: str) -> None:
    """``NovaCloud.start`` in its pieces: the bare metal host's providers are
    named after its nodes, not after the host, so the wait for providers
    is this module's own."""
    t0 = time.monotonic()
    cloud.open()
    cloud.deploy()
    cloud.start_services()
    cloud.start_scheduler(scheduler, nova_sched_overrides()
                          if scheduler == "nova-sched" else None)
    cloud.wait_for_port("placement")
    for host, driver in COMPUTES.items():
        cloud.start_compute(host, driver)
    cloud.wait_for_port("api")
    # The sharing provider before the computes finish registering: the
    # diskless compute's aggregate then finds it at its first refresh.
    make_sharing_disk_provider(cloud)

    def _registered():
        # A provider appears before its inventory and aggregates are set:
        # wait for the whole of each compute's first report.
        cloud.assert_running()
        names = cloud.placement.providers()
        if not set(PROVIDERS) <= set(names):
            return False
        if not all(cloud.placement.inventories(names[rp]) for rp in PROVIDERS):
            return False
        return SHARED_DISK_AGGREGATE in cloud.placement.get(
            f"/resource_providers/{names['diskless']}/aggregates")["aggregates"]
    try:
        novacloud.wait_until(_registered, 180, 0.5, f"resource providers {PROVIDERS}")
    except TimeoutError as err:
        raise novacloud.CloudError(f"{err}\n{cloud.log_tails()}") from None
    # Every compute node is in Placement now: map them all, wait for the services.
    cloud.discover_hosts([h for h in COMPUTES if h != "ironic"])

    def _all_up():
        services = cloud.api.compute_services()
        return all(services.get(h, {}).get("state") == "up" for h in COMPUTES)
    novacloud.wait_until(_all_up, 120, 0.5, f"compute services {list(COMPUTES)} up")
    cloud.timings["start"] = time.monotonic() - t0


@pytest.fixture(scope="module")
def placement_cloud(request, rabbitmq, workdir, nova_venv):
    """The cloud of the scheduler ``request.param``, shared by the module's tests."""
    scheduler = request.param
    yield from module_cloud(
        lambda: novacloud.NovaCloud(workdir(f"placement_cloud_{scheduler}"),
                                    venv=nova_venv, nova_overrides=NOVA_OVERRIDES),
        scheduler, lambda cloud: start_cloud(cloud, scheduler))


class PlacementScenario(Scenario):
    """test_nova_cloud's Scenario for the scheduler of this cloud, with
    flavors of extra specs and Placement's view of trees and traits."""

    def flavor_with(self, extra_specs: dict, vcpus: int = 1, ram: int = 256,
                    disk: int = 1) -> str:
        flavor = self.api.create_flavor(f"f-{uuid.uuid4().hex[:6]}", vcpus=vcpus,
                                        ram=ram, disk=disk, extra_specs=extra_specs)
        self.flavors.append(flavor["id"])
        return flavor["id"]

    def boot_each(self, flavor_id: str, n: int, **kwargs) -> list[dict]:
        """``n`` servers one after the other, each waited for."""
        return [self.boot(flavor_id, **kwargs) for _ in range(n)]

    def assert_active(self, servers: list[dict]) -> None:
        for server in servers:
            assert server["status"] == "ACTIVE", self.why(server)

    def assert_no_valid_host(self, server: dict) -> None:
        assert server["status"] == "ERROR", self.why(server)
        message = fault_of(server)
        assert NO_VALID_HOST in message, self.why(server)
        if self.cloud.scheduler == "nova-sched":
            assert COUNTED_REASON.search(message), self.why(server)
        assert self.allocations(server["id"]) == {}, self.why(server)

    def rp_traits(self, name: str) -> set[str]:
        return set(self.placement.traits(self.rp(name)))

    def rp_aggregates(self, name: str) -> set[str]:
        return set(self.placement.get(
            f"/resource_providers/{self.rp(name)}/aggregates")["aggregates"])

    def why(self, server: dict | None = None) -> str:
        lines = []
        if server is not None:
            lines.append(f"server {server.get('id')}: {server.get('status')} on "
                         f"{host_of(server)} node {node_of(server)} "
                         f"fault {fault_of(server)!r}")
        lines.append(f"usage: {self.cloud.usage_by_host()}")
        noise = ("oslo_concurrency.lockutils", "keystoneauth", "RESP BODY", "REQ: curl",
                 "RESP: [")
        log = [ln for ln in self.cloud.scheduler_log().splitlines()
               if not any(n in ln for n in noise)]
        interesting = [ln for ln in log if " ERROR " in ln or " WARNING " in ln
                       or "Traceback" in ln or "allocation_candidates" in ln]
        lines.append(f"--- {self.cloud.scheduler} log, warnings, errors and "
                     f"Placement queries (last 15) ---")
        lines.extend(interesting[-15:])
        lines.append(f"--- {self.cloud.scheduler} log, last 25 lines ---")
        lines.extend(log[-25:])
        return "\n".join(lines)


def node_of(server: dict) -> str | None:
    return server.get("OS-EXT-SRV-ATTR:hypervisor_hostname")


@pytest.fixture
def scenario(placement_cloud):
    yield from scenario_in(placement_cloud, PlacementScenario)


# -- PCPU ------------------------------------------------------------------------
@on_both_schedulers()
def test_a_dedicated_cpu_flavor_is_placed_on_the_pcpu_host_only(scenario):
    """``hw:cpu_policy=dedicated`` asks Placement for PCPU (nova's fallback
    query for VCPU finds the shared-CPU hosts, whose missing NUMA topology
    NUMATopologyFilter refuses); PCPU full -> NoValidHost though VCPU is free."""
    flavor = scenario.flavor_with({"hw:cpu_policy": "dedicated"}, vcpus=2)

    servers = scenario.boot_each(flavor, HOST_VCPUS // 2)

    scenario.assert_active(servers)
    for server in servers:
        assert host_of(server) == "pinned", scenario.why(server)
        assert scenario.allocations(server["id"]) == {
            "pinned": {"PCPU": 2, "MEMORY_MB": 256, "DISK_GB": 1}}, scenario.why(server)
    assert scenario.usage("pinned")["PCPU"] == HOST_VCPUS
    refused = scenario.boot(flavor)
    scenario.assert_no_valid_host(refused)
    assert not any(scenario.usage(h).get("VCPU") for h in ("shared", "ssd", "avx2"))


# -- Ironic ----------------------------------------------------------------------
@on_both_schedulers()
def test_bare_metal_nodes_of_one_compute_are_filled_one_instance_each(scenario):
    """``resources:CUSTOM_BAREMETAL_GOLD=1`` with VCPU, MEMORY_MB and DISK_GB
    zeroed: a whole gold node each, none on a VM host or the silver node."""
    flavor = scenario.flavor_with({
        "resources:CUSTOM_BAREMETAL_GOLD": "1", "resources:VCPU": "0",
        "resources:MEMORY_MB": "0", "resources:DISK_GB": "0"}, vcpus=1, ram=1024, disk=10)
    gold = sorted(n for n, rc in IRONIC_NODES.items() if rc == "CUSTOM_BAREMETAL_GOLD")

    servers = scenario.boot_each(flavor, len(gold))

    scenario.assert_active(servers)
    for server in servers:
        assert host_of(server) == "ironic", scenario.why(server)
        assert scenario.allocations(server["id"]) == {
            node_of(server): {"CUSTOM_BAREMETAL_GOLD": 1}}, scenario.why(server)
    assert sorted(node_of(s) for s in servers) == gold, scenario.why()
    refused = scenario.boot(flavor)
    scenario.assert_no_valid_host(refused)
    assert scenario.usage("ironic-silver-0") == {"CUSTOM_BAREMETAL_SILVER": 0}
    assert not any(scenario.usage(h).get("VCPU") for h in COMPUTES if h not in
                   ("ironic", "pinned"))


# -- vGPU ------------------------------------------------------------------------
@on_both_schedulers()
def test_a_vgpu_flavor_takes_a_gpu_child_provider(scenario):
    """``resources:VGPU=1``: VCPU, MEMORY_MB and DISK_GB from the host's root,
    the VGPU from one of its child providers; both children used -> NoValidHost
    though the root has room."""
    flavor = scenario.flavor_with({"resources:VGPU": "1"})

    servers = scenario.boot_each(flavor, len(PGPUS))

    scenario.assert_active(servers)
    used = []
    for server in servers:
        assert host_of(server) == "gpu", scenario.why(server)
        allocs = scenario.allocations(server["id"])
        pgpus = [name for name in allocs if name != "gpu"]
        assert len(pgpus) == 1 and pgpus[0] in PGPUS, scenario.why(server)
        assert allocs == {"gpu": {"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 1},
                          pgpus[0]: {"VGPU": 1}}, scenario.why(server)
        used.append(pgpus[0])
    assert sorted(used) == sorted(PGPUS)
    refused = scenario.boot(flavor)
    scenario.assert_no_valid_host(refused)
    assert scenario.usage("gpu")["VCPU"] == len(PGPUS) < HOST_VCPUS


# -- traits ------------------------------------------------------------------------
@on_both_schedulers()
def test_a_flavor_and_an_image_requiring_traits_go_only_where_the_traits_are(scenario):
    """``trait:CUSTOM_SSD=required`` in the flavor -> ``ssd``; the image's
    ``trait:HW_CPU_X86_AVX2=required`` -> ``avx2``; both -> no host has both.
    Two servers each: without the trait the spreading weighers would move
    the second elsewhere."""
    assert "CUSTOM_SSD" in scenario.rp_traits("ssd")
    assert "HW_CPU_X86_AVX2" in scenario.rp_traits("avx2")
    ssd_flavor = scenario.flavor_with({"trait:CUSTOM_SSD": "required"})
    plain = scenario.flavor_with({})

    on_ssd = scenario.boot_each(ssd_flavor, 2)
    on_avx2 = scenario.boot_each(plain, 2, image_id=AVX2_IMAGE)

    scenario.assert_active(on_ssd + on_avx2)
    for host, servers in (("ssd", on_ssd), ("avx2", on_avx2)):
        for server in servers:
            assert host_of(server) == host, scenario.why(server)
            assert scenario.allocations(server["id"]) == {
                host: {"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 1}}, scenario.why(server)
    refused = scenario.boot(ssd_flavor, image_id=AVX2_IMAGE)
    scenario.assert_no_valid_host(refused)


# -- a compute disabled through nova's API -------------------------------------------
@on_both_schedulers()
def test_a_compute_disabled_through_novas_api_is_skipped(scenario):
    """``PUT /os-services/{id}`` disabled: nova puts COMPUTE_STATUS_DISABLED
    on the host's provider, and both requests go to the other host of the zone;
    the zone full -> NoValidHost though the disabled host is empty."""
    zone = scenario.zone("az-disabled", ["shared", "ssd"])
    flavor = scenario.flavor_with({}, vcpus=HOST_VCPUS // 2)

    scenario.disable("shared")
    novacloud.wait_until(lambda: "COMPUTE_STATUS_DISABLED" in scenario.rp_traits("shared"),
                         30, 0.5, "COMPUTE_STATUS_DISABLED on shared's provider")
    servers = scenario.boot_each(flavor, 2, availability_zone=zone)

    scenario.assert_active(servers)
    for server in servers:
        assert host_of(server) == "ssd", scenario.why(server)
        assert scenario.allocations(server["id"]) == {
            "ssd": {"VCPU": 2, "MEMORY_MB": 256, "DISK_GB": 1}}, scenario.why(server)
    refused = scenario.boot(flavor, availability_zone=zone)
    scenario.assert_no_valid_host(refused)
    assert not scenario.usage("shared")["VCPU"]


# -- tenant isolation ------------------------------------------------------------------
@on_both_schedulers()
def test_a_tenant_with_an_aggregate_is_limited_to_its_placement_aggregate(scenario):
    """``limit_tenants_to_placement_aggregate``: an aggregate whose metadata
    ``filter_tenant_id`` names the tests' project, holding ``avx2`` (nova's
    aggregate API mirrors it into Placement): the project's servers fill
    ``avx2`` and then get NoValidHost while other hosts are empty."""
    agg = scenario.api.create_aggregate("tenant-iso", hosts=["avx2"])
    scenario.aggregates.append(agg["id"])
    scenario.api.post(f"/os-aggregates/{agg['id']}/action", {"set_metadata": {
        "metadata": {"filter_tenant_id": novacloud_stubs.ADMIN_PROJECT}}})
    assert agg["uuid"] in scenario.rp_aggregates("avx2")
    scenario.cloud.settle()
    flavor = scenario.flavor_with({})

    servers = scenario.boot_each(flavor, HOST_VCPUS)

    scenario.assert_active(servers)
    for server in servers:
        assert host_of(server) == "avx2", scenario.why(server)
        assert scenario.allocations(server["id"]) == {
            "avx2": {"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 1}}, scenario.why(server)
    refused = scenario.boot(flavor)
    scenario.assert_no_valid_host(refused)
    assert not scenario.usage("shared")["VCPU"]


# -- a sharing disk provider -------------------------------------------------------------
@on_both_schedulers()
def test_a_sharing_provider_serves_the_disk_of_a_diskless_compute(scenario):
    """A root disk of 500 GB (every local disk is 100 GB) comes from
    ``shared-disk`` in the diskless compute's aggregate: the allocation is
    VCPU and MEMORY_MB on ``diskless`` and DISK_GB on ``shared-disk``; 600 GB
    more than it has left -> NoValidHost though ``diskless`` has CPUs free."""
    assert SHARED_DISK_AGGREGATE in scenario.rp_aggregates("diskless")
    assert "DISK_GB" not in scenario.placement.inventories(scenario.rp("diskless"))
    half = SHARED_DISK_GB // 2
    flavor = scenario.flavor_with({}, disk=half)

    server = scenario.boot(flavor)

    scenario.assert_active([server])
    assert host_of(server) == "diskless", scenario.why(server)
    assert scenario.allocations(server["id"]) == {
        "diskless": {"VCPU": 1, "MEMORY_MB": 256},
        SHARED_DISK: {"DISK_GB": half}}, scenario.why(server)
    too_big = scenario.flavor_with({}, disk=half + 100)
    refused = scenario.boot(too_big)
    scenario.assert_no_valid_host(refused)
    assert scenario.usage(SHARED_DISK)["DISK_GB"] == half
