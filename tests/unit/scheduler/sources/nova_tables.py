"""nova's API and cell databases in SQLite (or MySQL/MariaDB), with the
columns nova 34 gives the tables the nova_cells source reads, written as
nova's services write them (naive UTC stamps, soft deletes with
``deleted = id``)."""

from __future__ import annotations

import datetime as dt
import json
import uuid as uuidlib
from typing import Callable

import sqlalchemy as sa

CELL0 = "00000000-0000-0000-0000-000000000000"

_API = """
CREATE TABLE cell_mappings (id INTEGER PRIMARY KEY, uuid VARCHAR(36) NOT NULL,
  name VARCHAR(255), transport_url TEXT, database_connection TEXT, disabled BOOLEAN);
CREATE TABLE host_mappings (id INTEGER PRIMARY KEY, cell_id INTEGER NOT NULL,
  host VARCHAR(255) NOT NULL);
CREATE TABLE aggregates (id INTEGER PRIMARY KEY, uuid VARCHAR(36), name VARCHAR(255),
  created_at DATETIME, updated_at DATETIME);
CREATE TABLE aggregate_hosts (id INTEGER PRIMARY KEY, host VARCHAR(255),
  aggregate_id INTEGER NOT NULL);
CREATE TABLE aggregate_metadata (id INTEGER PRIMARY KEY, "key" VARCHAR(255) NOT NULL,
  value VARCHAR(255) NOT NULL, aggregate_id INTEGER NOT NULL);
"""
_CELL = """
CREATE TABLE services (id INTEGER PRIMARY KEY, host VARCHAR(255), "binary" VARCHAR(255),
  topic VARCHAR(255), report_count INTEGER DEFAULT 0, disabled BOOLEAN DEFAULT 0,
  disabled_reason VARCHAR(255), last_seen_up DATETIME, forced_down BOOLEAN DEFAULT 0,
  version INTEGER, uuid VARCHAR(36), created_at DATETIME, updated_at DATETIME,
  deleted_at DATETIME, deleted INTEGER DEFAULT 0);
CREATE TABLE compute_nodes (id INTEGER PRIMARY KEY, uuid VARCHAR(36), service_id INTEGER,
  host VARCHAR(255), hypervisor_hostname VARCHAR(255), vcpus INTEGER, memory_mb INTEGER,
  local_gb INTEGER, vcpus_used INTEGER, memory_mb_used INTEGER, local_gb_used INTEGER,
  current_workload INTEGER, hypervisor_type TEXT, hypervisor_version INTEGER,
  cpu_info TEXT, host_ip VARCHAR(39), supported_instances TEXT, stats TEXT,
  metrics TEXT, pci_stats TEXT, numa_topology TEXT, cpu_allocation_ratio FLOAT,
  ram_allocation_ratio FLOAT, disk_allocation_ratio FLOAT, created_at DATETIME,
  updated_at DATETIME, deleted_at DATETIME, deleted INTEGER DEFAULT 0);
CREATE TABLE instances (id INTEGER PRIMARY KEY, uuid VARCHAR(36), host VARCHAR(255),
  node VARCHAR(255), vm_state VARCHAR(255), created_at DATETIME, updated_at DATETIME,
  deleted_at DATETIME, deleted INTEGER DEFAULT 0);
"""


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def _sql(statement: str, engine: sa.Engine) -> sa.TextClause:
    """A statement written with SQLite's quotes, in the engine's dialect."""
    if engine.dialect.name == "mysql":
        statement = (statement.replace('"binary"', "`binary`").replace('"key"', "`key`")
                     .replace("INTEGER PRIMARY KEY", "INTEGER PRIMARY KEY AUTO_INCREMENT"))
    return sa.text(statement)


def _create(url: str, ddl: str) -> sa.Engine:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for statement in ddl.split(";"):
            if statement.strip():
                conn.execute(_sql(statement, engine))
    return engine


class NovaTables:
    """An API database and its cells: SQLite files under ``directory``, or
    the databases ``new_database(name)`` makes (it returns their URLs)."""

    def __init__(self, directory, new_database: Callable[[str], str] | None = None):
        self.directory = directory
        self._new_database = new_database or (
            lambda name: f"sqlite:///{directory}/nova_{name}.sqlite")
        self.api_url = self._new_database("api")
        self.api = _create(self.api_url, _API)
        self.cells: dict[str, sa.Engine] = {}
        self._cell_ids: dict[str, int] = {}
        with self.api.begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO cell_mappings (uuid, name, database_connection) "
                "VALUES (:u, 'cell0', :db)"), {"u": CELL0, "db": f"sqlite:///{directory}/x"})

    def add_cell(self, name: str) -> str:
        cell_uuid = str(uuidlib.uuid4())
        url = self._new_database(name)
        self.cells[cell_uuid] = _create(url, _CELL)
        with self.api.begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO cell_mappings (uuid, name, database_connection) "
                "VALUES (:u, :n, :db)"), {"u": cell_uuid, "n": name, "db": url})
            self._cell_ids[cell_uuid] = conn.execute(sa.text(
                "SELECT id FROM cell_mappings WHERE uuid = :u"), {"u": cell_uuid}).scalar()
        return cell_uuid

    def add_compute(self, cell: str, host: str, node: str | None = None,
                    mapped: bool = True, **columns) -> str:
        """A nova-compute service and its node, as nova-compute writes them."""
        node_uuid = columns.pop("uuid", str(uuidlib.uuid4()))
        now = utcnow()
        row = dict(uuid=node_uuid, host=host, hypervisor_hostname=node or host,
                   vcpus=8, memory_mb=16384, local_gb=100, current_workload=0,
                   hypervisor_type="fake", hypervisor_version=1000,
                   cpu_info="{}", host_ip="10.0.0.1",
                   supported_instances=json.dumps([["x86_64", "fake", "hvm"]]),
                   stats=json.dumps({"num_instances": "0"}), metrics="[]",
                   pci_stats=None, numa_topology=None, created_at=now, updated_at=now)
        row.update(columns)
        with self.cells[cell].begin() as conn:
            if not conn.execute(sa.text("SELECT 1 FROM services WHERE host = :h"),
                                {"h": host}).first():
                # Stamped as the node is; up (its heartbeat is now).
                stamp = columns.get("created_at", now)
                conn.execute(_sql(
                    'INSERT INTO services (host, "binary", topic, last_seen_up, '
                    "created_at, updated_at) VALUES (:h, 'nova-compute', 'compute', "
                    ":now, :t, :t)", conn.engine), {"h": host, "t": stamp, "now": now})
            cols = ", ".join(row)
            conn.execute(sa.text(f"INSERT INTO compute_nodes ({cols}) VALUES "
                                 f"({', '.join(':' + c for c in row)})"), row)
        if mapped:
            self.map_host(cell, host)
        return node_uuid

    def map_host(self, cell: str, host: str) -> None:
        """``nova-manage cell_v2 discover_hosts`` for one host."""
        with self.api.begin() as conn:
            conn.execute(sa.text("INSERT INTO host_mappings (cell_id, host) VALUES (:c, :h)"),
                         {"c": self._cell_ids[cell], "h": host})

    def update(self, cell: str, table: str, where: str, params: dict, **values) -> None:
        values.setdefault("updated_at", utcnow())
        sets = ", ".join(f"{k} = :v_{k}" for k in values)
        with self.cells[cell].begin() as conn:
            conn.execute(sa.text(f"UPDATE {table} SET {sets} WHERE {where}"),
                         dict(params, **{f"v_{k}": v for k, v in values.items()}))

    def delete_outright(self, cell: str, table: str, where: str, params: dict) -> None:
        """Rows gone without a soft delete seen (nova-manage db
        archive_deleted_rows moves rows to the shadow tables)."""
        with self.cells[cell].begin() as conn:
            conn.execute(sa.text(f"DELETE FROM {table} WHERE {where}"), params)

    def dispose(self) -> None:
        for engine in (self.api, *self.cells.values()):
            engine.dispose()

    def add_instance(self, cell: str, uuid: str, host: str, node: str,
                     stamp: dt.datetime | None = None) -> None:
        now = stamp or utcnow()
        with self.cells[cell].begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO instances (uuid, host, node, vm_state, created_at, "
                "updated_at) VALUES (:u, :h, :n, 'active', :t, :t)"),
                {"u": uuid, "h": host, "n": node, "t": now})

    def delete_instance(self, cell: str, uuid: str) -> None:
        now = utcnow()
        with self.cells[cell].begin() as conn:
            conn.execute(sa.text("UPDATE instances SET deleted = id, deleted_at = :t "
                                 "WHERE uuid = :u"), {"u": uuid, "t": now})

    def add_aggregate(self, name: str, hosts: list[str], metadata: dict) -> None:
        with self.api.begin() as conn:
            agg_id = conn.execute(sa.text(
                "INSERT INTO aggregates (uuid, name) VALUES (:u, :n) RETURNING id"),
                {"u": str(uuidlib.uuid4()), "n": name}).scalar()
            for host in hosts:
                conn.execute(sa.text("INSERT INTO aggregate_hosts (host, aggregate_id) "
                                     "VALUES (:h, :a)"), {"h": host, "a": agg_id})
            for key, value in metadata.items():
                conn.execute(_sql('INSERT INTO aggregate_metadata ("key", value, '
                                  "aggregate_id) VALUES (:k, :v, :a)", conn.engine),
                             {"k": key, "v": value, "a": agg_id})
