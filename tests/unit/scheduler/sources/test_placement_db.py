"""Placement's state read from Placement 16's own database (issue 39, item
4): schema by Placement's migrations, rows written by SQL, on SQLite and
on MariaDB (tests/db_backends.py; skipped when its server is down)."""

from __future__ import annotations

import time
import uuid as uuidlib

import pytest

from nova_sched.conf import CONF
from nova_sched.scheduler.cloud.sources.placement_db import (PlacementDatabase,
                                                             PlacementModelReader,
                                                             masked_url)
from nova_sched.scheduler.placement_model.providers import Inventory
from tests.db_backends import temporary_database
from tests.unit.scheduler.sources import placement_tables
from tests.unit.scheduler.sources.placement_tables import PlacementTables, sync_schema

VCPU, MEMORY_MB, DISK_GB, VGPU, PCPU = 0, 1, 2, 10, 14


@pytest.fixture(scope="module")
def sqlite_schema(tmp_path_factory):
    """One SQLite file migrated by Placement, copied for each test."""
    return placement_tables.sqlite_schema(tmp_path_factory.mktemp("placement"))


@pytest.fixture(scope="module")
def mysql_schema(tmp_path_factory):
    """One MariaDB database migrated by Placement for the module, emptied
    before each test (a migration there takes seconds)."""
    with temporary_database("mysql") as url:
        sync_schema(url, tmp_path_factory.mktemp("placement-mysql"))
        yield url


@pytest.fixture(params=["sqlite", "mysql"])
def url(request, sqlite_schema, tmp_path):
    if request.param == "sqlite":
        return placement_tables.sqlite_copy(sqlite_schema, tmp_path)
    url = request.getfixturevalue("mysql_schema")
    PlacementTables.emptied(url)
    return url


@pytest.fixture
def tables(url):
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    yield PlacementTables(engine)
    engine.dispose()


@pytest.fixture
def database(url):
    database = PlacementDatabase(url)
    yield database
    database.dispose()


def _cloud(tables: PlacementTables) -> dict[str, str]:
    """A compute node with a GPU child (two levels), an Ironic-like node of
    a custom class, a sharing disk provider in an aggregate; usages from
    several consumers."""
    gold = tables.resource_class("CUSTOM_BAREMETAL_GOLD")
    cn = tables.provider("cn1")
    gpu = tables.provider("cn1_pgpu0", parent=cn)
    vf = tables.provider("cn1_pgpu0_vf", parent=gpu)
    ironic = tables.provider("ironic1")
    disk = tables.provider("shared-disk")
    tables.inventory(cn, VCPU, 16, reserved=1, allocation_ratio=4.0)
    tables.inventory(cn, MEMORY_MB, 32768, reserved=512, allocation_ratio=1.5,
                     max_unit=16384, step_size=256)
    tables.inventory(cn, PCPU, 8)
    tables.inventory(gpu, VGPU, 4, min_unit=1, max_unit=2)
    tables.inventory(ironic, gold, 1)
    tables.inventory(disk, DISK_GB, 1000, allocation_ratio=0.9)
    for consumer, vcpu, ram in (("a", 2, 2048), ("b", 4, 4096), ("c", 1, 512)):
        tables.allocation(cn, consumer, VCPU, vcpu)
        tables.allocation(cn, consumer, MEMORY_MB, ram)
        tables.allocation(disk, consumer, DISK_GB, 20)
    tables.allocation(gpu, "b", VGPU, 2)
    tables.allocation(ironic, "d", gold, 1)
    for trait in ("HW_CPU_X86_AVX2", "COMPUTE_STATUS_DISABLED", "OWNER_NOVA"):
        tables.trait(cn, trait)
    tables.trait(ironic, "OWNER_NOVA")
    tables.trait(disk, "MISC_SHARES_VIA_AGGREGATE")
    tables.trait(gpu, "CUSTOM_VGPU_TYPE_A")
    agg1, agg2 = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    tables.aggregate(cn, agg1)
    tables.aggregate(disk, agg1)
    tables.aggregate(cn, agg2)
    tables.bump(cn)
    tables.bump(cn)
    return {"cn": cn, "gpu": gpu, "vf": vf, "ironic": ironic, "disk": disk,
            "agg1": agg1, "agg2": agg2}


def test_read_all_reads_every_provider_whole(tables, database):
    cloud = _cloud(tables)

    providers, traits, classes = database.read_all()

    by_uuid = {p.uuid: p for p in providers}
    assert set(by_uuid) == {cloud[k] for k in ("cn", "gpu", "vf", "ironic", "disk")}
    cn, gpu, vf = by_uuid[cloud["cn"]], by_uuid[cloud["gpu"]], by_uuid[cloud["vf"]]
    assert (cn.name, cn.generation, cn.parent_uuid, cn.root_uuid) == (
        "cn1", 2, None, cloud["cn"])
    assert (gpu.parent_uuid, gpu.root_uuid) == (cloud["cn"], cloud["cn"])
    assert (vf.parent_uuid, vf.root_uuid) == (cloud["gpu"], cloud["cn"])
    assert cn.inventories["VCPU"] == Inventory(total=16, reserved=1, min_unit=1,
                                               max_unit=16, step_size=1,
                                               allocation_ratio=4.0)
    assert cn.inventories["MEMORY_MB"].step_size == 256
    assert cn.inventories["MEMORY_MB"].max_unit == 16384
    assert set(cn.inventories) == {"VCPU", "MEMORY_MB", "PCPU"}
    # Usages are the sums of every consumer's allocations.
    assert cn.usages == {"VCPU": 7, "MEMORY_MB": 6656}
    assert gpu.usages == {"VGPU": 2} and gpu.inventories["VGPU"].max_unit == 2
    assert vf.inventories == {} and vf.usages == {}
    ironic = by_uuid[cloud["ironic"]]
    assert ironic.inventories["CUSTOM_BAREMETAL_GOLD"].total == 1
    assert ironic.usages == {"CUSTOM_BAREMETAL_GOLD": 1}
    assert cn.traits == {"HW_CPU_X86_AVX2", "COMPUTE_STATUS_DISABLED", "OWNER_NOVA"}
    assert gpu.traits == {"CUSTOM_VGPU_TYPE_A"} and vf.traits == frozenset()
    assert cn.aggregates == {cloud["agg1"], cloud["agg2"]}
    disk = by_uuid[cloud["disk"]]
    assert disk.shares and disk.aggregates == {cloud["agg1"]}
    assert disk.usages == {"DISK_GB": 60}
    assert traits == {"HW_CPU_X86_AVX2", "COMPUTE_STATUS_DISABLED", "OWNER_NOVA",
                      "MISC_SHARES_VIA_AGGREGATE", "CUSTOM_VGPU_TYPE_A"}
    # The standard classes by their ids (a database Placement has not started
    # on yet has none in resource_classes), the custom one from the table.
    assert {"VCPU", "PCPU", "VGPU", "DISK_GB", "CUSTOM_BAREMETAL_GOLD"} <= classes
    assert "NET_PACKET_RATE_IGR_KILOPACKET_PER_SEC" in classes


def test_single_precision_ratio_as_placement_computes_it(tables, database):
    """0.9 on 10: 9 on SQLite (a double), 8 on MySQL (a FLOAT column, as
    Placement's own capacity filter computes it there)."""
    cn = tables.provider("cn")
    tables.inventory(cn, VCPU, 10, allocation_ratio=0.9)

    providers, _, _ = database.read_all()

    expected = 8 if database.engine.dialect.name == "mysql" else 9
    assert providers[0].inventories["VCPU"].capacity == expected
    with database.engine.connect() as conn:
        import sqlalchemy as sa
        in_sql = conn.execute(sa.text(
            "SELECT COUNT(*) FROM inventories WHERE 8 + 1 <= "
            "(total - reserved) * allocation_ratio")).scalar()
    assert in_sql == (expected >= 9)


def test_resource_classes_as_placement_names_them(tables, database):
    """Once Placement has started, resource_classes holds the standard
    classes at their ids: the table wins, custom ids are read from it."""
    tables.resource_class("VGPU", rc_id=VGPU)
    tables.resource_class("PCPU", rc_id=14)
    custom = tables.resource_class("CUSTOM_X")
    cn = tables.provider("cn")
    tables.inventory(cn, PCPU, 4)
    tables.inventory(cn, custom, 2)

    providers, _, classes = database.read_all()

    assert set(providers[0].inventories) == {"PCPU", "CUSTOM_X"}
    assert custom == 10000 and "CUSTOM_X" in classes


def test_masked_url_hides_the_password():
    masked = masked_url("mysql+pymysql://placement:s3cret@db:3306/placement")
    assert "s3cret" not in masked and "placement@db" not in masked
    assert masked.startswith("mysql+pymysql://placement:") and "db:3306" in masked
    assert "s3cret" not in PlacementDatabase(
        "mysql+pymysql://placement:s3cret@127.0.0.1:1/placement").where


def _reader(database) -> PlacementModelReader:
    reader = PlacementModelReader(database)
    reader.poll()
    assert reader.problem() is None
    return reader


def test_read_changed_reads_only_what_moved(tables, database):
    cloud = _cloud(tables)
    providers, _, _ = database.read_all()
    known = {p.uuid: p.generation for p in providers}

    changed, removed = database.read_changed(known)
    # Nothing moved: one narrow row per provider, nothing else.
    assert (changed, removed) == ([], [])
    assert database.last_read.rows == {"resource_providers (generations)": 5}

    tables.allocation(cloud["gpu"], "e", VGPU, 1)
    tables.bump(cloud["gpu"])
    new = tables.provider("cn2")
    tables.inventory(new, VCPU, 8)
    tables.delete_provider(cloud["ironic"])
    changed, removed = database.read_changed(known)

    assert removed == [cloud["ironic"]]
    by_uuid = {p.uuid: p for p in changed}
    assert set(by_uuid) == {cloud["gpu"], new}
    assert by_uuid[cloud["gpu"]].usages == {"VGPU": 3}
    assert by_uuid[cloud["gpu"]].generation == 1
    assert by_uuid[cloud["gpu"]].root_uuid == cloud["cn"]
    assert by_uuid[new].inventories["VCPU"].total == 8


def test_reader_keeps_the_model_and_the_next_refresh_catches_releases(tables, database):
    cloud = _cloud(tables)
    reader = _reader(database)
    model = reader.model
    assert model.providers[cloud["cn"]].usages["VCPU"] == 7
    assert model.tree_of(cloud["cn"])[0].uuid == cloud["cn"]
    assert "CUSTOM_BAREMETAL_GOLD" in model.known_classes

    # DELETE /allocations/b: Placement moves no generation, yet the next
    # refresh sees less used than the model counts and reads who released.
    version = model.version
    tables.delete_consumer("b")
    assert reader.refresh() == 3  # cn, its GPU, the shared disk
    assert model.providers[cloud["cn"]].usages == {"VCPU": 3, "MEMORY_MB": 2560}
    assert model.providers[cloud["gpu"]].usages == {}
    assert model.providers[cloud["disk"]].usages == {"DISK_GB": 40}
    assert model.changed_since(version) == {cloud["cn"], cloud["gpu"], cloud["disk"]}
    # Nothing else differs: neither a refresh nor a reconciliation applies any.
    version = model.version
    assert reader.refresh() == 0 and model.version == version
    assert reader.reconcile() == 0 and model.version == version

    # A consumer moved from cn to the Ironic node (conductor's
    # move_allocations): Placement moves the generation of the provider
    # written only; the total is unchanged, the release on cn is found too.
    tables.delete_consumer("a")
    tables.allocation(cloud["ironic"], "a", VCPU, 2)
    tables.allocation(cloud["ironic"], "a", MEMORY_MB, 2048)
    tables.allocation(cloud["ironic"], "a", DISK_GB, 20)
    tables.bump(cloud["ironic"])
    assert reader.refresh() == 3  # ironic by its generation; cn, disk released
    assert model.providers[cloud["cn"]].usages == {"VCPU": 1, "MEMORY_MB": 512}
    assert model.providers[cloud["disk"]].usages == {"DISK_GB": 20}
    assert model.providers[cloud["ironic"]].usages["VCPU"] == 2
    assert reader.reconcile() == 0

    # A bump, a new provider, a removed one: a refresh.
    tables.trait(cloud["ironic"], "CUSTOM_NEW")
    tables.bump(cloud["ironic"])
    child = tables.provider("cn1_numa1", parent=cloud["cn"])
    tables.delete_provider(cloud["vf"])
    assert reader.refresh() == 3
    assert "CUSTOM_NEW" in model.providers[cloud["ironic"]].traits
    # A trait created since comes with the provider holding it: a request
    # naming it is not refused as unknown until the next reconciliation.
    assert "CUSTOM_NEW" in model.known_traits
    assert cloud["vf"] not in model.providers
    assert child in {p.uuid for p in model.tree_of(cloud["cn"])}
    assert cloud["vf"] not in {p.uuid for p in model.tree_of(cloud["cn"])}


def test_unreachable_database_keeps_the_model(tables, database):
    cloud = _cloud(tables)
    reader = _reader(database)
    before = dict(reader.model.providers)
    reader.database = PlacementDatabase(
        "mysql+pymysql://placement:s3cret@127.0.0.1:1/placement")
    try:
        reader.poll()
        reader._reconciled = None  # the reconciliation fails too
        reader.poll()
    finally:
        reader.database.dispose()
    problem = reader.problem()
    assert problem is not None and "unreachable" in problem
    assert "s3cret" not in problem
    assert reader.model.providers == before
    assert reader.model.providers[cloud["cn"]].usages["VCPU"] == 7
    reader.database = database
    reader.poll()
    assert reader.problem() is None


def test_own_claims_counted_once(tables, database):
    cloud = _cloud(tables)
    reader = _reader(database)
    model, cn = reader.model, cloud["cn"]

    # Counted at once, and kept over reads that do not have it yet.
    first = reader.note_claimed({cn: {"VCPU": 2}, cloud["disk"]: {"DISK_GB": 10}})
    assert model.providers[cn].usages["VCPU"] == 9
    tables.bump(cn)  # another change to the provider, not the claim
    reader.refresh()
    reader.reconcile()
    assert model.providers[cn].usages["VCPU"] == 9
    assert model.providers[cloud["disk"]].usages["DISK_GB"] == 70

    # Placement writes it (and moves generations) while a read may run: the
    # read that shows it before the confirmation counts it twice, erring full.
    tables.allocation(cn, "first", VCPU, 2)
    tables.allocation(cloud["disk"], "first", DISK_GB, 10)
    tables.bump(cn)
    tables.bump(cloud["disk"])
    reader.refresh()
    assert model.providers[cn].usages["VCPU"] == 11
    # Confirmed: the next read, though no generation moved since, settles it.
    reader.note_confirmed(first)
    assert reader.refresh() == 2
    assert model.providers[cn].usages["VCPU"] == 9
    assert model.providers[cloud["disk"]].usages["DISK_GB"] == 70
    assert reader.pending() == []
    assert reader.reconcile() == 0

    # Withdrawn (a 409): taken back.
    second = reader.note_claimed({cn: {"VCPU": 4}})
    assert model.providers[cn].usages["VCPU"] == 13
    reader.note_withdrawn(second)
    assert model.providers[cn].usages["VCPU"] == 9
    reader.note_withdrawn(second)  # twice is once
    assert model.providers[cn].usages["VCPU"] == 9


def test_poller_thread_follows_changes(tables, database):
    CONF.set_override("refresh_interval", 0.1, "placement_database")
    cloud = _cloud(tables)
    reader = PlacementModelReader(database)
    reader.start()
    try:
        _wait(lambda: cloud["cn"] in reader.model.providers)
        tables.allocation(cloud["ironic"], "x", 10000, 1)
        tables.bump(cloud["ironic"])
        _wait(lambda: reader.model.providers[cloud["ironic"]].usages
              == {"CUSTOM_BAREMETAL_GOLD": 2})
    finally:
        reader.stop()
    assert reader.problem() is None


def _wait(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_provider_with_hundreds_of_traits(tables, database):
    """Traits come joined in one row per provider: MySQL's default cut of
    GROUP_CONCAT (1,024 bytes; MariaDB's is 1 MB) would lose some of 300."""
    cn = tables.provider("cn")
    other = tables.provider("other")
    names = {f"CUSTOM_T{i:03d}" for i in range(300)}
    tables.trait(cn, *sorted(names))
    tables.trait(other, "CUSTOM_T007")

    providers, traits, _ = database.read_all()

    by_uuid = {p.uuid: p for p in providers}
    assert by_uuid[cn].traits == names
    assert by_uuid[other].traits == {"CUSTOM_T007"}
    assert traits == names
    assert database.read_providers([cn])[0].traits == names


def test_reconciliation_catches_aggregates_and_new_parents(tables, database):
    """Aggregates set below microversion 1.19 and a re-parenting move no
    generation: the reconciliation applies them, the tree follows."""
    cloud = _cloud(tables)
    reader = _reader(database)
    model = reader.model
    agg = str(uuidlib.uuid4())
    tables.aggregate(cloud["ironic"], agg)
    tables.sql("UPDATE resource_providers SET parent_provider_id = :cn, "
               "root_provider_id = :cn WHERE id = :id", cn=tables.ids[cloud["cn"]],
               id=tables.ids[cloud["ironic"]])
    assert reader.refresh() == 0
    assert reader.reconcile() == 1
    ironic = model.providers[cloud["ironic"]]
    assert ironic.aggregates == {agg}
    assert (ironic.parent_uuid, ironic.root_uuid) == (cloud["cn"], cloud["cn"])
    assert cloud["ironic"] in {p.uuid for p in model.tree_of(cloud["cn"])}
    assert cloud["ironic"] not in {p.uuid for p in model.roots()}


def test_reader_without_a_connection_is_a_configuration_error():
    from nova_sched import exception

    with pytest.raises(exception.ConfigurationError, match="placement_database"):
        PlacementModelReader()
