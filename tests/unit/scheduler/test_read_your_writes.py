"""Read your writes: an operator's change is seen by the very next decision.

Each kind of change an operator makes to what decisions read (through the
functions ``nova-sched-manage`` runs, or nova's 4.1 and 4.2 fanout casts) is made,
then at once comes a decision that must see it: a claimed one (the way of
run_instance and select_destinations) and a dry run (explain). Each kind
runs a hundred rounds, while the host table's reader reads in a loop beside
them and compute reports keep arriving, so that even a window of a few
milliseconds between a command's commit and the table's next read shows.

Two hosts: ``b1`` has twice ``a1``'s RAM, so the RAM weigher picks it
whenever it may; each change takes ``b1`` out of the request's reach, or
puts it back. ``f1``..``f8`` are too small for the requests and only keep
the reports coming.
"""

from __future__ import annotations

import contextlib
import threading
import uuid

import pytest

from nova_sched import exception, rpc
from nova_sched.conf import CONF
from nova_sched.db import aggregates as db_aggregates
from nova_sched.db import operator_changes
from nova_sched.db import services as db_services
from nova_sched.scheduler.cloud.host_refresher import HostRefresher
from nova_sched.scheduler.manager import SchedulerManager
from nova_sched.scheduler.manager_v4 import SchedulerManagerV4
from nova_sched.scheduler.wire import request
from tests.unit.scheduler.conftest import (RecordingComputeAPI, RecordingNotifier,
                                           boot_request, claimed_memory,
                                           compute_report)
from tests.db_backends import server_scheduler_database
from tests.unit.scheduler.test_spec_obj import prim

ROUNDS = 100
FILTERS = ["RamFilter", "ComputeFilter", "AvailabilityZoneFilter",
           "AggregateMultiTenancyIsolation", "AggregateInstanceExtraSpecsFilter",
           "NumInstancesFilter"]
# NumInstancesFilter's limit: two instances nova says b1 runs fill it.
MAX_INSTANCES = 2
FILLERS = [f"f{n}" for n in range(1, 9)]
SSD = {"aggregate_instance_extra_specs:ssd": "true"}


class Cloud:
    """A daemon's manager over the test database, its host table kept fresh
    by a HostRefresher that never rests, and reports landing beside it."""

    def __init__(self, ctxt):
        self.ctxt = ctxt
        self.transport = rpc.get_transport()
        self.manager = SchedulerManager(self.transport)
        self.manager.cycle.compute_api = RecordingComputeAPI()
        self.manager.notifier._notifier = RecordingNotifier()
        self.v4 = SchedulerManagerV4(self.manager)
        for host, memory_mb in [("a1", 4096), ("b1", 8192)] + [(f, 1024) for f in FILLERS]:
            self.manager.compute_node_update(ctxt, compute_report(host, memory_mb=memory_mb))
        self.manager.reports.flush()
        self.manager.host_manager.full_resync()
        self._stopping = threading.Event()
        self.refresher = HostRefresher(self.manager.cycle, interval=0.0).start()
        self._reporter = threading.Thread(target=self._report, daemon=True)
        self._reporter.start()

    def _report(self):
        workload = 0
        while not self._stopping.wait(0.001):
            workload = (workload + 1) % 5
            for host in FILLERS:
                self.manager.compute_node_update(self.ctxt, compute_report(
                    host, memory_mb=1024, current_workload=workload))

    def close(self):
        self._stopping.set()
        self._reporter.join(5)
        self.refresher.stop()
        self.manager.reports.flush()
        self.transport.cleanup()

    def decide(self, path: str, extra_specs=None, az=None) -> str | None:
        """The host a decision made now picks for one 2 GB instance of
        project ``p1`` (None: no valid host); a claimed one is released
        after, so that every round starts from the same usage."""
        spec = boot_request(memory_mb=2048, az=az)
        spec["instance_type"]["extra_specs"] = dict(extra_specs or {})
        if path == "explain":
            hosts = self.manager.explain(self.ctxt, spec, {})["hosts"]
            return hosts[0]["host"] if hosts else None
        (outcome,) = self.manager.cycle.schedule(self.ctxt, request.parse(spec, {}))
        if outcome.error is not None:
            assert isinstance(outcome.error, exception.NoValidHost), outcome.error
            return None
        self.manager.cycle.release([outcome.instance_uuid])
        return outcome.selections[0].host


@contextlib.contextmanager
def _cloud(ctxt):
    CONF.set_override("transport_url", "fake:")
    CONF.set_override("enabled_filters", FILTERS, group="filter_scheduler")
    CONF.set_override("weight_classes", ["RAMWeigher"], group="filter_scheduler")
    CONF.set_override("max_instances_per_host", MAX_INSTANCES, group="filter_scheduler")
    c = Cloud(ctxt)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def cloud(db, ctxt):
    with _cloud(ctxt) as c:
        yield c


def _tenant_metadata(cloud, on):
    db_aggregates.set_metadata("tenant", {"filter_tenant_id": "tenant-b" if on else None})


def _tenant_host(cloud, on):
    (db_aggregates.add_host if on else db_aggregates.remove_host)("tenant", "b1")


def _zone(cloud, on):
    (db_aggregates.add_host if on else db_aggregates.remove_host)("zone", "b1")


def _service(cloud, on):
    if on:
        db_services.disable("b1", "maintenance")
    else:
        db_services.enable("b1")


def _extra_spec(cloud, on):
    db_aggregates.set_metadata("ssd", {"ssd": "true" if on else None})


def _aggregate_made(cloud, on):
    # As an operator makes one: three commands, the decision after the last.
    if on:
        db_aggregates.create("made")
        db_aggregates.add_host("made", "b1")
        db_aggregates.set_metadata("made", {"filter_tenant_id": "tenant-b"})
    else:
        db_aggregates.delete("made")


def _fanout(cloud, on):
    agg = prim("Aggregate", {"id": 9, "name": "from-nova", "hosts": ["b1"],
                             "metadata": {"filter_tenant_id": "tenant-b"}}, version="1.3")
    if on:
        cloud.v4.update_aggregates(cloud.ctxt, [agg])
    else:
        cloud.v4.delete_aggregate(cloud.ctxt, agg)


def _instance_info(cloud, on):
    # nova's 4.2 casts: new instances b1 runs, then each one deleted.
    if on:
        cloud.running_on_b1 = [str(uuid.uuid4()) for _ in range(MAX_INSTANCES)]
        cloud.v4.update_instance_info(cloud.ctxt, "b1", prim("InstanceList", {
            "objects": [prim("Instance", {"uuid": u, "host": "b1"}, version="2.8")
                        for u in cloud.running_on_b1]}, version="2.6"))
    else:
        for u in cloud.running_on_b1:
            cloud.v4.delete_instance_info(cloud.ctxt, "b1", u)


def _setup(cloud, kind):
    if kind in ("tenant_metadata", "tenant_host"):
        db_aggregates.create("tenant")
        if kind == "tenant_metadata":
            db_aggregates.add_host("tenant", "b1")
        else:
            db_aggregates.set_metadata("tenant", {"filter_tenant_id": "tenant-b"})
    elif kind == "zone":
        db_aggregates.create("zone", zone="zone-x")
    elif kind == "extra_spec":
        db_aggregates.create("ssd")
        db_aggregates.add_host("ssd", "a1")


# kind -> (change(cloud, on), decision's arguments, host expected on, off)
KINDS = {
    "tenant_metadata": (_tenant_metadata, {}, "a1", "b1"),
    "tenant_host": (_tenant_host, {}, "a1", "b1"),
    "zone": (_zone, {"az": "nova"}, "a1", "b1"),
    "service": (_service, {}, "a1", "b1"),
    "extra_spec": (_extra_spec, {"extra_specs": SSD}, "a1", None),
    "aggregate_made": (_aggregate_made, {}, "a1", "b1"),
    "fanout": (_fanout, {}, "a1", "b1"),
    "instance_info": (_instance_info, {}, "a1", "b1"),
}


@pytest.mark.parametrize("path", ["claimed", "explain"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_change_is_seen_by_the_next_decision(cloud, kind, path):
    _rounds(cloud, kind, path)


@pytest.mark.parametrize("kind", ["tenant_metadata", "service"])
@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_on_database_servers(backend, kind, ctxt):
    """The count read in the claim's transaction under the servers' own
    isolation (PostgreSQL's read committed, InnoDB's repeatable read)."""
    with server_scheduler_database(backend), _cloud(ctxt) as cloud:
        _rounds(cloud, kind, "claimed")


def _rounds(cloud, kind, path):
    change, args, when_on, when_off = KINDS[kind]
    _setup(cloud, kind)
    assert cloud.decide(path, **args) == when_off
    missed = []
    for round_ in range(ROUNDS):
        on = round_ % 2 == 0
        change(cloud, on)
        picked = cloud.decide(path, **args)
        if picked != (when_on if on else when_off):
            missed.append((round_, "on" if on else "off", picked))
    assert missed == [], f"decisions that missed the change just made: {missed}"


def test_a_claim_decided_before_a_change_is_decided_again(db, ctxt):
    """Without any reader beside it, the claim's transaction alone makes the
    decision see the change: the table is caught up and the instance
    decided again, with nothing claimed on the host it first chose."""
    CONF.set_override("transport_url", "fake:")
    CONF.set_override("enabled_filters", FILTERS, group="filter_scheduler")
    CONF.set_override("weight_classes", ["RAMWeigher"], group="filter_scheduler")
    transport = rpc.get_transport()
    try:
        manager = SchedulerManager(transport)
        for host, memory_mb in [("a1", 4096), ("b1", 8192)]:
            manager.compute_node_update(ctxt, compute_report(host, memory_mb=memory_mb))
        manager.reports.flush()
        hm = manager.host_manager
        hm.full_resync()
        # As with a HostRefresher that has not had its turn yet.
        hm.refreshed_elsewhere = True
        seen = hm.operator_changes
        db_services.disable("b1")
        assert hm.operator_changes == seen  # nothing read it yet
        spec = request.parse(boot_request(memory_mb=2048), {})
        (outcome,) = manager.cycle.schedule(ctxt, spec)
        assert outcome.error is None and outcome.selections[0].host == "a1"
        assert hm.operator_changes == operator_changes.current() > seen
        assert claimed_memory("b1") == 0 and claimed_memory("a1") == 2048
    finally:
        transport.cleanup()


def test_the_claims_transaction_refuses_a_table_behind(db):
    """db.allocations.claim with the count a decision saw: refused, with
    nothing written, once an operator changed something since."""
    from nova_sched.db import allocations, compute_nodes
    from nova_sched.scheduler.claims import Claim
    from nova_sched.scheduler.cloud import compute_report as reports

    node_id = compute_nodes.upsert_report(reports.validate(compute_report("c1")))
    seen = operator_changes.current()
    db_aggregates.create("agg")
    ratios = Claim("", node_id, 0, 0, 0).ratio_of_each()
    with pytest.raises(exception.HostTableBehind):
        allocations.claim(str(uuid.uuid4()), node_id, 512, 1, 1024, ratios,
                          operator_changes=seen)
    assert claimed_memory("c1") == 0
    allocations.claim(str(uuid.uuid4()), node_id, 512, 1, 1024, ratios,
                      operator_changes=operator_changes.current())
    assert claimed_memory("c1") == 512


# -- nova's cells: the 4.1 and 4.2 fanout casts ------------------------------
class NovaCloud:
    """A daemon's manager reading nova's cells (SQLite with nova's columns)
    and an in-memory Placement, its host table refreshed by no thread at
    all: what a fanout cast brings must be in it when the handler returns."""

    def __init__(self, ctxt, tmp_path):
        from nova_sched.scheduler.claim_stores.placement import PlacementClaims
        from nova_sched.scheduler.cloud.sources.nova_cells import NovaCellsSource
        from nova_sched.scheduler.cloud.sources.nova_db import NovaDatabases
        from nova_sched.scheduler.host_manager import HostManager
        from tests.unit.scheduler.fake_placement import FakePlacement
        from tests.unit.scheduler.sources.nova_tables import NovaTables

        self.ctxt = ctxt
        tables = NovaTables(tmp_path)
        cell = tables.add_cell("cell1")
        self.placement = FakePlacement()
        for host, memory_mb in (("a1", 4096), ("b1", 8192)):
            self.placement.add_provider(tables.add_compute(cell, host), 8, memory_mb, 100)
        self.source = NovaCellsSource(NovaDatabases(tables.api_url), self.placement)
        self.transport = rpc.get_transport()
        hm = HostManager(self.source)
        self.manager = SchedulerManager(self.transport, host_manager=hm)
        self.manager.cycle.claims = PlacementClaims(self.placement, hm.provider_host)
        self.v4 = SchedulerManagerV4(self.manager)
        self.source.poll()
        hm.full_resync()
        hm.refreshed_elsewhere = True

    def close(self):
        self.source.stop()
        self.transport.cleanup()

    def decide(self, path: str) -> str | None:
        spec = boot_request(memory_mb=2048)
        if path == "explain":
            hosts = self.manager.explain(self.ctxt, spec, {})["hosts"]
            return hosts[0]["host"] if hosts else None
        (outcome,) = self.manager.cycle.schedule(self.ctxt, request.parse(spec, {}))
        assert outcome.error is None, outcome.error
        self.manager.cycle.release([outcome.instance_uuid])
        return outcome.selections[0].host


@pytest.mark.parametrize("path", ["claimed", "explain"])
@pytest.mark.parametrize("kind", ["fanout", "instance_info"])
def test_novas_fanout_casts_are_seen_by_the_next_decision_from_nova_cells(
        db, ctxt, tmp_path, kind, path):
    CONF.set_override("transport_url", "fake:")
    CONF.set_override("host_source", "nova_cells", "scheduler")
    CONF.set_override("claims", "placement", "scheduler")
    CONF.set_override("enabled_filters", FILTERS, group="filter_scheduler")
    CONF.set_override("weight_classes", ["RAMWeigher"], group="filter_scheduler")
    CONF.set_override("max_instances_per_host", MAX_INSTANCES, group="filter_scheduler")
    cloud = NovaCloud(ctxt, tmp_path)
    try:
        change, _args, when_on, when_off = KINDS[kind]
        assert cloud.decide(path) == when_off
        missed = []
        for round_ in range(ROUNDS):
            on = round_ % 2 == 0
            change(cloud, on)
            picked = cloud.decide(path)
            if picked != (when_on if on else when_off):
                missed.append((round_, "on" if on else "off", picked))
        assert missed == [], f"decisions that missed the cast just handled: {missed}"
    finally:
        cloud.close()
