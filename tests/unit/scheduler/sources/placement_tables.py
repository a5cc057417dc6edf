"""Placement 16's database for tests: its schema made by Placement's own
migrations (``placement-manage db sync`` of the nova venv), then rows
written by SQL as Placement writes them (ids, generations, roots)."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
import uuid as uuidlib
from pathlib import Path

import sqlalchemy as sa

FUNCTIONAL = Path(__file__).resolve().parents[3] / "functional"


@functools.lru_cache(maxsize=1)
def placement_manage() -> Path:
    """The nova venv's placement-manage (the venv made once, then reused)."""
    if str(FUNCTIONAL) not in sys.path:
        sys.path.insert(0, str(FUNCTIONAL))
    import novacloud

    return novacloud.ensure_venv() / "bin" / "placement-manage"


def sync_schema(url: str, directory: Path) -> None:
    """Placement's tables at ``url``, by Placement's own migrations."""
    conf = directory / f"placement-{uuidlib.uuid4().hex[:8]}.conf"
    conf.write_text(f"[placement_database]\nconnection = {url}\n")
    done = subprocess.run([str(placement_manage()), "--config-file", str(conf),
                           "db", "sync"], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"placement-manage db sync failed:\n{done.stderr[-3000:]}")


def sqlite_schema(directory: Path) -> Path:
    """A SQLite file in ``directory`` with Placement's tables: made once a
    module (a migration takes seconds), copied for each test."""
    path = directory / "placement.sqlite"
    sync_schema(f"sqlite:///{path}", directory)
    return path


def sqlite_copy(schema: Path, directory: Path) -> str:
    """The URL of a copy of ``schema`` in ``directory``: one test's own
    Placement database."""
    path = directory / "placement.sqlite"
    shutil.copy(schema, path)
    return f"sqlite:///{path}"


class PlacementTables:
    """Rows of Placement's tables, written straight by SQL."""

    def __init__(self, engine: sa.Engine):
        self.engine = engine
        self.ids: dict[str, int] = {}      # provider uuid -> id
        self.traits: dict[str, int] = {}
        self.aggregates: dict[str, int] = {}
        self.classes: dict[str, int] = {}

    @staticmethod
    def emptied(url: str) -> None:
        """Every row of Placement's tables at ``url`` deleted."""
        engine = sa.create_engine(url)
        try:
            with engine.begin() as conn:
                for table in ("allocations", "inventories", "resource_provider_traits",
                              "resource_provider_aggregates", "traits",
                              "placement_aggregates", "resource_classes", "consumers"):
                    conn.execute(sa.text(f"DELETE FROM {table}"))
                conn.execute(sa.text("UPDATE resource_providers SET "
                                     "root_provider_id = NULL, parent_provider_id = NULL"))
                conn.execute(sa.text("DELETE FROM resource_providers"))
        finally:
            engine.dispose()

    def sql(self, statement: str, **params) -> None:
        with self.engine.begin() as conn:
            conn.execute(sa.text(statement), params)

    def _insert(self, table: str, **values) -> int:
        columns = ", ".join(values)
        marks = ", ".join(f":{name}" for name in values)
        with self.engine.begin() as conn:
            result = conn.execute(sa.text(f"INSERT INTO {table} ({columns}) "
                                          f"VALUES ({marks})"), values)
            return result.lastrowid

    def provider(self, name: str, parent: str | None = None,
                 uuid: str | None = None) -> str:
        """A new provider under ``parent`` (a uuid), its root's; its uuid."""
        uuid = uuid or str(uuidlib.uuid4())
        rp_id = self._insert("resource_providers", uuid=uuid, name=name, generation=0)
        parent_id = self.ids[parent] if parent else None
        root_id = rp_id
        if parent_id is not None:
            with self.engine.connect() as conn:
                root_id = conn.execute(sa.text(
                    "SELECT root_provider_id FROM resource_providers WHERE id = :id"),
                    {"id": parent_id}).scalar()
        self.sql("UPDATE resource_providers SET root_provider_id = :root, "
                 "parent_provider_id = :parent WHERE id = :id",
                 root=root_id, parent=parent_id, id=rp_id)
        self.ids[uuid] = rp_id
        return uuid

    def bump(self, uuid: str) -> None:
        """What Placement does to a provider on each change it writes."""
        self.sql("UPDATE resource_providers SET generation = generation + 1 "
                 "WHERE id = :id", id=self.ids[uuid])

    def resource_class(self, name: str, rc_id: int | None = None) -> int:
        if name not in self.classes:
            with self.engine.connect() as conn:
                top = conn.execute(sa.text(
                    "SELECT MAX(id) FROM resource_classes WHERE id >= 10000")).scalar()
            rc_id = rc_id if rc_id is not None else max(top or 9999, 9999) + 1
            self._insert("resource_classes", id=rc_id, name=name)
            self.classes[name] = rc_id
        return self.classes[name]

    def inventory(self, uuid: str, rc_id: int, total: int, reserved: int = 0,
                  min_unit: int = 1, max_unit: int | None = None, step_size: int = 1,
                  allocation_ratio: float = 1.0) -> None:
        self._insert("inventories", resource_provider_id=self.ids[uuid],
                     resource_class_id=rc_id, total=total, reserved=reserved,
                     min_unit=min_unit, max_unit=max_unit if max_unit else total,
                     step_size=step_size, allocation_ratio=allocation_ratio)

    def allocation(self, uuid: str, consumer: str, rc_id: int, used: int) -> None:
        self._insert("allocations", resource_provider_id=self.ids[uuid],
                     consumer_id=consumer, resource_class_id=rc_id, used=used)

    def delete_consumer(self, consumer: str) -> None:
        """A DELETE /allocations/{consumer}: no generation moves."""
        self.sql("DELETE FROM allocations WHERE consumer_id = :c", c=consumer)

    def trait(self, uuid: str, *names: str) -> None:
        """The traits ``names`` set on the provider (created when new)."""
        with self.engine.begin() as conn:
            for name in names:
                if name not in self.traits:
                    self.traits[name] = conn.execute(sa.text(
                        "INSERT INTO traits (name) VALUES (:name)"),
                        {"name": name}).lastrowid
                conn.execute(sa.text(
                    "INSERT INTO resource_provider_traits (resource_provider_id, "
                    "trait_id) VALUES (:rp, :trait)"),
                    {"rp": self.ids[uuid], "trait": self.traits[name]})

    def aggregate(self, uuid: str, agg_uuid: str) -> None:
        if agg_uuid not in self.aggregates:
            self.aggregates[agg_uuid] = self._insert("placement_aggregates",
                                                     uuid=agg_uuid)
        self._insert("resource_provider_aggregates",
                     resource_provider_id=self.ids[uuid],
                     aggregate_id=self.aggregates[agg_uuid])

    def delete_provider(self, uuid: str) -> None:
        rp_id = self.ids.pop(uuid)
        for table in ("inventories", "allocations", "resource_provider_traits",
                      "resource_provider_aggregates"):
            self.sql(f"DELETE FROM {table} WHERE resource_provider_id = :id", id=rp_id)
        # Its root is itself (a root's): MySQL checks the key row by row.
        self.sql("UPDATE resource_providers SET root_provider_id = NULL, "
                 "parent_provider_id = NULL WHERE id = :id", id=rp_id)
        self.sql("DELETE FROM resource_providers WHERE id = :id", id=rp_id)
