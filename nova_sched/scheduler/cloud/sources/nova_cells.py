"""The ``nova_cells`` host source: a cloud of today's nova, as nova-scheduler sees it.

Hosts are the ``nova-compute`` services of nova's cells and their compute
nodes, mapped to a cell by ``nova-manage cell_v2 discover_hosts``
(``host_mappings``: nova's conductor routes a Selection through them). A
service is up as nova's servicegroup judges it (``last_seen_up``, else
``updated_at``, within ``service_down_time``, and not ``forced_down``);
``disabled`` is the service's. Capacity and usage are Placement's: each
node's resource provider (its uuid is the node's) with VCPU, MEMORY_MB and
DISK_GB, where what a node can still take is ``capacity - used`` and
``capacity = (total - reserved) x allocation_ratio``, Placement's own
arithmetic. Everything else filters and weighers read (hypervisor, stats,
metrics, NUMA cells, PCI pools, supported instances, host_ip) is the
compute node row's, read as nova writes it (``nova_formats``). Aggregates
and zones are the API database's; a host's instances are the cells'
``instances`` not deleted.

With ``[placement_database] connection`` Placement's whole model is read
from Placement's own tables instead (``placement_db.PlacementModelReader``,
its own thread): every provider of every tree with every resource class,
traits and aggregates. The nodes' VCPU, MEMORY_MB and DISK_GB figures are
then their root providers' in that model (copied at each refresh of the
host table, only for providers that changed), the decision asks the model
for allocation candidates (``decision.provider_candidates``), and this
daemon's claims are counted in the model (``note_claimed``), not on top of
the nodes' figures.

Nothing is read on a request. A poller thread reads, every ``[nova_cells]
refresh_interval`` seconds: the cell and host mappings and the aggregates
(small tables, read whole); from each cell every nova-compute service
(heartbeats rewrite each of them every ten seconds anyway, so a read by
change would bring back most of them), and the compute nodes and
instances stamped since its last look or of an id above the highest it
has seen; and from Placement the provider summaries of one ``GET
/allocation_candidates``, which carries every provider with room left,
its capacity and usage per resource class. A provider missing from it
(full, or just registered) is read alone. The rows whose figures changed
wait for the host table's next refresh, which a decision triggers
(``load_changed``).

The stamps are the writers' clocks, and a row can become visible long
after its stamp (a writer's clock behind, a long transaction, a lagging
replica, tooling that inserts rows in bulk): the ``since`` of a read is
the database's own clock at its start, less ``_OVERLAP``, so the
scheduler's clock plays no part; a new row is caught by its id whatever
its stamps (unless a row of a higher id was read before it committed); and
every ``[nova_cells] resync_interval`` seconds the compute
nodes and instances are read whole and compared with what is known
(``_reconcile``), which catches a changed row stamped too far in the past
and a row deleted outright (``nova-manage db archive_deleted_rows``).
Only the differences reach the host table, a chunk of rows per hold of
the lock, so a reconciliation neither rebuilds the table nor holds a
decision for long.

This daemon's own claims count at once (``note_claimed``): until a
Placement read that began after Placement accepted the claim
(``note_confirmed``) shows it, the claim is added to the node's usage, so
the next decision sees the node fuller. A claim whose write overlapped a
read may or may not be in it; it stays counted ("doubtful", erring on the
full side), and before a decision ends in NoValidHost the nodes holding
such claims are read again (``settle_doubts``). Placement settles what the
table misses (another scheduler's claim since the last read): its 409
sends the cycle to the next node, after this node's usage is read again
(``load_node``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
import time
from typing import Iterable

from nova_sched import exception
from nova_sched.capacity import RESOURCES
from nova_sched.conf import CONF
from nova_sched.placement import PlacementClient
from nova_sched.scheduler.claim_stores.base import Claim
from nova_sched.scheduler.cloud.sources import nova_formats
from nova_sched.scheduler.cloud.sources.base import HostRows
from nova_sched.scheduler.cloud.sources.nova_db import NovaDatabases
from nova_sched.scheduler.cloud.sources.placement_db import PendingClaim, PlacementModelReader
from nova_sched.scheduler.placement_model.providers import Provider

LOG = logging.getLogger(__name__)

# Rows stamped this long before the previous read (by the database's
# clock) are read again: nova's processes stamp a row before their
# transaction commits. Rows older still are caught by id when new, by the
# reconciliation otherwise.
_OVERLAP = dt.timedelta(seconds=2)
# Rows merged per hold of the lock decisions also take (hosts_of,
# note_claimed): a reconciliation at 10,000 nodes holds it a few ms at a time.
_MERGED_PER_LOCK = 1000
# What a provider must have free to be among the candidates whose summaries
# one GET /allocation_candidates returns (every instance asks for both).
_SUMMARY_RESOURCES = "VCPU:1,MEMORY_MB:1"
# Providers missing from the summaries read one by one per poll, at most.
_SINGLE_READS_PER_POLL = 200
# Placement's summaries cost it seconds at 10,000 providers (it builds a
# candidate for each): a poll reads them only when the previous read's
# duration times this has passed, so the scheduler never keeps Placement
# busy more than a third of the time, whatever refresh_interval says.
_PLACEMENT_DUTY = 3.0
# A read of the summaries still unanswered after this long makes /healthz
# say Placement does not answer (the read itself may take minutes to fail).
_SLOW_READ = 30.0
_CLASSES = {"VCPU": "vcpus", "MEMORY_MB": "memory_mb", "DISK_GB": "local_gb"}


@dataclasses.dataclass
class _Pending:
    """A claim of this daemon not yet in Placement's usage as last read."""

    claim: Claim
    host: str
    # time.monotonic() when the claim was counted, before it was sent.
    counted: float = dataclasses.field(default_factory=time.monotonic)
    # time.monotonic() when Placement accepted the claim (None: not yet).
    confirmed: float | None = None
    # Sent while a read of Placement ran: that read may already count it.
    doubtful: bool = False
    # With Placement's model: the claim as the model's reader counts it.
    counted_in_model: PendingClaim | None = None


@dataclasses.dataclass
class _CellRead:
    """What one poll read from one cell."""

    cell: str
    whole: bool                # nodes and instances read whole
    since: dt.datetime         # the next read's since (the database's clock)
    services: list[dict]
    nodes: list[dict]
    instances: list[dict]


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


class NovaCellsSource:
    """Host rows from nova's API and cell databases and from Placement."""

    # The source reconciles itself with nova's databases (resync_interval)
    # and hands the table only the differences: no rebuild of the table.
    periodic_resync = False
    tracks_instances = True

    def __init__(self, databases: NovaDatabases | None = None,
                 placement: PlacementClient | None = None):
        if databases is None:
            url = CONF.nova_cells.api_database_connection
            if not url:
                raise exception.ConfigurationError(
                    "[scheduler] host_source = nova_cells needs [nova_cells] "
                    "api_database_connection")
            databases = NovaDatabases(url)
        self.databases = databases
        self.placement = placement if placement is not None else PlacementClient()
        # Placement's whole model, read from its database, when configured
        # ([placement_database] connection): node figures come from it and
        # decisions ask it for allocation candidates; else the nodes'
        # VCPU, MEMORY_MB and DISK_GB come from Placement's API.
        self.placement_reader = (PlacementModelReader()
                                 if CONF.placement_database.connection else None)
        self.provider_model = (None if self.placement_reader is None
                               else self.placement_reader.model)
        self._model_seen = 0  # the model's version last copied into _usage
        self._lock = threading.Lock()
        self._node_ids: dict[str, int] = {}        # node uuid -> row id
        self._nodes: dict[int, dict] = {}          # row id -> compute node row
        self._node_cells: dict[int, str] = {}      # row id -> cell uuid
        self._services: dict[str, dict] = {}       # host -> its nova-compute row
        self._service_cells: dict[str, str] = {}   # host -> cell uuid
        self._host_nodes: dict[str, set[int]] = {}  # host -> row ids
        self._mapped: dict[str, str] = {}          # host -> cell uuid
        self._usage: dict[str, dict] = {}          # rp uuid -> {rc: capacity, used}
        self._instances: dict[str, tuple[str, str | None]] = {}  # uuid -> (host, node)
        # (host, node) -> instances there; node None: nova named no node.
        self._placed: dict[tuple[str, str | None], set[str]] = {}
        self._aggregates: list | None = None
        self._pending: dict[int, list[_Pending]] = {}
        # cell -> the database's clock at its last read's start, less _OVERLAP
        self._since: dict[str, dt.datetime] = {}
        # cell -> {table: the highest row id read there}
        self._highest: dict[str, dict[str, int]] = {}
        self._reconciled: float | None = None  # time.monotonic() of the last one
        # cell uuid -> why the last poll could not read it (/healthz).
        self._unread_cells: dict[str, str] = {}
        self._polling = threading.Lock()  # one poll at a time (poller, host list)
        self._changed_nodes: set[int] = set()
        self._changed_hosts: set[str] = set()
        self._aggregates_changed = False
        self._loaded = False
        self._problem: str | None = "nova's databases have not been read yet"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._placement_due = 0.0  # time.monotonic() of the next summaries read
        self._reading_since: float | None = None  # a summaries read under way

    # -- the poller ---------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="nova-cells-poller",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self.placement_reader is not None:
            self.placement_reader.stop()

    def _run(self) -> None:
        while not self._stop.wait(CONF.nova_cells.refresh_interval):
            try:
                self.poll()
            except Exception:  # the next poll tries again; /healthz says why
                LOG.exception("Reading nova's cells failed")

    def poll(self) -> None:
        """Read what changed in nova's databases and Placement's usages."""
        with self._polling:
            self._poll()

    def _poll(self) -> None:
        problems = []
        try:
            self._read_databases()
        except Exception as err:
            problems.append(f"nova database unreachable: {_short(err)}")
        else:
            problems.extend(self._unread_cells.values())
        if self.placement_reader is not None:
            self._usage_from_model(every_node=True)
            if self.placement_reader.problem():
                problems.append(self.placement_reader.problem())
        elif time.monotonic() >= self._placement_due:
            started = self._reading_since = time.monotonic()
            try:
                self._read_placement()
            except exception.PlacementUnavailable as err:
                problems.append(f"placement unreachable: {err.reason}")
            finally:
                self._reading_since = None
            self._placement_due = started + _PLACEMENT_DUTY * (time.monotonic() - started)
        elif self._problem and "placement" in self._problem:
            problems.append(self._problem[self._problem.index("placement"):])
        self._problem = "; ".join(problems) or None
        if self._problem:
            LOG.warning("Host source: %s", self._problem)

    def _read_databases(self) -> None:
        cells = self.databases.refresh_cells()
        mapped = self.databases.host_mappings()
        aggregates = self.databases.aggregates()
        begun = time.monotonic()
        # Judged against the option now, so that a changed interval applies
        # from the next poll on.
        reconcile = (self._reconciled is None
                     or begun - self._reconciled >= CONF.nova_cells.resync_interval)
        if reconcile:
            with self._lock:
                # Instances a cast places during the reads are not taken for gone.
                known_instances = set(self._instances)
        # A cell whose database does not answer keeps what was last read of
        # it; the others are read and served as usual.
        reads, unread = [], {}
        for cell in cells:
            try:
                reads.append(self._read_cell(cell, reconcile))
            except Exception as err:
                unread[cell.uuid] = (f"nova cell {cell.name} ({cell.uuid}) database "
                                     f"unreachable: {_short(err)}")
        self._unread_cells = unread
        with self._lock:
            for host in set(mapped) ^ set(self._mapped):
                self._changed_hosts.add(host)
                self._mark_host(host)
            for host, cell in mapped.items():
                if self._mapped.get(host) != cell:
                    self._mark_host(host)
            self._mapped = mapped
            if aggregates != self._aggregates:
                self._aggregates = aggregates
                self._aggregates_changed = True
        for read in reads:
            self._merge_cell(read)
        with self._lock:
            known_cells = {cell.uuid for cell in cells}
            for node_id, cell in list(self._node_cells.items()):
                if cell not in known_cells and not self._nodes[node_id]["deleted"]:
                    self._gone_node(node_id)
            if reconcile and not unread:
                # An instance of an unread cell is not gone: the whole
                # reconciliation waits until every cell answers.
                present = {row["uuid"] for read in reads for row in read.instances}
                for uuid in known_instances - present:
                    if uuid in self._instances:
                        self._place(uuid, None)
        if reconcile and not unread:
            LOG.debug("Reconciled with nova's %d cells in %.2f s", len(cells),
                      time.monotonic() - begun)
            self._reconciled = begun

    def _read_cell(self, cell, whole: bool) -> _CellRead:
        """One cell's services, and its compute nodes and instances: whole,
        or (``whole`` False and the cell read before) those stamped since
        the last read or newer than any seen."""
        clock = cell.now()
        since = None if whole else self._since.get(cell.uuid)
        highest = self._highest.get(cell.uuid, {})
        return _CellRead(
            cell.uuid, since is None, clock - _OVERLAP, cell.services(),
            cell.compute_nodes(since, highest.get("compute_nodes")),
            cell.instances(since, highest.get("instances")))

    def _merge_cell(self, read: _CellRead) -> None:
        """A cell's read applied to what is known, a chunk per hold of the
        lock; with a whole read, what it lacks is gone."""
        cell = read.cell
        listed = {row["host"] for row in read.services if not row["deleted"]}
        for start in range(0, len(read.services), _MERGED_PER_LOCK):
            with self._lock:
                for row in read.services[start:start + _MERGED_PER_LOCK]:
                    self._merge_service(cell, row)
        with self._lock:
            for host, where in list(self._service_cells.items()):
                if where == cell and host not in listed:
                    self._drop_service(host)
        for start in range(0, len(read.nodes), _MERGED_PER_LOCK):
            with self._lock:
                for row in read.nodes[start:start + _MERGED_PER_LOCK]:
                    self._merge_node(cell, row)
        if read.whole:
            present = {row["uuid"] for row in read.nodes}
            with self._lock:
                for node_id, where in list(self._node_cells.items()):
                    row = self._nodes[node_id]
                    if where == cell and not row["deleted"] and row["uuid"] not in present:
                        self._gone_node(node_id)
        for start in range(0, len(read.instances), _MERGED_PER_LOCK):
            with self._lock:
                for row in read.instances[start:start + _MERGED_PER_LOCK]:
                    gone = row["deleted"] or not row["host"]
                    where = None if gone else (row["host"], row["node"])
                    if self._instances.get(row["uuid"]) != where:
                        self._place(row["uuid"], where)
        highest = self._highest.setdefault(cell, {})
        for table, rows in (("compute_nodes", read.nodes), ("instances", read.instances)):
            ids = [row["id"] for row in rows]
            if ids:
                highest[table] = max(max(ids), highest.get(table, 0))
            elif read.whole:
                highest.setdefault(table, 0)
        self._since[cell] = read.since

    def _merge_service(self, cell: str, row: dict) -> None:
        host = row["host"]
        if row["deleted"]:
            if self._service_cells.get(host) == cell:
                self._drop_service(host)
            return
        if self._services.get(host) != row:
            if host not in self._services:
                self._mark_host(host)
            self._services[host] = row
            self._service_cells[host] = cell
            self._changed_hosts.add(host)

    def _drop_service(self, host: str) -> None:
        self._services.pop(host, None)
        self._service_cells.pop(host, None)
        self._changed_hosts.add(host)
        self._mark_host(host)

    def _merge_node(self, cell: str, row: dict) -> None:
        uuid = row["uuid"]
        if not uuid:
            return
        node_id = self._node_ids.setdefault(uuid, len(self._node_ids) + 1)
        old = self._nodes.get(node_id)
        if old == row and self._node_cells.get(node_id) == cell:
            return  # read again (overlap, reconciliation), unchanged
        if old is not None and old["host"] != row["host"]:
            self._host_nodes.get(old["host"], set()).discard(node_id)
        self._nodes[node_id] = row
        self._host_nodes.setdefault(row["host"], set()).add(node_id)
        self._node_cells[node_id] = cell
        self._changed_nodes.add(node_id)

    def _gone_node(self, node_id: int) -> None:
        """A node whose row is deleted outright, or whose cell is gone."""
        self._nodes[node_id] = dict(self._nodes[node_id], deleted=1)
        self._changed_nodes.add(node_id)

    def _place(self, uuid: str, where: tuple[str, str | None] | None) -> None:
        """Record where an instance is (None: nowhere) and mark both nodes."""
        before = self._instances.pop(uuid, None)
        if before is not None:
            self._placed.get(before, set()).discard(uuid)
            self._mark_node(*before)
        if where is not None:
            self._instances[uuid] = where
            self._placed.setdefault(where, set()).add(uuid)
            self._mark_node(*where)

    def _mark_host(self, host: str) -> None:
        self._changed_nodes.update(self._host_nodes.get(host, ()))

    def _mark_node(self, host: str, nodename: str | None) -> None:
        for node_id in self._host_nodes.get(host, ()):
            if nodename is None or self._nodes[node_id]["hypervisor_hostname"] == nodename:
                self._changed_nodes.add(node_id)

    def _read_placement(self) -> None:
        started = time.monotonic()
        summaries = self.placement.provider_summaries(_SUMMARY_RESOURCES)
        read = time.monotonic()
        with self._lock:
            wanted = {row["uuid"]: node_id for node_id, row in self._nodes.items()
                      if not row["deleted"]}
        missing = [uuid for uuid in wanted if uuid not in summaries]
        unread = set(missing[_SINGLE_READS_PER_POLL:])
        for uuid in missing[:_SINGLE_READS_PER_POLL]:
            usage = self._read_provider(uuid)
            if usage is not None:
                summaries[uuid] = usage
        if missing:
            read = time.monotonic()
        with self._lock:
            for uuid, node_id in wanted.items():
                usage = summaries.get(uuid)
                if usage is None:
                    if uuid in unread and uuid in self._usage:
                        continue  # not read this time: keep what is known
                    usage = {}
                if self._usage.get(uuid) != usage:
                    self._usage[uuid] = usage
                    self._changed_nodes.add(node_id)
                self._settle(node_id, started, read)

    def _settle(self, node_id: int, started: float, finished: float) -> None:
        """Own claims against a read of the node's usage over [started,
        finished]: those Placement accepted before it began are in it
        (dropped); those sent after it ended are not (kept); the others may
        be, and are kept as doubtful."""
        pending = self._pending.get(node_id)
        if not pending:
            return
        kept = []
        for claim in pending:
            if claim.confirmed is not None and claim.confirmed < started:
                continue
            if claim.counted <= finished:
                claim.doubtful = True
            kept.append(claim)
        if len(kept) != len(pending):
            self._changed_nodes.add(node_id)
        if kept:
            self._pending[node_id] = kept
        else:
            del self._pending[node_id]

    def _read_provider(self, uuid: str) -> dict | None:
        """One provider's capacity and usage, read alone (None: unknown)."""
        inventories = self.placement.inventories(uuid)
        if inventories is None:
            return None
        usages = self.placement.usages(uuid) or {}
        usage = {}
        for rc in _CLASSES:
            inv = inventories.get(rc)
            if inv is None:
                continue
            capacity = int((inv.get("total", 0) - inv.get("reserved", 0))
                           * inv.get("allocation_ratio", 1.0))
            usage[rc] = {"capacity": capacity, "used": int(usages.get(rc, 0))}
        return usage

    def _usage_from_model(self, every_node: bool = False) -> None:
        """Copy the figures of the roots whose providers changed in
        Placement's model (``every_node``: also those of nodes not yet
        given any) into the nodes' usage, and drop own claims the model's
        reads now count."""
        model = self.provider_model
        # Taken before the model's lock, never inside it: note_confirmed and
        # note_withdrawn take this source's lock, then the model's.
        unread = set()
        if every_node:
            with self._lock:
                unread = {uuid for uuid in self._node_ids if uuid not in self._usage}
        with model.lock:
            version = model.version
            changed = (model.changed_since(self._model_seen)
                       if version != self._model_seen else set())
            changed |= unread
            figures = {uuid: _root_figures(model.providers.get(uuid)) for uuid in changed}
            settled = self.placement_reader.pending()
        self._model_seen = version
        with self._lock:
            for uuid, usage in figures.items():
                node_id = self._node_ids.get(uuid)
                if node_id is not None and self._usage.get(uuid) != usage:
                    self._usage[uuid] = usage
                    self._changed_nodes.add(node_id)
            still = {id(claim) for claim in settled}
            for node_id, items in list(self._pending.items()):
                kept = [p for p in items if p.counted_in_model is None
                        or id(p.counted_in_model) in still]
                if kept:
                    self._pending[node_id] = kept
                else:
                    del self._pending[node_id]

    # -- the host table's reads ---------------------------------------------
    def load_all(self) -> HostRows:
        if not self._loaded:
            if self.placement_reader is not None:
                self.placement_reader.poll()
            self.poll()
            if self._problem and not self._nodes:
                raise exception.DatabaseUnavailable(self._problem)
            self._loaded = True
            self.start()
            if self.placement_reader is not None:
                self.placement_reader.start()
        with self._lock:
            self._changed_nodes.clear()
            self._changed_hosts.clear()
            self._aggregates_changed = False
            nodes = [self._node_row(node_id) for node_id in self._nodes]
            services = [self._service_row(host) for host in self._hosts()]
            return HostRows([n for n in nodes if n is not None], services,
                            list(self._aggregates or []), {}, full=True)

    def load_changed(self, since_us: int) -> HostRows:
        if self.placement_reader is not None:
            self._usage_from_model()
        with self._lock:
            node_ids, self._changed_nodes = self._changed_nodes, set()
            hosts, self._changed_hosts = self._changed_hosts, set()
            rows = HostRows(
                [row for row in (self._node_row(n) for n in node_ids) if row is not None],
                [self._service_row(host) for host in hosts])
            if self._aggregates_changed:
                rows.aggregates = list(self._aggregates or [])
                self._aggregates_changed = False
            return rows

    def load_node(self, node_id: int) -> HostRows:
        """Read the node's usage in Placement again (after a lost claim or a
        release, or to settle doubtful claims)."""
        with self._lock:
            row = self._nodes.get(node_id)
        if row is None:
            return HostRows()
        if self.placement_reader is not None:
            return self._read_in_model([node_id])
        started = time.monotonic()
        usage = self._read_provider(row["uuid"])
        finished = time.monotonic()
        with self._lock:
            self._usage[row["uuid"]] = usage or {}
            self._settle(node_id, started, finished)
            self._changed_nodes.discard(node_id)
            node = self._node_row(node_id)
            return HostRows([node] if node is not None else [],
                            [self._service_row(row["host"])])

    def operator_changes(self) -> int | None:
        # Operators change nova's cloud through nova's API: what it writes
        # is read by the poller, what it casts (aggregates, instances) is in
        # this object's memory at once, for the next refresh to apply.
        return None

    def settle_doubts(self) -> HostRows | None:
        """Read again the nodes holding claims a read may have counted
        already; None when there are none."""
        with self._lock:
            doubtful = [node_id for node_id, items in self._pending.items()
                        if any(p.doubtful or p.counted_in_model is not None
                               and p.counted_in_model.confirmed is not None
                               for p in items)]
        if not doubtful:
            return None
        if self.placement_reader is not None:
            return self._read_in_model(doubtful)
        rows = HostRows()
        for node_id in doubtful:
            read = self.load_node(node_id)
            rows.nodes += read.nodes
            rows.services += read.services
        return rows

    def host_list(self) -> list[dict]:
        """``nova-sched-manage host list``'s rows for nova's hosts, read now.

        Claimed is Placement's usage; "used" as a compute reports it has no
        counterpart (nova's compute writes it, Placement counts it): None.
        """
        self.poll()
        if self._problem and not self._nodes:
            raise exception.DatabaseUnavailable(self._problem)
        now = _utcnow()
        hosts = []
        with self._lock:
            for node_id in self._nodes:
                node = self._node_row(node_id)
                if node is None or node["deleted"]:
                    continue
                service = self._service_row(node["host"])
                heartbeat = service["updated_at"]
                hosts.append({
                    "host": node["host"], "node": node["hypervisor_hostname"],
                    "cell_uuid": node["cell_uuid"], "uuid": node["uuid"],
                    "up": heartbeat is not None and abs(
                        (now - heartbeat).total_seconds()) <= CONF.service_down_time,
                    "disabled": service["disabled"],
                    "disabled_reason": service["disabled_reason"],
                    "updated_at": heartbeat,
                    "memory_mb": node["memory_mb"],
                    "claimed_memory_mb": node["claimed_memory_mb"],
                    "memory_mb_used": None, "reserved_host_memory_mb": 0,
                    "vcpus": node["vcpus"], "claimed_vcpus": node["claimed_vcpus"],
                    "vcpus_used": None, "reserved_host_cpus": 0,
                    "local_gb": node["local_gb"],
                    "claimed_disk_mb": node["claimed_disk_mb"],
                    "local_gb_used": None, "reserved_host_disk_mb": 0,
                    "instances": node["claimed_instances"], "running_vms": None,
                })
        return sorted(hosts, key=lambda h: (h["host"], h["node"]))

    def unclaimed_by_host(self) -> dict[str, int]:
        # Instances count per node in claimed_instances (from the cells).
        return {}

    def hosts_of(self, instance_uuids: Iterable[str]) -> dict[str, str]:
        with self._lock:
            found = {}
            pending = {p.claim.instance_uuid: p.host
                       for items in self._pending.values() for p in items}
            for uuid in instance_uuids:
                where = self._instances.get(uuid)
                if where is not None:
                    found[uuid] = where[0]
                elif uuid in pending:
                    found[uuid] = pending[uuid]
            return found

    def _read_in_model(self, node_ids: list[int]) -> HostRows:
        """Read these nodes' provider trees (and the providers of own
        claims on them) from Placement's database now: a lost claim, or
        claims a read may count twice, before a NoValidHost."""
        model = self.provider_model
        with self._lock:
            roots = [self._nodes[n]["uuid"] for n in node_ids if n in self._nodes]
            claimed = {uuid for n in node_ids for p in self._pending.get(n, ())
                       if p.counted_in_model is not None
                       for uuid in p.counted_in_model.allocations}
        uuids = claimed | {p.uuid for root in roots for p in model.tree_of(root)}
        self.placement_reader.read_providers(uuids | set(roots))
        self._usage_from_model()
        with self._lock:
            self._changed_nodes.difference_update(node_ids)
            nodes = [self._node_row(n) for n in node_ids]
            return HostRows([n for n in nodes if n is not None],
                            [self._service_row(self._nodes[n]["host"])
                             for n in node_ids if n in self._nodes])

    def note_claimed(self, claim: Claim, host: str) -> None:
        pending = _Pending(claim, host)
        if self.placement_reader is not None:
            pending.counted_in_model = self.placement_reader.note_claimed(
                claim.placement_allocations())
        with self._lock:
            self._pending.setdefault(claim.node_id, []).append(pending)

    def note_withdrawn(self, claim: Claim) -> None:
        with self._lock:
            for p in self._pending.get(claim.node_id, ()):
                if p.claim is claim and p.counted_in_model is not None:
                    self.placement_reader.note_withdrawn(p.counted_in_model)
            pending = [p for p in self._pending.get(claim.node_id, ())
                       if p.claim is not claim]
            if pending:
                self._pending[claim.node_id] = pending
            else:
                self._pending.pop(claim.node_id, None)
            self._changed_nodes.add(claim.node_id)

    def note_confirmed(self, claim: Claim) -> None:
        with self._lock:
            for pending in self._pending.get(claim.node_id, ()):
                if pending.claim is claim:
                    pending.confirmed = time.monotonic()
                    if pending.counted_in_model is not None:
                        self.placement_reader.note_confirmed(pending.counted_in_model)

    def min_compute_version(self) -> int | None:
        """The lowest service version of the nova-compute services (nova's
        ``owner_nova_filter`` requires OWNER_NOVA of roots once every
        compute reports it); None: no compute known."""
        with self._lock:
            versions = [row.get("version") or 0 for row in self._services.values()]
        return min(versions) if versions else None

    def unreachable_cells(self) -> frozenset[str]:
        """Cells the last poll could not read. Their hosts are no
        candidates until a read succeeds, as nova-scheduler skips a cell
        that does not answer: conductor could not create the instance in
        that cell's database either."""
        return frozenset(self._unread_cells)

    def problem(self) -> str | None:
        since = self._reading_since
        if since is not None and time.monotonic() - since > _SLOW_READ:
            return (f"placement unreachable: no answer to the usages read for "
                    f"{time.monotonic() - since:.0f} s")
        return self._problem

    # -- what nova's fanout casts say between reads (RPC API 4.1, 4.2) ------
    def note_instances(self, host: str, instance_uuids: Iterable[str]) -> None:
        """Instances nova says run on ``host`` (update_instance_info)."""
        with self._lock:
            for uuid in instance_uuids:
                where = self._instances.get(uuid)
                if where is None or where[0] != host:
                    self._place(uuid, (host, None))

    def forget_instance(self, instance_uuid: str) -> None:
        """An instance gone from its host (delete_instance_info)."""
        with self._lock:
            self._place(instance_uuid, None)

    def sync_instances(self, host: str, instance_uuids: Iterable[str]) -> None:
        """Every instance on ``host`` (sync_instance_info)."""
        listed = set(instance_uuids)
        with self._lock:
            for where, uuids in list(self._placed.items()):
                if where[0] == host:
                    for uuid in list(uuids - listed):
                        self._place(uuid, None)
        self.note_instances(host, listed)

    def set_aggregates(self, changed: list, deleted: Iterable[str] = ()) -> None:
        """Aggregates nova created, changed or deleted (update_aggregates,
        delete_aggregate): applied now, the API database read confirms them."""
        with self._lock:
            by_name = {agg.name: agg for agg in self._aggregates or []}
            for name in deleted:
                by_name.pop(name, None)
            for agg in changed:
                by_name[agg.name] = agg
            self._aggregates = sorted(by_name.values(), key=lambda a: a.id)
            self._aggregates_changed = True

    # -- rows in the host table's shape -----------------------------------------
    def _hosts(self) -> set[str]:
        return set(self._services)

    def _service_row(self, host: str) -> dict:
        row = self._services.get(host)
        if row is None:
            # Gone: no heartbeat, so every node of the host is down.
            return {"host": host, "disabled": True, "disabled_reason": "service deleted",
                    "updated_at": None}
        # nova-compute writes last_seen_up from its first report on; a
        # service just created has only created_at, and nova counts it up.
        heartbeat = row["last_seen_up"] or row["updated_at"] or row["created_at"]
        return {"host": host, "disabled": bool(row["disabled"]),
                "disabled_reason": row["disabled_reason"],
                "updated_at": None if row["forced_down"] else heartbeat}

    def _node_row(self, node_id: int) -> dict | None:
        row = self._nodes.get(node_id)
        if row is None:
            return None
        usage = self._usage.get(row["uuid"])
        cell = self._node_cells.get(node_id)
        gone = (row["deleted"] or self._mapped.get(row["host"]) is None
                or self._service_cells.get(row["host"]) != cell
                or not usage)
        record = {"id": node_id, "host": row["host"],
                  "hypervisor_hostname": row["hypervisor_hostname"],
                  "deleted": bool(gone)}
        if gone:
            return record
        pending = self._pending.get(node_id, [])
        # Claims counted in Placement's model are in its figures already.
        counted = [p for p in pending if p.counted_in_model is None]
        figures = {rc: usage.get(rc, {"capacity": 0, "used": 0}) for rc in _CLASSES}
        record.update(
            uuid=row["uuid"], cell_uuid=cell,
            vcpus=figures["VCPU"]["capacity"],
            memory_mb=figures["MEMORY_MB"]["capacity"],
            local_gb=figures["DISK_GB"]["capacity"],
            reserved_host_memory_mb=0, reserved_host_disk_mb=0, reserved_host_cpus=0,
            claimed_vcpus=figures["VCPU"]["used"] + sum(p.claim.vcpus for p in counted),
            claimed_memory_mb=figures["MEMORY_MB"]["used"]
            + sum(p.claim.memory_mb for p in counted),
            claimed_disk_mb=figures["DISK_GB"]["used"] * 1024
            + sum(p.claim.disk_mb for p in counted),
            claimed_instances=self._instances_on(row, pending),
            current_workload=row["current_workload"],
            hypervisor_type=row["hypervisor_type"],
            hypervisor_version=row["hypervisor_version"],
            cpu_info=row["cpu_info"], host_ip=row["host_ip"],
            supported_instances=row["supported_instances"], stats=row["stats"],
            metrics=nova_formats.metrics(row["metrics"]),
            pci_stats=nova_formats.pci_stats(row["pci_stats"]),
            numa_topology=nova_formats.numa_topology(row["numa_topology"]))
        # Capacity is Placement's, ratio and reservation folded in.
        for resource in RESOURCES:
            record[resource.ratio_option] = 1.0
        return record

    def _instances_on(self, row: dict, pending: list[_Pending]) -> int:
        host = row["host"]
        here = self._placed.get((host, row["hypervisor_hostname"]), set())
        if len(self._host_nodes.get(host, ())) == 1:
            # nova's casts name the host only; a one-node host is the usual.
            here = here | self._placed.get((host, None), set())
        return len(here | {p.claim.instance_uuid for p in pending})


def _root_figures(provider: Provider | None) -> dict:
    """A node's figures from its root provider in Placement's model: every
    class present (0 without inventory: an Ironic node's root holds only
    its CUSTOM_* class) while the provider exists, nothing once it is gone."""
    if provider is None:
        return {}
    return {rc: {"capacity": inv.capacity if inv else 0,
                 "used": provider.usages.get(rc, 0)}
            for rc, inv in ((rc, provider.inventories.get(rc)) for rc in _CLASSES)}


def _short(err: Exception) -> str:
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text[:300]
