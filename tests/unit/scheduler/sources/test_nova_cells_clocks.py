"""The nova_cells source whatever the writers' clocks and transactions (issue
38, item 2): rows stamped long before they became visible, a scheduler
whose clock is off, rows deleted outright. On SQLite and on MySQL/MariaDB
(tests/db_backends.py), with nova's columns (nova_tables) and an in-memory
Placement."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
import uuid as uuidlib

import pytest

from nova_sched.conf import CONF
from nova_sched.scheduler import driver as drivers
from nova_sched.scheduler.claim_stores.placement import PlacementClaims
from nova_sched.scheduler.cloud.sources import nova_cells
from nova_sched.scheduler.cloud.sources.nova_cells import NovaCellsSource
from nova_sched.scheduler.cloud.sources.nova_db import NovaDatabases
from nova_sched.scheduler.decision.cycle import SchedulingCycle
from nova_sched.scheduler.host_manager import HostManager
from nova_sched.scheduler.wire import request
from tests.db_backends import temporary_database
from tests.unit.scheduler.conftest import boot_request
from tests.unit.scheduler.fake_placement import FakePlacement
from tests.unit.scheduler.sources.nova_tables import NovaTables, utcnow
from tests.unit.scheduler.sources.test_nova_cells import NovaCloud

A_MINUTE_AGO = dt.timedelta(seconds=60)
# The reconciliation's interval in these tests (the option's minimum).
RESYNC = 1.0


@pytest.fixture(params=["sqlite", "mysql"])
def cloud(request, db, tmp_path):
    CONF.set_override("host_source", "nova_cells", "scheduler")
    CONF.set_override("claims", "placement", "scheduler")
    CONF.set_override("enabled_filters", ["RamFilter", "CoreFilter", "ComputeFilter",
                                          "ServerGroupAntiAffinityFilter"],
                      "filter_scheduler")
    # Long unless a test shortens it: what a test sees before it comes from
    # the reads by change.
    CONF.set_override("resync_interval", 3600, "nova_cells")
    with contextlib.ExitStack() as stack:
        new_database = None
        if request.param == "mysql":
            def new_database(_name):
                return stack.enter_context(temporary_database("mysql"))
        tables = NovaTables(tmp_path, new_database)
        stack.callback(tables.dispose)
        cell = tables.add_cell("cell1")
        placement = FakePlacement()
        source = NovaCellsSource(NovaDatabases(tables.api_url), placement)
        stack.callback(source.databases.dispose)
        stack.callback(source.stop)
        host_manager = HostManager(source)
        claims = PlacementClaims(placement, host_manager.provider_host)
        cycle = SchedulingCycle(drivers.load_driver("filter_scheduler", host_manager),
                                host_manager, claims, compute_api=None, notifier=None)
        yield NovaCloud(tables, cell, placement, source, host_manager, cycle)


def candidates(cloud) -> list[str]:
    decision = cloud.cycle.explain(request.parse(boot_request(), {}))
    return sorted(h["host"] for h in decision["hosts"])


def wait_reconciliation_due() -> None:
    time.sleep(RESYNC + 0.05)


def test_nodes_registered_with_stamps_a_minute_old_are_candidates_at_the_next_read(cloud):
    """Tooling that inserts nodes in bulk, a writer whose clock is a minute
    behind: the rows are older than the last read when they appear. Their
    ids are new: the next read has them, no reconciliation needed."""
    cloud.add_compute("c1")
    cloud.host_manager.full_resync()
    past = utcnow() - A_MINUTE_AGO
    bulk = [f"bulk-{i:02d}" for i in range(20)]
    for host in bulk:
        cloud.add_compute(host, created_at=past, updated_at=past)
    cloud.poll()
    assert candidates(cloud) == sorted(["c1", *bulk])
    # And chosen: the only node with room for the flavor is a bulk one.
    big = cloud.add_compute("big", vcpus=64, created_at=past, updated_at=past)
    cloud.poll()
    [(_uuid, chosen)] = cloud.select(vcpus=32)
    assert chosen.host == "big"
    assert cloud.placement.used(big, "VCPU") == 32


def test_a_service_disabled_by_a_writer_whose_clock_is_behind_is_seen_at_the_next_read(cloud):
    cloud.add_compute("c1")
    cloud.add_compute("c2")
    cloud.host_manager.full_resync()
    cloud.source.poll()
    stale = utcnow() - A_MINUTE_AGO
    cloud.tables.update(cloud.cell, "services", "host = 'c2'", {}, disabled=1,
                        disabled_reason="maintenance", updated_at=stale)
    cloud.poll()
    assert candidates(cloud) == ["c1"]
    # A service deleted outright: its nodes stop being candidates too.
    cloud.tables.delete_outright(cloud.cell, "services", "host = 'c1'", {})
    cloud.poll()
    assert candidates(cloud) == []


def test_a_node_changed_with_an_old_stamp_is_seen_at_the_reconciliation(cloud):
    """A changed row is not new: stamped before the last read, only the
    reconciliation (every resync_interval) reads it."""
    CONF.set_override("resync_interval", RESYNC, "nova_cells")
    past = utcnow() - A_MINUTE_AGO
    cloud.add_compute("c1", created_at=past, updated_at=past)
    cloud.host_manager.full_resync()
    cloud.tables.update(cloud.cell, "compute_nodes", "host = 'c1'", {},
                        hypervisor_type="ironic", updated_at=utcnow() - A_MINUTE_AGO)
    state = cloud.host_manager.table.states[_row(cloud, "c1")]
    cloud.poll()
    assert state.hypervisor_type == "fake"  # read by change: not yet
    wait_reconciliation_due()
    cloud.poll()
    assert cloud.host_manager.table.states[_row(cloud, "c1")].hypervisor_type == "ironic"


def test_a_node_deleted_outright_stops_being_a_candidate_after_the_reconciliation(cloud):
    """A soft delete stamped in the past, then archived (nova-manage db
    archive_deleted_rows): the row is gone before any read saw it deleted."""
    CONF.set_override("resync_interval", RESYNC, "nova_cells")
    cloud.add_compute("c1")
    cloud.add_compute("c2", node="c2-a")
    cloud.tables.add_compute(cloud.cell, "c2", node="c2-b")
    cloud.host_manager.full_resync()
    assert candidates(cloud) == ["c1", "c2"]
    cloud.tables.update(cloud.cell, "compute_nodes", "hypervisor_hostname = 'c2-a'", {},
                        deleted=99, updated_at=utcnow() - A_MINUTE_AGO)
    cloud.tables.delete_outright(cloud.cell, "compute_nodes", "deleted != 0", {})
    wait_reconciliation_due()
    cloud.poll()
    nodes = {cloud.host_manager.table.states[r].nodename
             for r in cloud.host_manager.table.active_rows()}
    assert nodes == {"c1"}  # c2-b has no provider in Placement: never a candidate
    assert candidates(cloud) == ["c1"]


def test_instances_placed_or_deleted_behind_the_readers_back(cloud):
    """An instance row stamped a minute ago counts at the next read (its id
    is new); one deleted outright stops counting at the reconciliation."""
    cloud.add_compute("c1")
    cloud.add_compute("c2")
    cloud.host_manager.full_resync()
    cloud.source.poll()
    member = str(uuidlib.uuid4())
    cloud.tables.add_instance(cloud.cell, member, "c1", "c1",
                              stamp=utcnow() - A_MINUTE_AGO)
    cloud.poll()
    assert cloud.host_manager.hosts_of([member]) == {member: "c1"}
    assert cloud.host_manager.table.states[_row(cloud, "c1")].num_instances == 1

    CONF.set_override("resync_interval", RESYNC, "nova_cells")
    wait_reconciliation_due()
    cloud.source.poll()
    cloud.tables.delete_outright(cloud.cell, "instances", "uuid = :u", {"u": member})
    wait_reconciliation_due()
    cloud.poll()
    assert cloud.host_manager.hosts_of([member]) == {}
    assert cloud.host_manager.table.states[_row(cloud, "c1")].num_instances == 0


def test_the_schedulers_own_clock_plays_no_part(cloud, monkeypatch):
    """The since of a read is the database's clock: a scheduler whose clock
    runs ten minutes ahead still reads a row written now."""
    cloud.add_compute("c1")
    ahead = dt.timedelta(minutes=10)
    monkeypatch.setattr(nova_cells, "_utcnow", lambda: utcnow() + ahead)
    cloud.host_manager.full_resync()
    cloud.source.poll()
    cloud.tables.update(cloud.cell, "compute_nodes", "host = 'c1'", {},
                        hypervisor_type="ironic")
    cloud.poll()
    assert cloud.host_manager.table.states[_row(cloud, "c1")].hypervisor_type == "ironic"


def test_a_reconciliation_that_finds_nothing_new_hands_the_table_nothing(cloud):
    for host in ("c1", "c2", "c3"):
        cloud.add_compute(host)
    cloud.tables.add_instance(cloud.cell, "i1", "c1", "c1")
    CONF.set_override("resync_interval", RESYNC, "nova_cells")
    cloud.host_manager.full_resync()
    cloud.source.load_changed(0)
    wait_reconciliation_due()
    cloud.source.poll()
    changed = cloud.source.load_changed(0)
    assert changed.nodes == [] and changed.aggregates is None
    # The services are read whole every time: only those whose row moved.
    assert changed.services == []


def test_the_poller_makes_a_bulk_registered_node_a_candidate_within_refresh_interval(cloud):
    """The daemon's own poller thread, timed: a node stamped a minute in the
    past is a candidate within refresh_interval (plus the read itself)."""
    CONF.set_override("refresh_interval", 0.2, "nova_cells")
    cloud.add_compute("c1")
    cloud.host_manager.full_resync()  # starts the poller
    cloud.add_compute("late", created_at=utcnow() - A_MINUTE_AGO,
                      updated_at=utcnow() - A_MINUTE_AGO)
    written = time.monotonic()
    while "late" not in candidates(cloud):
        assert time.monotonic() - written < 0.2 + 2.0, "not a candidate in time"
        time.sleep(0.02)
        cloud.host_manager.refresh(force=True)


def _row(cloud, host) -> int:
    table = cloud.host_manager.table
    return next(r for r in table.active_rows() if table.states[r].host == host)
