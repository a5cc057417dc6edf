"""Reading today's nova's API and cell databases (never writing them).

The schemas are nova's (tested against nova 34's): the API database's
``cell_mappings``, ``host_mappings`` and ``aggregates`` with their hosts and
metadata; each cell database's ``services``, ``compute_nodes`` and
``instances``. Reads of the cell tables take a ``since`` datetime and
return only rows created, updated or deleted at or after it (nova stamps
every write with ``updated_at``, soft-deletes with ``deleted_at``), and
the rows whose ``id`` is above a given one, so that a refresh reads what
changed, not the whole cloud. The stamps are the writers' clocks, not the
database's: a reader that trusts them alone misses rows (``nova_cells``
reads everything again from time to time). ``Cell.now`` is the database's
own clock, which the ``since`` of the next read is taken from.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from typing import Any

import sqlalchemy as sa

from nova_sched.db.aggregates import AggregateInfo
from nova_sched.scheduler.cloud.sources import database_engine

LOG = logging.getLogger(__name__)

CELL0_UUID = "00000000-0000-0000-0000-000000000000"

_SERVICE_COLUMNS = ("id", "host", "`binary`", "disabled", "disabled_reason",
                    "forced_down", "last_seen_up", "updated_at", "created_at",
                    "deleted", "version")
_NODE_COLUMNS = ("id", "uuid", "host", "hypervisor_hostname", "vcpus", "memory_mb",
                 "local_gb", "current_workload", "hypervisor_type",
                 "hypervisor_version", "cpu_info", "host_ip", "supported_instances",
                 "stats", "metrics", "pci_stats", "numa_topology", "deleted")


def _changed_since(since: dt.datetime | None,
                   above_id: int | None = None) -> tuple[str, dict]:
    if since is None:
        return "deleted = 0", {}
    where = "updated_at >= :since OR created_at >= :since OR deleted_at >= :since"
    params: dict[str, Any] = {"since": since}
    if above_id is not None:
        # A new row whose stamps are older than ``since`` (its writer's
        # clock behind, a bulk insert committed late) still has a higher id:
        # auto-increment ids are handed out in insertion order.
        where += " OR id > :above_id"
        params["above_id"] = above_id
    return f"({where})", params


# The database's clock as naive UTC, nova's way of stamping rows. MySQL's
# NOW() would be the session's time zone; PostgreSQL's now() is the
# transaction's start.
_NOW = {
    "mysql": "SELECT UTC_TIMESTAMP(6)",
    "postgresql": "SELECT clock_timestamp() AT TIME ZONE 'UTC'",
    "sqlite": "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')",
}


def _datetime(value: Any) -> dt.datetime | None:
    """A stamp as a naive UTC datetime (SQLite hands back text)."""
    if isinstance(value, str):
        try:
            return dt.datetime.fromisoformat(value)
        except ValueError:
            return None
    return value


def _engine(url: str) -> sa.Engine:
    # A cell's or the API database's read is small (what changed since the
    # last one): 15 s is long for an answer.
    return database_engine.engine(url, read_timeout=15)


def _quote(column: str, dialect: str) -> str:
    # `binary` is a reserved word in MySQL; PostgreSQL and SQLite quote with ".
    return column if dialect == "mysql" else column.replace("`", '"')


class Cell:
    """One cell of nova: its mapping and a connection to its database."""

    def __init__(self, uuid: str, name: str | None, url: str):
        self.uuid = uuid
        self.name = name or uuid
        self.url = url
        self.engine = _engine(url)

    def _select(self, table: str, columns: tuple[str, ...], where: str,
                params: dict) -> list[dict]:
        dialect = self.engine.dialect.name
        cols = ", ".join(_quote(c, dialect) for c in columns)
        with self.engine.connect() as conn:
            result = conn.execute(sa.text(f"SELECT {cols} FROM {table} WHERE {where}"),
                                  params)
            return [dict(row) for row in result.mappings()]

    def now(self) -> dt.datetime:
        """The database server's clock, naive UTC (as nova stamps rows)."""
        with self.engine.connect() as conn:
            value = conn.execute(sa.text(_NOW[self.engine.dialect.name])).scalar()
        stamp = _datetime(value)
        if stamp is None:
            raise ValueError(f"cell {self.name}: the database's clock reads {value!r}")
        return stamp

    def services(self, since: dt.datetime | None = None) -> list[dict]:
        """nova-compute services (deleted ones only when read by change)."""
        where, params = _changed_since(since)
        rows = self._select("services", _SERVICE_COLUMNS,
                            f"{where} AND {_quote('`binary`', self.engine.dialect.name)}"
                            " = 'nova-compute'", params)
        for row in rows:
            for stamp in ("last_seen_up", "updated_at", "created_at"):
                row[stamp] = _datetime(row[stamp])
        return rows

    def compute_nodes(self, since: dt.datetime | None,
                      above_id: int | None = None) -> list[dict]:
        """Compute nodes not deleted; read by change (``since``), those
        stamped since then, deleted ones included, and those of an id above
        ``above_id``."""
        where, params = _changed_since(since, above_id)
        return self._select("compute_nodes", _NODE_COLUMNS, where, params)

    def instances(self, since: dt.datetime | None,
                  above_id: int | None = None) -> list[dict]:
        """id, uuid, host, node, deleted of instances: those on a host, or,
        read by change, every changed one (an instance that left its host,
        as a shelve offload does, has none) and every one of an id above
        ``above_id``."""
        where, params = _changed_since(since, above_id)
        if since is None:
            where += " AND host IS NOT NULL"
        return self._select("instances", ("id", "uuid", "host", "node", "deleted"),
                            where, params)

    def dispose(self) -> None:
        self.engine.dispose()


class NovaDatabases:
    """nova's API database and the cells it maps."""

    def __init__(self, api_url: str):
        self.api = _engine(api_url)
        self.cells: dict[str, Cell] = {}
        self._lock = threading.Lock()

    def _api_rows(self, query: str) -> list[dict]:
        with self.api.connect() as conn:
            return [dict(row) for row in conn.execute(sa.text(query)).mappings()]

    def refresh_cells(self) -> list[Cell]:
        """The cells of ``cell_mappings`` (cell0 skipped); the new ones first
        read in full by the caller. Cells gone from the mappings are dropped."""
        rows = self._api_rows(
            "SELECT uuid, name, database_connection FROM cell_mappings")
        with self._lock:
            seen = set()
            for row in rows:
                if row["uuid"] == CELL0_UUID or not row["database_connection"]:
                    continue
                url = row["database_connection"]
                if "{" in url:
                    LOG.error("Cell %s stores a templated database_connection; "
                              "nova-sched reads only literal URLs: skipped",
                              row["name"] or row["uuid"])
                    continue
                seen.add(row["uuid"])
                known = self.cells.get(row["uuid"])
                if known is None or known.url != url:
                    if known is not None:
                        known.dispose()
                    self.cells[row["uuid"]] = Cell(row["uuid"], row["name"], url)
            for gone in set(self.cells) - seen:
                self.cells.pop(gone).dispose()
            return list(self.cells.values())

    def host_mappings(self) -> dict[str, str]:
        """host -> uuid of the cell it is mapped to (discover_hosts)."""
        rows = self._api_rows(
            "SELECT h.host AS host, c.uuid AS cell FROM host_mappings h "
            "JOIN cell_mappings c ON h.cell_id = c.id")
        return {row["host"]: row["cell"] for row in rows}

    def aggregates(self) -> list[AggregateInfo]:
        """Every aggregate with its hosts and metadata (the zone among them)."""
        aggs = self._api_rows("SELECT id, uuid, name FROM aggregates")
        hosts = self._api_rows("SELECT aggregate_id, host FROM aggregate_hosts")
        meta = self._api_rows("SELECT aggregate_id, `key`, value FROM aggregate_metadata"
                              if self.api.dialect.name == "mysql" else
                              'SELECT aggregate_id, "key", value FROM aggregate_metadata')
        by_agg_hosts: dict[int, set] = {}
        for row in hosts:
            by_agg_hosts.setdefault(row["aggregate_id"], set()).add(row["host"])
        by_agg_meta: dict[int, dict] = {}
        for row in meta:
            by_agg_meta.setdefault(row["aggregate_id"], {})[row["key"]] = row["value"]
        return [AggregateInfo(id=row["id"], name=row["name"],
                              hosts=frozenset(by_agg_hosts.get(row["id"], ())),
                              metadata=by_agg_meta.get(row["id"], {}),
                              uuid=row["uuid"])
                for row in sorted(aggs, key=lambda r: r["id"])]

    def dispose(self) -> None:
        self.api.dispose()
        for cell in self.cells.values():
            cell.dispose()
