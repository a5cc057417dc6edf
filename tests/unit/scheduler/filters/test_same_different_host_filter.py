"""SameHostFilter and DifferentHostFilter: the ``same_host`` and
``different_host`` hints, against where the scheduler's records put the
named instances (claims and placed instances)."""

from __future__ import annotations

import pytest

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.db import allocations as db_allocations
from nova_sched.db import compute_nodes as db_nodes
from nova_sched.db import instances as db_instances
from nova_sched.scheduler import claims, filters
from nova_sched.scheduler.cloud import compute_report
from nova_sched.scheduler.filters import affinity_filter
from nova_sched.scheduler.filters.affinity_filter import (DifferentHostFilter,
                                                          SameHostFilter)
from tests.unit.scheduler import fakes
from tests.unit.scheduler.conftest import boot_request
from tests.unit.scheduler.conftest import compute_report as report

CLAIMED = "aaaaaaaa-0000-0000-0000-000000000001"   # claimed on h1, row has no host yet
PLACED = "aaaaaaaa-0000-0000-0000-000000000002"    # placed on h2 (row only)
FAILED = "aaaaaaaa-0000-0000-0000-000000000003"    # ERROR, its row still names h3
DELETED = "aaaaaaaa-0000-0000-0000-000000000004"   # deleted, its row names h3
UNKNOWN = "aaaaaaaa-0000-0000-0000-00000000000f"


@pytest.fixture
def cloud(db):
    """Nodes h1 (two nodes), h2, h3 in the database and in a host table."""
    node_ids = {}
    for host, node in (("h1", "h1-a"), ("h1", "h1-b"), ("h2", "h2"), ("h3", "h3")):
        node_ids[node] = db_nodes.upsert_report(
            compute_report.validate(report(host, node=node)))
    db_instances.ensure_instances([CLAIMED, PLACED, FAILED, DELETED],
                                  {"memory_mb": 512, "vcpus": 1, "root_gb": 1})
    claims.DatabaseClaims().claim(claims.Claim(CLAIMED, node_ids["h1-b"], memory_mb=512,
                                               vcpus=1, disk_mb=0))
    db_instances.mark_active(PLACED, "h2", "h2")
    db_instances.mark_active(FAILED, "h3", "h3")
    db_instances.mark_error(FAILED, "boom")
    db_instances.mark_active(DELETED, "h3", "h3")
    db_instances.mark_deleted(DELETED)
    return _table()


def _table():
    return fakes.make_table([
        dict(host="h1", nodename="h1-a"), dict(host="h1", nodename="h1-b"),
        dict(host="h2"), dict(host="h3"), dict(host="h4"),
    ])


@pytest.fixture
def no_db(monkeypatch):
    """A plain host table; reading the database fails the test."""
    monkeypatch.setattr(affinity_filter.db_allocations, "hosts_of",
                        lambda uuids: pytest.fail("database read"))
    return _table()


def _hosts(flt_cls, table, hints):
    spec = fakes.make_spec(scheduler_hints=hints)
    flt = flt_cls()
    kept = fakes.passes(flt, table, spec)
    for row in table.active_rows():
        state = table.states[row]
        assert flt.host_passes(state, spec) == ((state.host, state.nodename) in kept)
    return sorted({h for h, _ in kept}), kept


@pytest.mark.parametrize("hints", [None, {}, {"same_host": []}, {"same_host": ""},
                                   {"different_host": "x"}])
def test_same_host_without_hint_passes_everything(no_db, hints):
    assert _hosts(SameHostFilter, no_db, hints)[0] == ["h1", "h2", "h3", "h4"]


@pytest.mark.parametrize("hints", [None, {}, {"different_host": []},
                                   {"same_host": CLAIMED}])
def test_different_host_without_hint_passes_everything(no_db, hints):
    assert _hosts(DifferentHostFilter, no_db, hints)[0] == ["h1", "h2", "h3", "h4"]


def test_same_host_follows_a_claim_to_every_node_of_its_host(cloud):
    hosts, nodes = _hosts(SameHostFilter, cloud, {"same_host": CLAIMED})
    assert hosts == ["h1"]
    assert nodes == [("h1", "h1-a"), ("h1", "h1-b")]


def test_same_host_with_a_list_passes_hosts_running_any(cloud):
    hosts, _ = _hosts(SameHostFilter, cloud, {"same_host": [CLAIMED, PLACED, UNKNOWN]})
    assert hosts == ["h1", "h2"]


def test_same_host_ignores_failed_and_deleted_instances(cloud):
    assert _hosts(SameHostFilter, cloud, {"same_host": [FAILED, DELETED]})[0] == []


def test_same_host_with_only_unknown_instances_passes_nothing(cloud):
    assert _hosts(SameHostFilter, cloud, {"same_host": UNKNOWN})[0] == []


def test_different_host_avoids_hosts_running_any(cloud):
    assert _hosts(DifferentHostFilter, cloud, {"different_host": PLACED})[0] == [
        "h1", "h3", "h4"]
    assert _hosts(DifferentHostFilter, cloud,
                  {"different_host": [CLAIMED, PLACED]})[0] == ["h3", "h4"]


def test_different_host_with_unknown_failed_or_deleted_passes_everything(cloud):
    hints = {"different_host": [UNKNOWN, FAILED, DELETED]}
    assert _hosts(DifferentHostFilter, cloud, hints)[0] == ["h1", "h2", "h3", "h4"]


def test_both_hints_together(cloud):
    hints = {"same_host": [CLAIMED, PLACED], "different_host": PLACED}
    spec = fakes.make_spec(scheduler_hints=hints)
    rows = cloud.active_rows()
    same, different = SameHostFilter(), DifferentHostFilter()
    result = filters.HostFilterHandler.run([same, different], fakes.cycle(cloud, spec),
                                           rows)
    assert sorted({cloud.states[r].host for r in result.rows}) == ["h1"]
    # One decision: each filter prepared its own hint.
    cycle = fakes.cycle(cloud, spec)
    mask = same.filter_all(cycle, rows) & different.filter_all(cycle, rows)
    assert sorted({cloud.states[r].host for r in rows[mask]}) == ["h1"]


@pytest.mark.parametrize("value", [5, {"uuid": CLAIMED}, [CLAIMED, 5]])
def test_malformed_hint_fails_the_request(no_db, value):
    for flt_cls, hint in ((SameHostFilter, "same_host"),
                          (DifferentHostFilter, "different_host")):
        spec = fakes.make_spec(scheduler_hints={hint: value})
        with pytest.raises(exception.InvalidRequestSpec, match=hint):
            fakes.passes(flt_cls(), no_db, spec)


def test_database_is_read_once_per_decision_not_per_host(cloud, monkeypatch):
    calls = []
    real = db_allocations.hosts_of
    monkeypatch.setattr(affinity_filter.db_allocations, "hosts_of",
                        lambda uuids: calls.append(list(uuids)) or real(uuids))
    spec = fakes.make_spec(scheduler_hints={"same_host": [CLAIMED]})
    flt = SameHostFilter()
    cycle = fakes.cycle(cloud, spec)
    rows = cloud.active_rows()
    # Read when the decision prepares, before any host is asked...
    cycle.prepare([flt])
    assert calls == [[CLAIMED]]
    # ...and not again however the rows are asked within the decision.
    flt.filter_rows(cycle, rows)
    for i in range(len(rows)):
        flt.filter_rows(cycle, rows[i:i + 1])
    assert calls == [[CLAIMED]]
    # The next decision reads again: claims move.
    fakes.passes(flt, cloud, spec)
    assert len(calls) == 2


def test_no_hint_touches_no_database(no_db):
    # No db fixture here: a request without the hints must not need one.
    for flt_cls in (SameHostFilter, DifferentHostFilter):
        assert len(fakes.passes(flt_cls(), no_db, fakes.make_spec())) == 5


# -- through the manager ----------------------------------------------------

@pytest.fixture
def affinity_manager(db, request):
    CONF.set_override("enabled_filters", ["RetryFilter", "RamFilter", "ComputeFilter",
                                          "SameHostFilter", "DifferentHostFilter"],
                      "filter_scheduler")
    return request.getfixturevalue("manager")


def _boot(manager, ctxt, hints, **kwargs):
    spec = boot_request(**kwargs)
    manager.run_instance(ctxt, spec, None, [], None, True,
                         {"scheduler_hints": hints})
    return spec["instance_uuids"]


def test_manager_places_by_hints(affinity_manager, ctxt):
    mgr = affinity_manager
    for host, ram in (("c1", 8192), ("c2", 4096), ("c3", 2048)):
        mgr.compute_node_update(ctxt, report(host, memory_mb=ram))
    (first,) = _boot(mgr, ctxt, {})
    assert db_instances.get(first).host == "c1"  # most free RAM
    (near,) = _boot(mgr, ctxt, {"same_host": [first]})
    (away,) = _boot(mgr, ctxt, {"different_host": first})
    (apart,) = _boot(mgr, ctxt, {"different_host": [first, away]})
    assert [db_instances.get(u).host for u in (near, away, apart)] == ["c1", "c2", "c3"]
    (nowhere,) = _boot(mgr, ctxt, {"same_host": ["no-such-instance"]})
    assert db_instances.get(nowhere).vm_state == "error"


def test_manager_keeps_every_instance_of_a_request_off_the_named_host(
        affinity_manager, ctxt):
    mgr = affinity_manager
    for host, ram in (("c1", 8192), ("c2", 4096), ("c3", 4096)):
        mgr.compute_node_update(ctxt, report(host, memory_mb=ram))
    (first,) = _boot(mgr, ctxt, {})
    uuids = _boot(mgr, ctxt, {"different_host": first}, count=3)
    assert "c1" not in {db_instances.get(u).host for u in uuids}
