"""Instance rows read in bulk: which are in ERROR, and their latest faults."""

from __future__ import annotations

from nova_sched.db import instances as db_instances


def test_in_error_picks_the_failed_ones(db, monkeypatch):
    db_instances.ensure_instances(["ok", "bad", "worse"], {})
    db_instances.mark_error("bad", "no host")
    db_instances.mark_error("worse", "no host")
    db_instances.mark_active("ok", "h1", "h1")
    # Bounded IN lists: more uuids than one statement takes still work.
    monkeypatch.setattr(db_instances, "_IN_CHUNK", 2)

    assert sorted(db_instances.in_error(["ok", "bad", "worse", "unknown"])) == [
        "bad", "worse"]
    assert db_instances.in_error([]) == []


def test_latest_fault_messages_keeps_the_newest_fault(db, monkeypatch):
    db_instances.ensure_instances(["a", "b", "c"], {})
    db_instances.mark_error("a", "first")
    db_instances.mark_error("a", "second")
    db_instances.mark_error("b", "only")
    monkeypatch.setattr(db_instances, "_IN_CHUNK", 1)

    assert db_instances.latest_fault_messages(["a", "b", "c"]) == {
        "a": "second", "b": "only"}
    assert db_instances.latest_fault_messages([]) == {}
