"""The nova_cells host source with Placement claims: nova's databases (SQLite
with nova's columns) and an in-memory Placement, through the host table, the
filter scheduler and the scheduling cycle."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
import uuid as uuidlib

import pytest

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler import driver as drivers
from nova_sched.scheduler.wire import request
from nova_sched.scheduler.claim_stores.placement import PlacementClaims
from nova_sched.scheduler.decision.cycle import SchedulingCycle
from nova_sched.scheduler.host_manager import HostManager
from nova_sched.scheduler.cloud.sources.nova_cells import NovaCellsSource
from nova_sched.scheduler.cloud.sources.nova_db import NovaDatabases
from tests.unit.scheduler.conftest import boot_request, schedule_all
from tests.unit.scheduler.fake_placement import FakePlacement
from tests.unit.scheduler.sources.nova_tables import NovaTables, utcnow


@dataclasses.dataclass
class NovaCloud:
    tables: NovaTables
    cell: str
    placement: FakePlacement
    source: NovaCellsSource
    host_manager: HostManager
    cycle: SchedulingCycle

    def add_compute(self, host, vcpus=8, memory_mb=16384, disk_gb=100, **columns):
        node_uuid = self.tables.add_compute(self.cell, host, **columns)
        self.placement.add_provider(node_uuid, vcpus, memory_mb, disk_gb)
        return node_uuid

    def tables_provider(self, host):
        state = self.host_manager.table.states[_rows(self)[host]]
        return state.uuid

    def poll(self):
        """The poller's next read, then the host table's next refresh."""
        self.source.poll()
        self.host_manager.refresh(force=True)

    def select(self, count=1, **flavor):
        spec = request.parse(boot_request(count=count, **flavor), {})
        return schedule_all(self.cycle, spec)


@pytest.fixture
def cloud(db, tmp_path):
    CONF.set_override("host_source", "nova_cells", "scheduler")
    CONF.set_override("claims", "placement", "scheduler")
    CONF.set_override("enabled_filters", ["AvailabilityZoneFilter", "RamFilter",
                                          "CoreFilter", "DiskFilter", "ComputeFilter",
                                          "ServerGroupAntiAffinityFilter",
                                          "ServerGroupAffinityFilter"],
                      "filter_scheduler")
    tables = NovaTables(tmp_path)
    cell = tables.add_cell("cell1")
    placement = FakePlacement()
    source = NovaCellsSource(NovaDatabases(tables.api_url), placement)
    host_manager = HostManager(source)
    claims = PlacementClaims(placement, host_manager.provider_host)
    cycle = SchedulingCycle(drivers.load_driver("filter_scheduler", host_manager),
                            host_manager, claims, compute_api=None, notifier=None)
    yield NovaCloud(tables, cell, placement, source, host_manager, cycle)
    source.stop()


def _rows(cloud):
    table = cloud.host_manager.table
    return {table.states[r].host: r for r in table.active_rows()}


def test_only_computes_mapped_to_a_cell_are_hosts(cloud):
    cloud.add_compute("c1")
    cloud.add_compute("c2", mapped=False)
    cloud.host_manager.full_resync()
    assert set(_rows(cloud)) == {"c1"}
    # nova-manage cell_v2 discover_hosts maps it: a candidate at the next read.
    cloud.tables.map_host(cloud.cell, "c2")
    cloud.poll()
    assert set(_rows(cloud)) == {"c1", "c2"}


def test_capacity_and_usage_are_placements(cloud):
    node = cloud.add_compute("c1", vcpus=4, memory_mb=4096)
    cloud.placement.inventories_of[node]["VCPU"]["allocation_ratio"] = 4.0
    cloud.placement.inventories_of[node]["MEMORY_MB"]["reserved"] = 512
    cloud.host_manager.full_resync()
    state = cloud.host_manager.table.states[_rows(cloud)["c1"]]
    assert state.uuid == node and state.cell_uuid == cloud.cell
    # (total - reserved) x ratio, Placement's arithmetic.
    assert state.vcpus_total == 16
    assert state.free_ram_mb == 3584
    assert state.total_usable_disk_gb == 100


def test_a_claim_is_an_allocation_in_placement(cloud):
    node = cloud.add_compute("c1")
    cloud.host_manager.full_resync()
    [(uuid, chosen)] = cloud.select(memory_mb=1024, vcpus=2, root_gb=10, swap=1500)
    assert chosen.host == "c1"
    consumer = cloud.placement.consumers[uuid]
    assert consumer["allocations"] == {node: {"resources": {
        "VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 12}}}  # swap rounded up to 2 GB
    assert (consumer["project_id"], consumer["user_id"]) == ("p1", "u1")
    assert chosen.allocation_request == {
        "allocations": {node: {"resources": {"VCPU": 2, "MEMORY_MB": 1024,
                                             "DISK_GB": 12}}},
        "mappings": {"": [node]}}


def test_own_claims_count_before_placement_is_read_again(cloud):
    cloud.add_compute("c1", vcpus=2)
    cloud.add_compute("c2", vcpus=2)
    cloud.host_manager.full_resync()
    hosts = [sel.host for _uuid, sel in cloud.select(count=4, vcpus=1)]
    assert sorted(hosts) == ["c1", "c1", "c2", "c2"]
    with pytest.raises(exception.NoValidHost, match="CoreFilter removed 2"):
        cloud.select(vcpus=1)
    # A read of Placement taken later agrees: nothing was counted twice.
    cloud.poll()
    state = cloud.host_manager.table.states[_rows(cloud)["c1"]]
    assert state.vcpus_used == 2


def test_a_claim_lost_to_another_scheduler_moves_to_the_next_node(cloud):
    busy = cloud.add_compute("c1", vcpus=4)
    cloud.add_compute("c2", vcpus=2)
    cloud.host_manager.full_resync()
    # Another scheduler fills c1 after our last read of Placement.
    cloud.placement.put_allocations("other", {
        "allocations": {busy: {"resources": {"VCPU": 4}}}, "project_id": "p",
        "user_id": "u", "consumer_generation": None})
    [(uuid, chosen)] = cloud.select(vcpus=1)
    assert chosen.host == "c2"
    assert list(cloud.placement.consumers[uuid]["allocations"]) != [busy]


def test_a_multi_instance_request_is_all_or_nothing(cloud):
    cloud.add_compute("c1", vcpus=2)
    cloud.host_manager.full_resync()
    with pytest.raises(exception.NoValidHost):
        cloud.select(count=3, vcpus=1)
    assert cloud.placement.consumers == {}


def test_services_up_down_disabled_as_nova_judges_them(cloud):
    for host in ("up", "old", "forced", "off"):
        cloud.add_compute(host)
    long_ago = utcnow() - dt.timedelta(seconds=CONF.service_down_time + 30)
    cloud.tables.update(cloud.cell, "services", "host = 'old'", {},
                        last_seen_up=long_ago, updated_at=long_ago)
    cloud.tables.update(cloud.cell, "services", "host = 'forced'", {}, forced_down=1)
    cloud.tables.update(cloud.cell, "services", "host = 'off'", {}, disabled=1,
                        disabled_reason="maintenance")
    cloud.host_manager.full_resync()
    decision = cloud.cycle.explain(request.parse(boot_request(), {}))
    assert [h["host"] for h in decision["hosts"]] == ["up"]
    assert sorted(h for h, _n in decision["removed"]["ComputeFilter"]) == [
        "forced", "off", "old"]


def test_changed_rows_only_and_deleted_nodes(cloud):
    cloud.add_compute("c1")
    cloud.add_compute("c2")
    cloud.host_manager.full_resync()
    cloud.source.poll()
    # Nothing written since: a read brings no node back.
    assert cloud.source.load_changed(0).nodes == []
    cloud.tables.update(cloud.cell, "compute_nodes", "host = 'c2'", {},
                        deleted=2, deleted_at=utcnow())
    cloud.poll()
    assert set(_rows(cloud)) == {"c1"}


def test_instances_on_hosts_come_from_the_cells(cloud):
    cloud.add_compute("c1")
    cloud.add_compute("c2")
    group_member = str(uuidlib.uuid4())
    cloud.tables.add_instance(cloud.cell, group_member, "c1", "c1")
    cloud.host_manager.full_resync()
    assert cloud.host_manager.table.states[_rows(cloud)["c1"]].num_instances == 1
    assert cloud.host_manager.hosts_of([group_member]) == {group_member: "c1"}
    # Anti-affinity: a new member of the group avoids c1.
    spec = boot_request(vcpus=1)
    spec["instance_group"] = {"uuid": str(uuidlib.uuid4()), "policy": "anti-affinity",
                              "members": [group_member], "hosts": ["c1"]}
    placed = []
    for outcome in cloud.cycle.schedule(None, request.parse(spec, {})):
        placed.append(outcome.selections[0].host)
    assert placed == ["c2"]
    cloud.tables.delete_instance(cloud.cell, group_member)
    cloud.poll()
    assert cloud.host_manager.hosts_of([group_member]) == {}


def test_nova_formats_are_read(cloud):
    numa = {"nova_object.name": "NUMATopology", "nova_object.namespace": "nova",
            "nova_object.version": "1.2", "nova_object.data": {"cells": [
                {"nova_object.name": "NUMACell", "nova_object.namespace": "nova",
                 "nova_object.version": "1.5", "nova_object.data": {
                     "id": 0, "cpuset": [0, 1, 2, 3], "pcpuset": [], "memory": 4096,
                     "cpu_usage": 1, "memory_usage": 512}}]}}
    pools = {"nova_object.name": "PciDevicePoolList", "nova_object.namespace": "nova",
             "nova_object.version": "1.1", "nova_object.data": {"objects": [
                 {"nova_object.name": "PciDevicePool", "nova_object.namespace": "nova",
                  "nova_object.version": "1.1", "nova_object.data": {
                      "vendor_id": "8086", "product_id": "1520", "numa_node": 0,
                      "count": 4, "tags": {"dev_type": "type-VF"}}}]}}
    metrics = [{"name": "cpu.percent", "value": 0.29, "source": "libvirt",
                "timestamp": "2026-12-02T00:00:00.000000"},
               {"name": "cpu.frequency", "value": 3000, "source": "libvirt",
                "timestamp": "2026-12-02T00:00:00.000000"}]
    cloud.add_compute("c1", numa_topology=json.dumps(numa), pci_stats=json.dumps(pools),
                      metrics=json.dumps(metrics))
    cloud.host_manager.full_resync()
    state = cloud.host_manager.table.states[_rows(cloud)["c1"]]
    assert state.numa_topology == {"cells": [{"id": 0, "cpus": [0, 1, 2, 3],
                                              "pcpus": [], "pinned": 0,
                                              "memory_mb": 4096, "cpu_usage": 1,
                                              "memory_usage": 512}]}
    assert state.pci_stats == [{"vendor_id": "8086", "product_id": "1520",
                                "numa_node": 0, "count": 4, "dev_type": "type-VF"}]
    # A stored fraction, as nova's scheduler sees it: x 100, truncated.
    assert state.numeric_metrics() == {"cpu.percent": 28.0, "cpu.frequency": 3000.0}


def test_aggregates_and_zones_from_the_api_database(cloud):
    cloud.add_compute("c1")
    cloud.add_compute("c2")
    cloud.tables.add_aggregate("zoned", ["c2"], {"availability_zone": "az-2"})
    cloud.host_manager.full_resync()
    [(_uuid, chosen)] = cloud.select(az="az-2")
    assert chosen.host == "c2" and chosen.availability_zone == "az-2"


def test_placement_unreachable_is_said_and_known_hosts_stay(cloud):
    cloud.add_compute("c1")
    cloud.host_manager.full_resync()
    cloud.placement.down = True
    cloud.source.poll()
    assert "placement unreachable" in cloud.source.problem()
    assert set(_rows(cloud)) == {"c1"}
    cloud.placement.down = False
    cloud.source.poll()
    assert cloud.source.problem() is None


def test_host_list_shows_novas_hosts_with_placements_figures(cloud):
    node = cloud.add_compute("c1", vcpus=4, memory_mb=2048)
    cloud.add_compute("c2")
    cloud.tables.update(cloud.cell, "services", "host = 'c2'", {}, disabled=1,
                        disabled_reason="maintenance")
    cloud.placement.put_allocations("i1", {
        "allocations": {node: {"resources": {"VCPU": 1, "MEMORY_MB": 512}}},
        "project_id": "p", "user_id": "u", "consumer_generation": None})
    cloud.tables.add_instance(cloud.cell, "i1", "c1", "c1")
    c1, c2 = cloud.source.host_list()
    assert (c1["host"], c1["up"], c1["disabled"]) == ("c1", True, False)
    assert (c1["vcpus"], c1["claimed_vcpus"], c1["memory_mb"],
            c1["claimed_memory_mb"], c1["instances"]) == (4, 1, 2048, 512, 1)
    assert c1["uuid"] == node and c1["cell_uuid"] == cloud.cell
    assert (c2["disabled"], c2["disabled_reason"]) == (True, "maintenance")


def test_a_service_not_yet_reported_is_up_from_its_creation(cloud):
    """nova-compute creates its service row before its first report: nova
    counts it up from created_at, and so does nova-sched."""
    cloud.add_compute("c1")
    cloud.tables.update(cloud.cell, "services", "host = 'c1'", {},
                        last_seen_up=None, updated_at=None)
    cloud.host_manager.full_resync()
    [(_uuid, chosen)] = cloud.select()
    assert chosen.host == "c1"


def test_a_claim_a_read_may_have_counted_is_settled_before_no_valid_host(cloud):
    cloud.add_compute("c1", vcpus=2)
    cloud.host_manager.full_resync()
    cloud.select(vcpus=1)
    [pending] = cloud.source._pending[1]
    # Placement's read ran while this daemon had not yet handled the 204:
    # the read counts the claim, and so does the pending claim.
    pending.confirmed = None
    cloud.poll()
    assert cloud.host_manager.table.states[_rows(cloud)["c1"]].vcpus_used == 2
    pending.confirmed = time.monotonic()
    # The node is read again before the decision gives up: one vCPU is free.
    [(_uuid, chosen)] = cloud.select(vcpus=1)
    assert chosen.host == "c1"
    assert cloud.placement.used(cloud.tables_provider("c1"), "VCPU") == 2


def test_a_claim_placement_refused_is_not_counted_afterwards(cloud):
    """A claim lost to a concurrent writer (Placement's concurrent_update) or
    to another scheduler leaves nothing counted on its node."""
    node = cloud.add_compute("c1", vcpus=2)
    cloud.host_manager.full_resync()
    cloud.placement.put_allocations("other", {
        "allocations": {node: {"resources": {"VCPU": 2}}}, "project_id": "p",
        "user_id": "u", "consumer_generation": None})
    with pytest.raises(exception.NoValidHost):
        cloud.select(vcpus=1)
    assert cloud.source._pending == {}
    cloud.placement.delete_allocations("other")
    cloud.poll()
    [(_uuid, chosen)] = cloud.select(vcpus=2)
    assert chosen.host == "c1"


def test_an_instance_that_leaves_its_host_is_no_longer_counted_there(cloud):
    cloud.add_compute("c1")
    cloud.tables.add_instance(cloud.cell, "i1", "c1", "c1")
    cloud.host_manager.full_resync()
    assert cloud.host_manager.table.states[_rows(cloud)["c1"]].num_instances == 1
    # A shelve offload: the row stays, without a host.
    cloud.tables.update(cloud.cell, "instances", "uuid = 'i1'", {}, host=None, node=None)
    cloud.poll()
    assert cloud.host_manager.table.states[_rows(cloud)["c1"]].num_instances == 0
    assert cloud.host_manager.hosts_of(["i1"]) == {}
