"""Aggregates: membership, metadata, availability zones and the change stamp."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from nova_sched import exception
from nova_sched.db import aggregates
from nova_sched.db import api as db_api
from nova_sched.db import models
from nova_sched.db.aggregates import AggregateInfo


def _by_name() -> dict[str, dict]:
    return {agg["name"]: agg for agg in aggregates.list_all()}


def test_create_with_zone_records_it_as_metadata(db):
    created = aggregates.create("rack1", zone="az1")
    aggregates.create("plain")

    listed = _by_name()
    assert created["availability_zone"] == "az1"
    assert listed["rack1"]["metadata"] == {"availability_zone": "az1"}
    assert listed["rack1"]["hosts"] == []
    assert listed["plain"]["availability_zone"] is None
    assert listed["plain"]["metadata"] == {}


def test_duplicate_name_is_refused(db):
    aggregates.create("rack1")
    with pytest.raises(exception.AggregateExists, match="rack1"):
        aggregates.create("rack1", zone="az1")
    assert _by_name()["rack1"]["metadata"] == {}


@pytest.mark.parametrize(
    "call",
    [
        lambda: aggregates.add_host("nope", "h1"),
        lambda: aggregates.remove_host("nope", "h1"),
        lambda: aggregates.set_metadata("nope", {"k": "v"}),
    ],
    ids=["add_host", "remove_host", "set_metadata"],
)
def test_unknown_aggregate_is_an_error(db, call):
    with pytest.raises(exception.AggregateNotFound, match="nope"):
        call()


def test_hosts_join_and_leave(db):
    aggregates.create("rack1")
    aggregates.add_host("rack1", "h2")
    aggregates.add_host("rack1", "h1")
    assert _by_name()["rack1"]["hosts"] == ["h1", "h2"]

    with pytest.raises(exception.AggregateHostExists, match="h1"):
        aggregates.add_host("rack1", "h1")

    aggregates.remove_host("rack1", "h1")
    assert _by_name()["rack1"]["hosts"] == ["h2"]
    with pytest.raises(exception.AggregateHostNotFound, match="h1"):
        aggregates.remove_host("rack1", "h1")


def test_set_metadata_adds_updates_and_deletes(db):
    aggregates.create("rack1")
    aggregates.set_metadata("rack1", {"ssd": "true", "gpu": "a100", "pinned": 1})
    aggregates.set_metadata("rack1", {"ssd": "false", "gpu": None, "pinned": ""})
    # Deleting a key that is not there is accepted, as nova does.
    result = aggregates.set_metadata("rack1", {"absent": None})

    assert result["metadata"] == {"ssd": "false"}
    assert _by_name()["rack1"]["metadata"] == {"ssd": "false"}


def test_host_cannot_be_in_two_zones(db):
    aggregates.create("rack1", zone="az1")
    aggregates.create("rack2", zone="az2")
    aggregates.create("same-zone", zone="az1")
    aggregates.create("no-zone")
    aggregates.add_host("rack1", "h1")

    with pytest.raises(exception.AvailabilityZoneConflict) as err:
        aggregates.add_host("rack2", "h1")
    assert "h1" in str(err.value) and "az1" in str(err.value)
    assert _by_name()["rack2"]["hosts"] == []

    # Other aggregates of the same zone, or of none, are fine.
    aggregates.add_host("same-zone", "h1")
    aggregates.add_host("no-zone", "h1")
    assert _by_name()["no-zone"]["hosts"] == ["h1"]


def test_zone_metadata_cannot_move_a_member_into_a_second_zone(db):
    aggregates.create("rack1", zone="az1")
    aggregates.create("ssd")
    aggregates.add_host("rack1", "h1")
    aggregates.add_host("ssd", "h1")
    aggregates.add_host("ssd", "h9")

    with pytest.raises(exception.AvailabilityZoneConflict, match="h1"):
        aggregates.set_metadata("ssd", {"availability_zone": "az2", "fast": "1"})
    assert _by_name()["ssd"]["metadata"] == {}

    aggregates.set_metadata("ssd", {"availability_zone": "az1"})
    assert _by_name()["ssd"]["availability_zone"] == "az1"
    # The aggregate's own zone may change when no member is elsewhere.
    aggregates.create("lonely", zone="az3")
    aggregates.add_host("lonely", "h5")
    aggregates.set_metadata("lonely", {"availability_zone": "az4"})
    assert _by_name()["lonely"]["availability_zone"] == "az4"


@pytest.mark.parametrize("name", ["", "   ", "x" * 256])
def test_bad_names_are_refused_before_the_database(db, name):
    with pytest.raises(exception.InvalidInput):
        aggregates.create(name)
    assert aggregates.list_all() == []


def test_too_long_metadata_value_is_refused(db):
    aggregates.create("rack1")
    with pytest.raises(exception.InvalidInput, match="k"):
        aggregates.set_metadata("rack1", {"k": "v" * 256})


def test_load_for_cache(db):
    aggregates.create("rack1", zone="az1")
    aggregates.add_host("rack1", "h1")
    aggregates.add_host("rack1", "h2")
    aggregates.set_metadata("rack1", {"ssd": "true"})

    [info] = aggregates.load_for_cache()

    assert isinstance(info, AggregateInfo)
    assert info.name == "rack1"
    assert info.hosts == frozenset({"h1", "h2"})
    assert info.metadata == {"availability_zone": "az1", "ssd": "true"}
    assert aggregates.load_with_stamp() == (aggregates.stamp(), [info])


def test_every_mutation_moves_the_stamp_and_failures_do_not(db):
    assert aggregates.stamp() == 0
    seen = [aggregates.stamp()]
    for change in (
        lambda: aggregates.create("rack1", zone="az1"),
        lambda: aggregates.add_host("rack1", "h1"),
        lambda: aggregates.set_metadata("rack1", {"k": "v"}),
        lambda: aggregates.remove_host("rack1", "h1"),
    ):
        change()
        seen.append(aggregates.stamp())
    assert seen == sorted(set(seen)), seen

    with pytest.raises(exception.AggregateExists):
        aggregates.create("rack1")
    assert aggregates.stamp() == seen[-1]


def test_stamp_grows_even_when_the_clock_goes_back(db, monkeypatch):
    aggregates.create("rack1")
    before = aggregates.stamp()
    monkeypatch.setattr(db_api, "now_us", lambda: before - 10_000_000)
    aggregates.add_host("rack1", "h1")
    assert aggregates.stamp() == before + 1


def test_stamp_row_is_created_when_missing(db):
    with db_api.session_scope() as session:
        session.execute(sa.delete(models.ChangeCounter))
    assert aggregates.stamp() == 0

    aggregates.create("rack1")

    assert aggregates.stamp() > 0
