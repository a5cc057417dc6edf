"""Placement's state read from Placement's own database (never written).

The tables are Placement 16's: ``resource_providers`` (with parent and
root), ``inventories``, ``allocations``, ``resource_classes``,
``traits``, ``resource_provider_traits``, ``placement_aggregates`` and
``resource_provider_aggregates``. ``PlacementDatabase`` reads them into
whole ``Provider`` s (``placement_model.providers``): every table in one
query, usages summed by the database (``SUM(used) GROUP BY`` provider and
class), so a read of 100,000 providers and a million allocations brings
back one row per provider and class, not one per allocation.

``PlacementModelReader`` keeps a ``ProviderModel`` current from it. Every
``[placement_database] refresh_interval`` it reads the generation of every
provider and, whole, only those whose generation moved, the new ones and
the removed ones. Placement moves a provider's generation on every change
a scheduler must not miss (inventories, traits, allocations written); the
changes it does not show are releases (a consumer's allocations deleted, a
consumer moved off a provider) or rare operator changes (aggregates set
below microversion 1.19, a new parent): every ``resync_interval`` the
tables are read whole and only the differences are applied.

This daemon's own claims count at once (``note_claimed``): until a read
that began after Placement accepted the claim (``note_confirmed``) shows
the provider, the claim is added on top of what reads return. A claim
whose write overlapped a read may or may not be in it; it stays counted
(erring on the full side) and the provider is read again at the next
refresh, whatever its generation, until a read settles it.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import struct
import threading
import time
from typing import Any, Iterable, Mapping

import sqlalchemy as sa

from nova_sched.conf import CONF
from nova_sched.scheduler.placement_model.providers import (Inventory, Provider,
                                                            ProviderModel)

LOG = logging.getLogger(__name__)

# Placement gives custom resource classes ids from 10000 up; below, the
# standard classes have the id of their place in os-resource-classes'
# STANDARDS list (placement 16 inserts them so at its start, which a
# database only migrated has not had yet). The names, in that order, as
# os-resource-classes 1.1 lists them.
MIN_CUSTOM_RESOURCE_CLASS_ID = 10000
STANDARD_RESOURCE_CLASSES = (
    "VCPU", "MEMORY_MB", "DISK_GB", "PCI_DEVICE", "SRIOV_NET_VF", "NUMA_SOCKET",
    "NUMA_CORE", "NUMA_THREAD", "NUMA_MEMORY_MB", "IPV4_ADDRESS", "VGPU",
    "VGPU_DISPLAY_HEAD", "NET_BW_EGR_KILOBIT_PER_SEC", "NET_BW_IGR_KILOBIT_PER_SEC",
    "PCPU", "MEM_ENCRYPTION_CONTEXT", "FPGA", "PGPU",
    "NET_PACKET_RATE_KILOPACKET_PER_SEC", "NET_PACKET_RATE_EGR_KILOPACKET_PER_SEC",
    "NET_PACKET_RATE_IGR_KILOPACKET_PER_SEC",
)
# Providers read by id per query when only some are read (bound parameters
# stay well under every driver's limit).
_CHUNK = 500
# Above this share of the providers changed, a read by change reads the
# tables whole: cheaper than thousands of IN lists.
_WHOLE_READ_SHARE = 0.25
# A claim never confirmed nor withdrawn (its writer died) stops counting
# after this long; a read has shown Placement's answer by then.
_PENDING_TTL = 300.0

_PROVIDERS = (
    "SELECT rp.id, rp.uuid, rp.name, rp.generation, parent.uuid AS parent_uuid, "
    "root.uuid AS root_uuid FROM resource_providers rp "
    "LEFT JOIN resource_providers parent ON parent.id = rp.parent_provider_id "
    "LEFT JOIN resource_providers root ON root.id = rp.root_provider_id")
_INVENTORIES = (
    "SELECT resource_provider_id, resource_class_id, total, reserved, min_unit, "
    "max_unit, step_size, allocation_ratio FROM inventories")
_USAGES = (
    "SELECT resource_provider_id, resource_class_id, SUM(used) AS used "
    "FROM allocations{where} GROUP BY resource_provider_id, resource_class_id")
_PROVIDER_TRAITS = "SELECT resource_provider_id, trait_id FROM resource_provider_traits"
_PROVIDER_AGGREGATES = (
    "SELECT resource_provider_id, aggregate_id FROM resource_provider_aggregates")


def masked_url(url: str) -> str:
    """The URL with its password hidden, for logs and messages."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL: say nothing of it
        return "<unparsable database URL>"


def _engine(url: str) -> sa.Engine:
    connect_args: dict[str, Any] = {}
    if url.startswith("mysql"):
        # A dead server answers within seconds; a whole read of 100,000
        # providers takes a few.
        connect_args = {"connect_timeout": 3, "read_timeout": 60, "write_timeout": 15}
    elif url.startswith("postgresql"):
        connect_args = {"connect_timeout": 3}
    return sa.create_engine(url, pool_pre_ping=True, pool_recycle=3600,
                            connect_args=connect_args)


def _single_precision(value: float) -> float:
    # MySQL stores allocation_ratio as a 4-byte FLOAT and computes with that
    # value, but sends it as its shortest decimal (0.9, not 0.899999976):
    # the model keeps the value Placement's own SQL uses.
    return struct.unpack("f", struct.pack("f", value))[0]


@dataclasses.dataclass
class ReadStats:
    """What the last read cost: rows fetched per table, seconds."""

    rows: dict[str, int] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())


class PlacementDatabase:
    """Placement's database, read only, into whole ``Provider`` s."""

    def __init__(self, url: str):
        self.where = masked_url(url)
        self.engine = _engine(url)
        self.last_read = ReadStats()

    def _connect(self) -> sa.Connection:
        conn = self.engine.connect()
        if self.engine.dialect.name in ("mysql", "postgresql"):
            # One snapshot for every table of a read: a provider deleted
            # between two queries does not leave half of itself behind.
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        return conn

    # -- the names --------------------------------------------------------
    def _names(self, conn: sa.Connection) -> tuple[dict[int, str], dict[int, str],
                                                   dict[int, str]]:
        classes = {i: name for i, name in enumerate(STANDARD_RESOURCE_CLASSES)}
        classes.update(conn.exec_driver_sql(
            "SELECT id, name FROM resource_classes").all())
        traits = dict(conn.exec_driver_sql("SELECT id, name FROM traits").all())
        aggregates = dict(conn.exec_driver_sql(
            "SELECT id, uuid FROM placement_aggregates").all())
        self._count("names", len(classes) + len(traits) + len(aggregates))
        return classes, traits, aggregates

    def _count(self, table: str, rows: int) -> None:
        self.last_read.rows[table] = self.last_read.rows.get(table, 0) + rows

    # -- whole reads ------------------------------------------------------
    def read_all(self) -> tuple[list[Provider], set[str], set[str]]:
        """Every provider, whole; the names of every trait and resource
        class Placement knows."""
        self.last_read = ReadStats()
        started = time.monotonic()
        with self._connect() as conn, conn.begin():
            classes, traits, aggregates = self._names(conn)
            providers = self._providers(conn, None, classes, traits, aggregates)
        self.last_read.seconds = time.monotonic() - started
        return providers, set(traits.values()), set(classes.values())

    def generations(self) -> dict[str, int]:
        """uuid -> generation of every provider (one narrow query)."""
        with self.engine.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT uuid, generation FROM resource_providers").all()
        self._count("resource_providers (generations)", len(rows))
        return {uuid: generation or 0 for uuid, generation in rows}

    def read_providers(self, uuids: Iterable[str]) -> list[Provider]:
        """The providers named (those that exist), whole."""
        self.last_read = ReadStats()
        started = time.monotonic()
        wanted = sorted(set(uuids))
        if not wanted:
            return []
        with self._connect() as conn, conn.begin():
            classes, traits, aggregates = self._names(conn)
            providers = self._providers(conn, wanted, classes, traits, aggregates)
        self.last_read.seconds = time.monotonic() - started
        return providers

    def read_changed(self, known: Mapping[str, int]) -> tuple[list[Provider], list[str]]:
        """Providers new or whose generation is not ``known``'s (uuid ->
        generation), whole; and the uuids of ``known`` gone from Placement."""
        started = time.monotonic()
        self.last_read = ReadStats()
        current = self.generations()
        removed = [uuid for uuid in known if uuid not in current]
        moved = [uuid for uuid, generation in current.items()
                 if known.get(uuid) != generation]
        rows = dict(self.last_read.rows)
        if not moved:
            changed: list[Provider] = []
        elif len(moved) > _WHOLE_READ_SHARE * len(current):
            wanted = set(moved)
            changed = [p for p in self.read_all()[0] if p.uuid in wanted]
        else:
            changed = self.read_providers(moved)
        for table, count in rows.items():
            self._count(table, count)
        self.last_read.seconds = time.monotonic() - started
        return changed, removed

    def _providers(self, conn: sa.Connection, uuids: list[str] | None,
                   classes: dict[int, str], traits: dict[int, str],
                   aggregates: dict[int, str]) -> list[Provider]:
        """Providers (all, or those of ``uuids``) with their holdings."""
        if uuids is None:
            rp_rows = self._rows(conn, "resource_providers", _PROVIDERS)
        else:
            rp_rows = []
            for chunk in _chunks(uuids):
                rp_rows += self._rows(conn, "resource_providers",
                                      _PROVIDERS + " WHERE rp.uuid IN :uuids",
                                      {"uuids": chunk})
        ids = None if uuids is None else [row[0] for row in rp_rows]
        single = self.engine.dialect.name == "mysql"
        inventories: dict[int, dict[str, Inventory]] = {}
        for rp, rc, total, reserved, min_unit, max_unit, step, ratio in self._by_provider(
                conn, "inventories", _INVENTORIES, ids):
            ratio = float(ratio)
            inventories.setdefault(rp, {})[classes.get(rc, f"#{rc}")] = Inventory(
                total=total, reserved=reserved, min_unit=min_unit, max_unit=max_unit,
                step_size=step,
                allocation_ratio=_single_precision(ratio) if single else ratio)
        usages: dict[int, dict[str, int]] = {}
        for rp, rc, used in self._by_provider(conn, "allocations", _USAGES, ids,
                                              grouped=True):
            usages.setdefault(rp, {})[classes.get(rc, f"#{rc}")] = int(used)
        rp_traits: dict[int, list[str]] = {}
        for rp, trait in self._by_provider(conn, "resource_provider_traits",
                                           _PROVIDER_TRAITS, ids):
            name = traits.get(trait)
            if name is not None:
                rp_traits.setdefault(rp, []).append(name)
        rp_aggs: dict[int, list[str]] = {}
        for rp, agg in self._by_provider(conn, "resource_provider_aggregates",
                                         _PROVIDER_AGGREGATES, ids):
            uuid = aggregates.get(agg)
            if uuid is not None:
                rp_aggs.setdefault(rp, []).append(uuid)
        return [Provider(uuid=uuid, name=name or "", generation=generation or 0,
                         parent_uuid=parent, root_uuid=root or uuid,
                         inventories=inventories.get(rp_id, {}),
                         usages=usages.get(rp_id, {}),
                         traits=frozenset(rp_traits.get(rp_id, ())),
                         aggregates=frozenset(rp_aggs.get(rp_id, ())))
                for rp_id, uuid, name, generation, parent, root in rp_rows]

    def _by_provider(self, conn: sa.Connection, table: str, query: str,
                     ids: list[int] | None, grouped: bool = False) -> list[tuple]:
        """``query``'s rows, all or those of the provider ids ``ids``."""
        if grouped:
            if ids is None:
                return self._rows(conn, table, query.format(where=""))
            query = query.format(where=" WHERE resource_provider_id IN :ids")
        elif ids is None:
            return self._rows(conn, table, query)
        else:
            query += " WHERE resource_provider_id IN :ids"
        rows: list[tuple] = []
        for chunk in _chunks(ids):
            rows += self._rows(conn, table, query, {"ids": chunk})
        return rows

    def _rows(self, conn: sa.Connection, table: str, query: str,
              params: dict | None = None) -> list[tuple]:
        statement = sa.text(query)
        if params:
            statement = statement.bindparams(
                *(sa.bindparam(name, expanding=True) for name in params))
        rows = conn.execute(statement, params or {}).all()
        self._count(table, len(rows))
        return rows

    def dispose(self) -> None:
        self.engine.dispose()


def _chunks(items: list) -> Iterable[list]:
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, _CHUNK)):
        yield chunk
