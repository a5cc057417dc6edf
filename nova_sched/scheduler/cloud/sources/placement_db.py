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
the removed ones. Placement moves a provider's generation on every
allocation written, inventory and trait change; it does not move it for a
release (a consumer's allocations deleted, a consumer moved off a
provider): each refresh compares Placement's usage per resource class
with the model's and, when Placement uses less, reads every provider's
usage and, whole, the providers released on. Rare operator changes that
move no generation either (aggregates set below microversion 1.19, a new
parent) wait for the reconciliation: every ``resync_interval`` the tables
are read whole and only the differences are applied.

This daemon's own claims count at once (``note_claimed``): until a read
that began after Placement accepted the claim (``note_confirmed``) shows
the provider, the claim is added on top of what reads return. A claim
whose write overlapped a read may or may not be in it; it stays counted
(erring on the full side) and the provider is read again at the next
refresh, whatever its generation, until a read settles it. A claim is
counted through ``note_claimed`` only, never ``ProviderModel.add_usage``
directly: a read applied after it would drop what the reader does not
know of.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import struct
import threading
import time
from typing import Iterable, Mapping

import sqlalchemy as sa

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler.cloud.sources import database_engine
from nova_sched.scheduler.placement_model import search_context
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
# A poll still unanswered after this long makes /healthz say so (a dead
# server may take read_timeout to fail the read).
_SLOW_READ = 30.0

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
# Every allocation summed per class: a release shows as less used than the
# model counts (one row per class, over Placement's covering index).
_USAGE_TOTALS = ("SELECT resource_class_id, SUM(used) FROM allocations "
                 "GROUP BY resource_class_id")
_USAGES_BY_UUID = (
    "SELECT rp.uuid, a.resource_class_id, SUM(a.used) FROM allocations a "
    "JOIN resource_providers rp ON rp.id = a.resource_provider_id "
    "GROUP BY rp.uuid, a.resource_class_id")
# A provider's traits in one row, their ids joined by the database: a
# million provider-trait rows (100 a root) come back as one row per provider.
_PROVIDER_TRAITS = ("SELECT resource_provider_id, {joined} FROM resource_provider_traits"
                    "{where} GROUP BY resource_provider_id")
_JOINED_TRAIT_IDS = {
    "mysql": "GROUP_CONCAT(trait_id)",
    "postgresql": "string_agg(CAST(trait_id AS TEXT), ',')",
    "sqlite": "group_concat(trait_id)",
}
_PROVIDER_AGGREGATES = (
    "SELECT resource_provider_id, aggregate_id FROM resource_provider_aggregates")


def masked_url(url: str) -> str:
    """The URL with its password hidden, for logs and messages."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL: say nothing of it
        return "<unparsable database URL>"


def _engine(url: str) -> sa.Engine:
    # A whole read of 100,000 providers takes a few seconds.
    return database_engine.engine(url, read_timeout=60)


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
        # (trait names, resource class names) as the last read that read
        # providers found them (None: no such read yet).
        self.last_names: tuple[set[str], set[str]] | None = None
        # resource class id -> name, as the last read of names found them.
        self._classes: dict[int, str] = dict(enumerate(STANDARD_RESOURCE_CLASSES))

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
        in_table = conn.exec_driver_sql("SELECT id, name FROM resource_classes").all()
        classes = {i: name for i, name in enumerate(STANDARD_RESOURCE_CLASSES)}
        classes.update(in_table)
        traits = dict(conn.exec_driver_sql("SELECT id, name FROM traits").all())
        aggregates = dict(conn.exec_driver_sql(
            "SELECT id, uuid FROM placement_aggregates").all())
        self._count("names", len(in_table) + len(traits) + len(aggregates))
        self.last_names = (set(traits.values()), set(classes.values()))
        self._classes = classes
        return classes, traits, aggregates

    def _class_name(self, class_id: int) -> str:
        return self._classes.get(class_id, f"#{class_id}")

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
        return providers, *self.last_names

    def generations(self) -> dict[str, int]:
        """uuid -> generation of every provider (one narrow query)."""
        with self.engine.connect() as conn:
            rows = self._rows(conn, "resource_providers (generations)",
                              "SELECT uuid, generation FROM resource_providers")
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

    def usage_totals(self) -> dict[str, int]:
        """Resource class -> what every allocation uses of it."""
        with self.engine.connect() as conn:
            rows = self._rows(conn, "allocations (totals)", _USAGE_TOTALS)
        return {self._class_name(rc): int(used) for rc, used in rows if used}

    def usages_by_provider(self) -> dict[str, dict[str, int]]:
        """Provider uuid -> class -> what its allocations use (providers
        with allocations only)."""
        with self.engine.connect() as conn:
            rows = self._rows(conn, "allocations (by provider)", _USAGES_BY_UUID)
        usages: dict[str, dict[str, int]] = {}
        for uuid, rc, used in rows:
            if used:
                usages.setdefault(uuid, {})[self._class_name(rc)] = int(used)
        return usages

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
        if moved:  # the whole read restarted the figures
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
        if single:
            # MySQL cuts GROUP_CONCAT at 1,024 bytes by default (MariaDB
            # at 1 MB): 300 traits take more.
            conn.exec_driver_sql("SET SESSION group_concat_max_len = 1048576")
        rp_traits: dict[int, frozenset[str]] = {}
        # Hosts of one hardware model share one trait set: one frozenset.
        sets: dict[str, frozenset[str]] = {}
        for rp, joined in self._by_provider(
                conn, "resource_provider_traits", _PROVIDER_TRAITS.replace(
                    "{joined}", _JOINED_TRAIT_IDS[self.engine.dialect.name]),
                ids, grouped=True):
            found = sets.get(joined)
            if found is None:
                found = sets[joined] = frozenset(
                    traits[int(t)] for t in joined.split(",") if int(t) in traits)
            rp_traits[rp] = found
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
                         traits=rp_traits.get(rp_id, frozenset()),
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
        if params:
            statement = sa.text(query).bindparams(
                *(sa.bindparam(name, expanding=True) for name in params))
            rows = conn.execute(statement, params).all()
        else:
            # A whole table: the driver's plain tuples, in the read's
            # transaction. SQLAlchemy's Row objects cost more than the
            # query itself at a million rows.
            cursor = conn.connection.dbapi_connection.cursor()
            try:
                cursor.execute(query)
                rows = cursor.fetchall()
            finally:
                cursor.close()
        self._count(table, len(rows))
        return rows

    def dispose(self) -> None:
        """Close the engine's pooled connections."""
        self.engine.dispose()


def _chunks(items: list) -> Iterable[list]:
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, _CHUNK)):
        yield chunk


@dataclasses.dataclass
class PendingClaim:
    """A claim of this daemon, counted in the model before a read shows it.

    ``allocations`` ({rp_uuid: {rc: amount}}) loses a provider once a read
    of that provider began after Placement accepted the claim: from then on
    the read counts it."""

    allocations: dict[str, dict[str, int]]
    # time.monotonic() when counted (before it was sent to Placement).
    counted: float = dataclasses.field(default_factory=time.monotonic)
    # time.monotonic() when Placement accepted it (None: not yet).
    confirmed: float | None = None


class PlacementModelReader:
    """A ``ProviderModel`` kept current from Placement's database.

    ``poll`` (the poller thread's, every ``[placement_database]
    refresh_interval``) reads the providers whose generation moved
    (``refresh``) or, every ``resync_interval`` and at the first read,
    every table whole (``reconcile``). A read that fails leaves the model as
    last read and ``problem`` says why; the next poll tries again.
    """

    def __init__(self, database: PlacementDatabase | None = None,
                 model: ProviderModel | None = None):
        if database is None:
            url = CONF.placement_database.connection
            if not url:
                raise exception.ConfigurationError(
                    "Placement's model needs [placement_database] connection")
            database = PlacementDatabase(url)
        self.database = database
        self.model = model if model is not None else ProviderModel()
        # The model's own (re-entrant) lock guards the pending claims too:
        # a claim counted while a read is applied is neither lost nor
        # doubled, and a caller already holding the model's lock (a
        # decision) may note a claim without a second lock to order.
        self._lock = self.model.lock
        self._pending: list[PendingClaim] = []
        self._polling = threading.Lock()  # one read at a time
        self._reconciled: float | None = None  # time.monotonic() of the last
        self._problem: str | None = "Placement's database has not been read yet"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reading_since: float | None = None  # a poll under way since
        # Seconds the last refresh or reconciliation held the model's lock
        # (what a decision may have waited for it).
        self.last_hold = 0.0

    # -- the poller ---------------------------------------------------------
    def start(self) -> None:
        """Read in a thread of its own every refresh_interval."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name="placement-db-reader")
            self._thread.start()

    def stop(self) -> None:
        """End the poller thread (waits for a read under way, 10 s at most)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    def _run(self) -> None:
        self.poll()
        while not self._stop.wait(CONF.placement_database.refresh_interval):
            self.poll()

    def poll(self) -> None:
        """A refresh, or a reconciliation when one is due; never raises."""
        self._reading_since = time.monotonic()
        try:
            due = (self._reconciled is None or time.monotonic() - self._reconciled
                   >= CONF.placement_database.resync_interval)
            if due:
                self.reconcile()
            else:
                self.refresh()
            # The candidate search's index built here, off the decisions' path.
            search_context.warm(self.model)
            self._problem = None
        except Exception as err:  # the next poll tries again; /healthz says why
            self._problem = (f"Placement's database ({self.database.where}) "
                             f"unreachable: {self._scrubbed(err)}; Placement's "
                             "model is as last read")
            LOG.warning("%s", self._problem)
        finally:
            self._reading_since = None

    def problem(self) -> str | None:
        """Why the model may be stale (for /healthz); None when it is not."""
        since = self._reading_since
        if since is not None and time.monotonic() - since > _SLOW_READ:
            return (f"Placement's database ({self.database.where}) has not "
                    f"answered a read for {time.monotonic() - since:.0f} s; "
                    "Placement's model is as last read")
        return self._problem

    # -- reads --------------------------------------------------------------
    def refresh(self) -> int:
        """Read the providers whose generation moved, the new and removed
        ones (and those holding a confirmed claim not yet settled); returns
        how many changed in the model."""
        if self._reconciled is None:
            return self.reconcile()
        with self._polling:
            with self.model.lock:  # a copy under it, the dict built after
                providers = list(self.model.providers.values())
            known = {p.uuid: p.generation for p in providers}
            with self._lock:
                for claim in self._pending:
                    if claim.confirmed is not None:
                        for uuid in claim.allocations:
                            known[uuid] = -1  # read it again, whatever its generation
            started = time.monotonic()
            changed, removed = self.database.read_changed(known)
            finished = time.monotonic()
            with self._lock:
                holding = time.monotonic()
                changed = self._with_pending(changed, started, finished)
                self._drop_pending(removed)
                names = self.database.last_names if changed else None
                if names is not None and names == (self.model.known_traits,
                                                   self.model.known_classes):
                    names = None
                if changed or removed or names:
                    # A trait or class created since the last read comes
                    # with the provider that holds it.
                    self.model.apply(changed, removed, *(names or (None, None)))
                self.last_hold = time.monotonic() - holding
            return len(changed) + len(removed) + self._read_released()

    def _read_released(self) -> int:
        """Read again the providers Placement released allocations on.

        A release (a consumer's allocations deleted, or moved off a
        provider) moves no generation, yet a scheduler that misses it
        refuses what nova-scheduler would place (a host freed by a
        migration or a delete). Placement's usage per class, one row each,
        is compared with what the model's reads counted: less used in
        Placement means a release, and only then is every provider's usage
        read to find which ones, and those are read whole. More used is a
        claim, which the next refresh reads by generation."""
        totals = self.database.usage_totals()
        with self._lock:
            expected = self.model.used_totals()
            for uuid, amounts in self._pending_on().items():
                for rc, amount in amounts.items():
                    expected[rc] = expected.get(rc, 0) - amount
        if all(totals.get(rc, 0) >= amount for rc, amount in expected.items()):
            return 0
        used = self.database.usages_by_provider()
        with self._lock:
            pending = self._pending_on()
            released = []
            for uuid, provider in self.model.providers.items():
                now = used.get(uuid, {})
                extra = pending.get(uuid, {})
                if any(amount - extra.get(rc, 0) > now.get(rc, 0)
                       for rc, amount in provider.usages.items()):
                    released.append(uuid)
        if not released:
            return 0
        LOG.debug("Placement's database: allocations released on %d providers; "
                  "reading them again", len(released))
        return self._read(released)

    def _pending_on(self) -> dict[str, dict[str, int]]:
        """Provider uuid -> what this daemon's claims not yet read add on it
        (the reader's lock held)."""
        on: dict[str, dict[str, int]] = {}
        for claim in self._pending:
            for uuid, amounts in claim.allocations.items():
                if uuid in self.model.providers:
                    mine = on.setdefault(uuid, {})
                    for rc, amount in amounts.items():
                        mine[rc] = mine.get(rc, 0) + amount
        return on

    def reconcile(self) -> int:
        """Read every table whole and apply only what differs from the
        model (what a generation does not show: releases, aggregates,
        parents); returns how many providers changed."""
        with self._polling:
            started = time.monotonic()
            providers, traits, classes = self.database.read_all()
            finished = time.monotonic()
            with self._lock:
                self._expire(finished)
                current = dict(self.model.providers)
                claimed = {uuid for claim in self._pending for uuid in claim.allocations}
                names_changed = (traits != self.model.known_traits
                                 or classes != self.model.known_classes)
            # Compared outside the lock (tens of ms at 10,000 providers,
            # decisions go on): only the providers that differ, and those
            # holding a claim of this daemon, are composed under it. A claim
            # noted meanwhile on another provider stays on top of it: the
            # read found that provider as the model had it.
            read = {p.uuid for p in providers}
            suspects = [p for p in providers
                        if p.uuid in claimed or current.get(p.uuid) != p]
            removed = [uuid for uuid in current if uuid not in read]
            with self._lock:
                holding = time.monotonic()
                differ = [p for p in self._with_pending(suspects, started, finished)
                          if self.model.providers.get(p.uuid) != p]
                self._drop_pending(removed)
                if differ or removed or names_changed:
                    self.model.apply(differ, removed, traits, classes)
                self.last_hold = time.monotonic() - holding
            self._reconciled = finished
            if differ or removed:
                LOG.info("Placement's database: %d providers differed from the "
                         "model, %d removed, at reconciliation", len(differ),
                         len(removed))
            return len(differ) + len(removed)

    def read_providers(self, uuids: Iterable[str]) -> int:
        """Read these providers now (a claim Placement refused with a 409:
        another scheduler took what the model shows free)."""
        with self._polling:
            return self._read(uuids)

    def _read(self, uuids: Iterable[str]) -> int:
        uuids = set(uuids)
        started = time.monotonic()
        found = self.database.read_providers(uuids)
        finished = time.monotonic()
        removed = list(uuids - {p.uuid for p in found})
        with self._lock:
            found = self._with_pending(found, started, finished)
            removed = [uuid for uuid in removed if uuid in self.model.providers]
            self._drop_pending(removed)
            self.model.apply(found, removed)
        return len(found) + len(removed)

    # -- this daemon's claims ----------------------------------------------
    def note_claimed(self, allocations: Mapping[str, Mapping[str, int]]) -> PendingClaim:
        """Count a claim ({rp_uuid: {rc: amount}}) in the model now, before
        it is sent to Placement; returns what note_confirmed and
        note_withdrawn take."""
        claim = PendingClaim({uuid: {rc: int(n) for rc, n in amounts.items()}
                              for uuid, amounts in allocations.items()})
        with self._lock:
            self._pending.append(claim)
            self.model.add_usage(claim.allocations)
        return claim

    def note_confirmed(self, claim: PendingClaim) -> None:
        """Placement accepted the claim: the first read of each of its
        providers that begins from now on counts it instead."""
        with self._lock:
            claim.confirmed = time.monotonic()

    def note_withdrawn(self, claim: PendingClaim) -> None:
        """The claim was refused, or its allocations deleted before any read
        counted them: take back what is still counted of it."""
        with self._lock:
            if claim in self._pending:
                self._pending.remove(claim)
                self.model.add_usage(claim.allocations, sign=-1)

    def pending(self) -> list[PendingClaim]:
        """This daemon's claims still counted on top of what reads show."""
        with self._lock:
            return list(self._pending)

    def _with_pending(self, providers: list[Provider], started: float,
                      finished: float) -> list[Provider]:
        """The providers as read over [started, finished], with this
        daemon's claims the read cannot be trusted to count added on top;
        those Placement accepted before the read began are settled
        (dropped)."""
        if not self._pending:
            return providers
        claims_on: dict[str, list[PendingClaim]] = {}
        for claim in self._pending:
            for uuid in claim.allocations:
                claims_on.setdefault(uuid, []).append(claim)
        composed = []
        for provider in providers:
            extra: dict[str, int] = {}
            for claim in claims_on.get(provider.uuid, ()):
                if claim.confirmed is not None and claim.confirmed < started:
                    del claim.allocations[provider.uuid]
                    continue
                # Sent after the read ended: not in it. Sent while it ran:
                # may be in it; counted again, erring on the full side,
                # until a read that began after its confirmation.
                for rc, amount in claim.allocations[provider.uuid].items():
                    extra[rc] = extra.get(rc, 0) + amount
            if extra:
                usages = dict(provider.usages)
                for rc, amount in extra.items():
                    usages[rc] = usages.get(rc, 0) + amount
                provider = dataclasses.replace(provider, usages=usages)
            composed.append(provider)
        self._pending = [c for c in self._pending if c.allocations]
        return composed

    def _drop_pending(self, removed: Iterable[str]) -> None:
        for uuid in removed:
            for claim in self._pending:
                claim.allocations.pop(uuid, None)
        self._pending = [c for c in self._pending if c.allocations]

    def _expire(self, now: float) -> None:
        # A claim whose writer never said how it ended stops counting: by
        # now a read shows it if Placement has it.
        for claim in [c for c in self._pending if now - c.counted > _PENDING_TTL]:
            self._pending.remove(claim)
            self.model.add_usage(claim.allocations, sign=-1)

    def _scrubbed(self, err: Exception) -> str:
        text = str(err).splitlines()[0] if str(err) else type(err).__name__
        # A driver's message could quote the URL it was given.
        password = self.database.engine.url.password
        if password:
            text = text.replace(password, "***")
        return text[:300]
