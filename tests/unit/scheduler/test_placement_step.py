"""A decision asks Placement's model (issue 39): nova's cells (SQLite with
nova's columns), Placement 16's own schema read through
``[placement_database] connection``, claims in an in-memory Placement,
through the host table, the filter scheduler and the scheduling cycle."""

from __future__ import annotations

import dataclasses
import os

import pytest
import sqlalchemy as sa

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler import driver as drivers
from nova_sched.scheduler.claim_stores.placement import PlacementClaims
from nova_sched.scheduler.cloud.sources.nova_cells import NovaCellsSource
from nova_sched.scheduler.cloud.sources.nova_db import NovaDatabases
from nova_sched.scheduler.decision.cycle import SchedulingCycle
from nova_sched.scheduler.host_manager import HostManager
from nova_sched.scheduler.wire import request
from tests.unit.scheduler.conftest import boot_request, schedule_all
from tests.unit.scheduler.fake_placement import FakePlacement
from tests.unit.scheduler.sources.nova_tables import NovaTables
from tests.unit.scheduler.sources import placement_tables
from tests.unit.scheduler.sources.placement_tables import PlacementTables

# Standard resource class ids (os-resource-classes' order, Placement's ids).
CLASS_IDS = {"VCPU": 0, "MEMORY_MB": 1, "DISK_GB": 2, "VGPU": 10, "PCPU": 14}
# Standard traits Placement has at its start (a database only migrated has none).
STANDARD_TRAITS = ("COMPUTE_STATUS_DISABLED", "OWNER_NOVA", "HW_CPU_HYPERTHREADING",
                   "HW_CPU_X86_AVX2", "MISC_SHARES_VIA_AGGREGATE")
# nova 34's default filters: no RamFilter, CoreFilter or DiskFilter.
NOVA_FILTERS = ["ComputeFilter", "ComputeCapabilitiesFilter", "ImagePropertiesFilter",
                "ServerGroupAntiAffinityFilter", "ServerGroupAffinityFilter"]


@pytest.fixture(scope="module")
def placement_schema(tmp_path_factory):
    return placement_tables.sqlite_schema(tmp_path_factory.mktemp("placement"))


class RecordingPlacement(FakePlacement):
    """The in-memory Placement, writing what it accepts into Placement's
    tables as Placement does (allocations, the providers' generations)."""

    def __init__(self, rp: PlacementTables):
        super().__init__()
        self.rp = rp
        # Off while the test takes the database away from nova-sched (Placement
        # itself still answers).
        self.mirror = True

    def put_allocations(self, consumer, payload):
        before = set(self.consumers.get(consumer, {}).get("allocations", {}))
        resp = super().put_allocations(consumer, payload)
        if resp.status == 204:
            self._write(consumer, before)
        return resp

    def delete_allocations(self, consumer):
        before = set(self.consumers.get(consumer, {}).get("allocations", {}))
        resp = super().delete_allocations(consumer)
        if resp.status == 204:
            self._write(consumer, before)
        return resp

    def _write(self, consumer, before):
        if not self.mirror:
            return
        self.rp.delete_consumer(consumer)
        now = self.consumers.get(consumer, {}).get("allocations", {})
        for uuid, alloc in now.items():
            for rc, used in alloc["resources"].items():
                self.rp.allocation(uuid, consumer, self.rp.classes.get(
                    rc, CLASS_IDS.get(rc)), used)
        for uuid in set(now) | before:
            self.rp.bump(uuid)


@dataclasses.dataclass
class Cloud:
    tables: NovaTables
    cell: str
    rp: PlacementTables
    placement: RecordingPlacement
    source: NovaCellsSource
    host_manager: HostManager
    cycle: SchedulingCycle

    def compute(self, host, *, inventories=None, traits=(), node=None):
        """A nova-compute and its node; its root provider in Placement's
        tables (and the in-memory Placement that judges claims)."""
        node_uuid = self.tables.add_compute(self.cell, host, node=node)
        self.rp.provider(node or host, uuid=node_uuid)
        inventories = {"VCPU": 8, "MEMORY_MB": 16384, "DISK_GB": 100} \
            if inventories is None else inventories
        self.provider_holds(node_uuid, inventories, traits)
        return node_uuid

    def child(self, parent, name, inventories, traits=()):
        uuid = self.rp.provider(name, parent=parent)
        self.provider_holds(uuid, inventories, traits)
        return uuid

    def provider_holds(self, uuid, inventories, traits=()):
        for rc, total in inventories.items():
            rc_id = CLASS_IDS[rc] if rc in CLASS_IDS else self.rp.resource_class(rc)
            self.rp.inventory(uuid, rc_id, total)
        if traits:
            self.rp.trait(uuid, *traits)
        self.placement.inventories_of[uuid] = {
            rc: {"total": total, "reserved": 0, "allocation_ratio": 1.0}
            for rc, total in inventories.items()}

    def start(self):
        self.host_manager.full_resync()

    def select(self, count=1, extra_specs=None, image_props=None, **flavor):
        body = boot_request(count=count, **flavor)
        body["instance_type"]["extra_specs"] = dict(extra_specs or {})
        body["image"]["properties"] = dict(image_props or {})
        return schedule_all(self.cycle, request.parse(body, {}))

    def allocations(self, instance_uuid):
        return {rp: a["resources"] for rp, a in
                self.placement.consumers[instance_uuid]["allocations"].items()}


@pytest.fixture
def cloud(db, tmp_path, placement_schema):
    url = placement_tables.sqlite_copy(placement_schema, tmp_path)
    CONF.set_override("host_source", "nova_cells", "scheduler")
    CONF.set_override("claims", "placement", "scheduler")
    CONF.set_override("connection", url, "placement_database")
    CONF.set_override("enabled_filters", NOVA_FILTERS, "filter_scheduler")
    engine = sa.create_engine(url)
    rp = PlacementTables(engine)
    with engine.begin() as conn:
        for name in STANDARD_TRAITS:
            rp.traits[name] = conn.execute(sa.text(
                "INSERT INTO traits (name) VALUES (:n)"), {"n": name}).lastrowid
    tables = NovaTables(tmp_path)
    cell = tables.add_cell("cell1")
    placement = RecordingPlacement(rp)
    source = NovaCellsSource(NovaDatabases(tables.api_url), placement)
    host_manager = HostManager(source)
    claims = PlacementClaims(placement, host_manager.provider_host)
    cycle = SchedulingCycle(drivers.load_driver("filter_scheduler", host_manager),
                            host_manager, claims, compute_api=None, notifier=None)
    yield Cloud(tables, cell, rp, placement, source, host_manager, cycle)
    source.stop()
    engine.dispose()


def test_a_required_trait_is_honoured_and_the_reason_names_it(cloud):
    ssd = cloud.compute("ssd", traits=["CUSTOM_SSD"])
    cloud.compute("hdd")
    cloud.start()
    specs = {"trait:CUSTOM_SSD": "required"}
    [(uuid, chosen)] = cloud.select(memory_mb=8192, extra_specs=specs)
    assert chosen.host == "ssd"
    assert cloud.allocations(uuid) == {ssd: {"VCPU": 1, "MEMORY_MB": 8192, "DISK_GB": 1}}
    # The model counts the claim at once: the next one no longer fits there.
    cloud.select(memory_mb=8192, extra_specs=specs)
    with pytest.raises(exception.NoValidHost) as err:
        cloud.select(memory_mb=8192, extra_specs=specs)
    assert err.value.reason == ("0/2 hosts available: Placement: 1 have no MEMORY_MB "
                                "capacity for 8192, 1 lack trait CUSTOM_SSD")


def test_a_trait_no_provider_has_ever_had_is_refused_as_placement_refuses_it(cloud):
    cloud.compute("c1")
    cloud.start()
    with pytest.raises(exception.NoValidHost) as err:
        cloud.select(extra_specs={"trait:CUSTOM_NOWHERE": "required"})
    assert "CUSTOM_NOWHERE" in err.value.reason
    assert cloud.placement.consumers == {}


def test_a_vgpu_is_claimed_on_the_child_provider_that_holds_it(cloud):
    gpu_host = cloud.compute("gpu")
    gpu = cloud.child(gpu_host, "gpu_pgpu0", {"VGPU": 2})
    cloud.compute("plain")
    cloud.start()
    specs = {"resources:VGPU": "1"}
    placed = [cloud.select(extra_specs=specs)[0] for _ in range(2)]
    for uuid, chosen in placed:
        assert chosen.host == "gpu"
        assert cloud.allocations(uuid) == {
            gpu_host: {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}, gpu: {"VGPU": 1}}
        assert chosen.allocation_request["allocations"][gpu] == {"resources": {"VGPU": 1}}
        assert set(chosen.allocation_request["mappings"][""]) == {gpu_host, gpu}
    with pytest.raises(exception.NoValidHost):
        cloud.select(extra_specs=specs)


def test_dedicated_cpus_go_to_the_pcpu_host_only(cloud):
    pinned = cloud.compute("pinned", inventories={"PCPU": 4, "MEMORY_MB": 16384,
                                                  "DISK_GB": 100})
    cloud.compute("shared")
    cloud.start()
    CONF.set_override("disable_fallback_pcpu_query", True, "workarounds")
    specs = {"hw:cpu_policy": "dedicated"}
    [(uuid, chosen)] = cloud.select(vcpus=4, extra_specs=specs)
    assert chosen.host == "pinned"
    assert cloud.allocations(uuid) == {pinned: {"PCPU": 4, "MEMORY_MB": 512, "DISK_GB": 1}}
    with pytest.raises(exception.NoValidHost) as err:
        cloud.select(vcpus=4, extra_specs=specs)
    assert "PCPU" in err.value.reason


def test_an_ironic_like_host_takes_one_instance_per_node(cloud):
    nodes = [cloud.compute("ironic", node=f"node-{n}",
                           inventories={"CUSTOM_BAREMETAL_GOLD": 1})
             for n in range(3)]
    cloud.compute("vm")
    cloud.start()
    specs = {"resources:CUSTOM_BAREMETAL_GOLD": "1", "resources:VCPU": "0",
             "resources:MEMORY_MB": "0", "resources:DISK_GB": "0"}
    placed = cloud.select(count=3, vcpus=8, memory_mb=65536, extra_specs=specs)
    assert sorted(chosen.nodename for _, chosen in placed) == ["node-0", "node-1", "node-2"]
    for uuid, chosen in placed:
        assert cloud.allocations(uuid) == {chosen.node_uuid: {"CUSTOM_BAREMETAL_GOLD": 1}}
    assert {chosen.node_uuid for _, chosen in placed} == set(nodes)
    with pytest.raises(exception.NoValidHost):
        cloud.select(vcpus=8, memory_mb=65536, extra_specs=specs)


def test_an_image_requiring_a_trait_avoids_hosts_without_it(cloud):
    cloud.compute("avx", traits=["HW_CPU_X86_AVX2"])
    cloud.compute("old")
    cloud.start()
    hosts = {chosen.host for _ in range(5) for _, chosen in cloud.select(
        image_props={"trait:HW_CPU_X86_AVX2": "required"})}
    assert hosts == {"avx"}


def test_a_host_whose_root_is_disabled_in_placement_is_skipped(cloud):
    cloud.compute("off", traits=["COMPUTE_STATUS_DISABLED"])
    cloud.compute("on")
    cloud.start()
    assert {chosen.host for _ in range(5) for _, chosen in cloud.select()} == {"on"}


def test_explain_lists_the_hosts_each_constraint_removed(cloud):
    cloud.compute("ssd", traits=["CUSTOM_SSD"])
    cloud.compute("hdd1")
    cloud.compute("hdd2")
    cloud.compute("off", traits=["COMPUTE_STATUS_DISABLED", "CUSTOM_SSD"])
    cloud.start()
    body = boot_request()
    body["instance_type"]["extra_specs"] = {"trait:CUSTOM_SSD": "required"}
    summary = cloud.cycle.explain(request.parse(body, {}))
    assert [h["host"] for h in summary["hosts"]] == ["ssd"]
    assert sorted(map(tuple, summary["removed"]["Placement: lack trait CUSTOM_SSD"])) == [
        ("hdd1", "hdd1"), ("hdd2", "hdd2")]
    assert summary["removed"]["Placement: have trait COMPUTE_STATUS_DISABLED"] == [
        ["off", "off"]]
    assert summary["reason"] == ("1/4 hosts available: Placement: 1 have trait "
                                 "COMPUTE_STATUS_DISABLED, 2 lack trait CUSTOM_SSD")


def test_placements_database_unreachable_decisions_go_on_and_health_says_why(cloud):
    cloud.compute("c1", traits=["CUSTOM_SSD"])
    cloud.compute("c2")
    cloud.start()
    path = cloud.rp.engine.url.database
    cloud.rp.engine.dispose()
    cloud.source.placement_reader.database.dispose()
    os.rename(path, path + ".away")
    os.mkdir(path)  # SQLite cannot open a directory: every read fails
    cloud.placement.mirror = False
    cloud.source.placement_reader.poll()
    cloud.source.poll()
    problem = cloud.source.problem()
    assert problem is not None and "Placement's database" in problem
    assert "unreachable" in problem
    # The copy as last read still answers, and Placement still judges claims.
    [(uuid, chosen)] = cloud.select(extra_specs={"trait:CUSTOM_SSD": "required"})
    assert chosen.host == "c1" and uuid in cloud.placement.consumers
    os.rmdir(path)
    os.rename(path + ".away", path)
    cloud.source.placement_reader.poll()
    cloud.source.poll()
    assert cloud.source.problem() is None


def test_an_evacuation_keeps_the_source_trees_allocations_beside_the_new_ones(cloud):
    source = cloud.compute("gpu-a")
    source_gpu = cloud.child(source, "gpu-a_pgpu0", {"VGPU": 1})
    target = cloud.compute("gpu-b")
    target_gpu = cloud.child(target, "gpu-b_pgpu0", {"VGPU": 1})
    cloud.start()
    instance = "4f9a3f2e-1f0c-4a8e-9d55-0d1c2a3b4c5d"
    held = {source: {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}, source_gpu: {"VGPU": 1}}
    cloud.placement.put_allocations(instance, {
        "allocations": {rp: {"resources": r} for rp, r in held.items()},
        "project_id": "p1", "user_id": "u1", "consumer_generation": None})
    # nova's evacuate: the source host ignored, its allocations kept.
    body = boot_request(uuids=[instance])
    body["instance_type"]["extra_specs"] = {"resources:VGPU": "1"}
    spec = request.parse(body, {"ignore_hosts": ["gpu-a"]})
    [outcome] = cloud.cycle.schedule(None, spec)
    assert outcome.error is None and outcome.selections[0].host == "gpu-b"
    assert cloud.allocations(instance) == dict(held, **{
        target: {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}, target_gpu: {"VGPU": 1}})
