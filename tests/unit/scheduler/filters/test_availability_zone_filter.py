"""AvailabilityZoneFilter: zones from aggregate metadata, else the default zone."""

from __future__ import annotations

import pytest

from nova_sched.conf import CONF
from nova_sched.db.aggregates import AggregateInfo
from nova_sched.scheduler.filters.availability_zone_filter import (
    AvailabilityZoneFilter,
)
from tests.unit.scheduler import fakes


def _table():
    return fakes.make_table(
        [dict(host="h-az1"), dict(host="h-az2"), dict(host="h-both"),
         dict(host="h-plain"), dict(host="h-nozone-agg")],
        aggregates=[
            dict(name="agg1", hosts={"h-az1", "h-both"},
                 metadata={"availability_zone": "az1"}),
            dict(name="agg2", hosts={"h-az2", "h-both"},
                 metadata={"availability_zone": "az2", "ssd": "true"}),
            dict(name="fast", hosts={"h-nozone-agg", "h-az1"},
                 metadata={"ssd": "true"}),
        ],
    )


def _kept(table, zone):
    spec = fakes.make_spec(availability_zone=zone)
    return sorted(h for h, _ in fakes.passes(AvailabilityZoneFilter(), table, spec))


@pytest.mark.parametrize("zone", [None, ""])
def test_no_zone_requested_passes_everywhere(zone):
    assert len(_kept(_table(), zone)) == 5


def test_zone_from_aggregate_metadata():
    table = _table()
    assert _kept(table, "az1") == ["h-az1", "h-both"]
    assert _kept(table, "az2") == ["h-az2", "h-both"]


def test_hosts_in_no_zoned_aggregate_are_in_the_default_zone():
    table = _table()
    assert _kept(table, "nova") == ["h-nozone-agg", "h-plain"]


def test_default_zone_is_read_at_call_time():
    table = _table()
    CONF.set_override("default_availability_zone", "zone-x")
    assert _kept(table, "zone-x") == ["h-nozone-agg", "h-plain"]
    assert _kept(table, "nova") == []


def test_unknown_zone_passes_nowhere():
    assert _kept(_table(), "az9") == []


def test_zoned_host_is_not_in_the_default_zone():
    # A host with a zone from an aggregate is only in that zone (nova).
    assert "h-az1" not in _kept(_table(), "nova")


def test_changing_aggregates_moves_hosts():
    table = _table()
    table.set_aggregates([AggregateInfo(id=9, name="all", hosts=frozenset(
        {"h-az1", "h-plain"}), metadata={"availability_zone": "az3"})])
    assert _kept(table, "az3") == ["h-az1", "h-plain"]
    assert _kept(table, "az1") == []
    assert _kept(table, "nova") == ["h-az2", "h-both", "h-nozone-agg"]


def test_node_added_after_aggregates_gets_its_zone():
    table = _table()
    fakes.add_node(table, "h-az1", nodename="second-node")
    flt = AvailabilityZoneFilter()
    spec = fakes.make_spec(availability_zone="az1")
    assert ("h-az1", "second-node") in fakes.passes(flt, table, spec)
