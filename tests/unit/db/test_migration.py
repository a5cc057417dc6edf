"""db sync: the initial revision builds exactly the models' schema, everywhere."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from nova_sched.db import api as db_api
from nova_sched.db import migration
from nova_sched.db import models


def _schema_differences(engine: sa.Engine) -> list:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return compare_metadata(context, models.Base.metadata)


def test_sync_creates_every_table_column_and_index(empty_engine):
    assert migration.db_version(empty_engine) is None
    assert not migration.schema_is_current(empty_engine)

    assert migration.db_sync(empty_engine) == migration.head_revision()

    inspector = sa.inspect(empty_engine)
    assert set(models.Base.metadata.tables) <= set(inspector.get_table_names())
    for name, table in models.Base.metadata.tables.items():
        columns = {c["name"]: c for c in inspector.get_columns(name)}
        assert set(columns) == set(table.columns.keys()), name
        for column in table.columns:
            assert columns[column.name]["nullable"] == column.nullable, (
                name, column.name)
        indexes = {i["name"] for i in inspector.get_indexes(name)}
        assert {i.name for i in table.indexes} <= indexes, name
    # Types, unique constraints and foreign keys too, as alembic sees them.
    assert _schema_differences(empty_engine) == []
    assert migration.schema_is_current(empty_engine)


def test_sync_twice_keeps_rows_that_server_defaults_completed(empty_engine):
    migration.db_sync(empty_engine)
    with empty_engine.begin() as conn:
        # Written outside the ORM: the server defaults fill the rest.
        conn.exec_driver_sql(
            "INSERT INTO compute_nodes (host, hypervisor_hostname) VALUES ('h', 'n')"
        )

    assert migration.db_sync(empty_engine) == migration.head_revision()

    with empty_engine.connect() as conn:
        row = conn.execute(sa.select(models.ComputeNode.__table__)).mappings().one()
        counters = conn.execute(sa.select(models.ChangeCounter.__table__)).all()
        versions = conn.exec_driver_sql("SELECT version_num FROM alembic_version").all()
    assert (row["host"], row["deleted"]) == ("h", False)
    assert (row["claimed_memory_mb"], row["changed_at"], row["vcpus"]) == (0, 0, 0)
    # The counters' rows exist from the start (bumps are UPDATEs).
    assert sorted(counters) == [("aggregates", 0), ("operator_changes", 0)]
    assert versions == [(migration.head_revision(),)]


def test_sync_uses_the_given_engines_connection():
    # An in-memory database lives on one connection (StaticPool): only a
    # migration run on that engine's connection is visible through it.
    demo = db_api.create_engine("sqlite://")
    other = db_api.configure("sqlite://")
    try:
        migration.db_sync(demo)
        assert "instances" in sa.inspect(demo).get_table_names()
        assert sa.inspect(other).get_table_names() == []
        assert migration.schema_is_current(demo)
        assert not migration.schema_is_current()
    finally:
        demo.dispose()
        other.dispose()


def test_sync_without_engine_uses_the_configured_one(tmp_path):
    engine = db_api.configure(f"sqlite:///{tmp_path}/configured.sqlite")
    migration.db_sync()
    assert migration.db_version() == migration.head_revision()
    assert "compute_nodes" in sa.inspect(engine).get_table_names()


def test_downgrade_to_base_removes_every_table(tmp_path):
    engine = db_api.create_engine(f"sqlite:///{tmp_path}/down.sqlite")
    migration.db_sync(engine)
    with engine.begin() as conn:
        command.downgrade(migration._config(conn), "base")
    assert set(sa.inspect(engine).get_table_names()) == {"alembic_version"}
    assert migration.db_version(engine) is None
    engine.dispose()


def test_0003_adds_the_node_ratios_to_existing_nodes_and_takes_them_back(tmp_path):
    engine = db_api.create_engine(f"sqlite:///{tmp_path}/ratios.sqlite")
    with engine.begin() as conn:
        command.upgrade(migration._config(conn), "0002")
        conn.exec_driver_sql(
            "INSERT INTO compute_nodes (host, hypervisor_hostname, memory_mb) "
            "VALUES ('h', 'n', 4096)"
        )
    migration.db_sync(engine)
    with engine.connect() as conn:
        row = conn.execute(sa.select(models.ComputeNode.__table__)).mappings().one()
    # A node stored before the upgrade sent no ratio: the scheduler decides.
    assert (row["memory_mb"], row["cpu_allocation_ratio"], row["ram_allocation_ratio"],
            row["disk_allocation_ratio"]) == (4096, None, None, None)

    with engine.begin() as conn:
        command.downgrade(migration._config(conn), "0002")
    columns = {c["name"] for c in sa.inspect(engine).get_columns("compute_nodes")}
    assert not columns & {"cpu_allocation_ratio", "ram_allocation_ratio",
                          "disk_allocation_ratio"}
    assert "numa_topology" in columns
    engine.dispose()
