"""Placement's state read from Placement 16's own database (issue 39, item
4): schema by Placement's migrations, rows written by SQL, on SQLite and
on MariaDB (tests/db_backends.py; skipped when its server is down)."""

from __future__ import annotations

import contextlib
import shutil
import uuid as uuidlib

import pytest

from nova_sched.scheduler.cloud.sources.placement_db import (PlacementDatabase,
                                                             masked_url)
from nova_sched.scheduler.placement_model.providers import Inventory
from tests.db_backends import temporary_database
from tests.unit.scheduler.sources.placement_tables import PlacementTables, sync_schema

VCPU, MEMORY_MB, DISK_GB, VGPU, PCPU = 0, 1, 2, 10, 14


@pytest.fixture(scope="module")
def sqlite_schema(tmp_path_factory):
    """One SQLite file migrated by Placement, copied for each test."""
    directory = tmp_path_factory.mktemp("placement")
    path = directory / "placement.sqlite"
    sync_schema(f"sqlite:///{path}", directory)
    return path


@pytest.fixture(params=["sqlite", "mysql"])
def url(request, sqlite_schema, tmp_path):
    if request.param == "sqlite":
        path = tmp_path / "placement.sqlite"
        shutil.copy(sqlite_schema, path)
        yield f"sqlite:///{path}"
        return
    with temporary_database("mysql") as mysql_url:
        sync_schema(mysql_url, tmp_path)
        yield mysql_url


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
