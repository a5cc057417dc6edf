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


def test_stored_request_reads_back_as_json_would_have_stored_it(db):
    # A request as the broker gave it, and what an in-process caller may
    # add: datetimes and sets as text, keys JSON has no type for, an
    # integer beyond 64 bits, text that is not ASCII.
    import datetime
    import json

    spec = {"instance_properties": {"uuid": "u1", "display_name": "caf\u00e9",
                                    "launched_at": datetime.datetime(2026, 12, 3, 8, 0),
                                    "tags": {"a"}},
            "by_index": {0: "first"}, "big": 2 ** 70}
    request = db_instances.StoredRequest(spec, {"retry": {"num_attempts": 1}}, None,
                                         True, True, needs_secrets=False)
    db_instances.ensure_instances(["u1"], {}, request=request)
    stored = db_instances.stored_request("u1")
    assert stored.request_spec == json.loads(json.dumps(spec, default=str))
    assert stored.filter_properties == {"retry": {"num_attempts": 1}}
