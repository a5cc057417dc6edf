"""AggregateTypeAffinityFilter: instance_type metadata restricts flavors."""

from __future__ import annotations

import dataclasses

from nova_sched.scheduler.filters.type_filter import AggregateTypeAffinityFilter
from tests.unit.scheduler import fakes


def _outcomes(flavor_name, aggregates, hosts=("host1", "host2")):
    """host -> passes for a flavor named ``flavor_name``."""
    table = fakes.make_table([dict(host=h) for h in hosts], aggregates=aggregates)
    spec = fakes.make_spec()
    spec = dataclasses.replace(spec, instance_type=dict(spec.instance_type, name=flavor_name))
    flt = AggregateTypeAffinityFilter()
    kept = {host for host, _ in fakes.passes(flt, table, spec)}
    return {table.states[r].host: table.states[r].host in kept
            for r in table.active_rows()}


def test_hosts_without_the_key_take_every_flavor():
    aggs = [dict(hosts={"host1"}, metadata={"ssd": "true"})]
    assert _outcomes("m1.small", aggs) == {"host1": True, "host2": True}


def test_only_the_listed_flavor():
    # nova's test_aggregate_type_filter: instance_type 'fake1'.
    aggs = [dict(hosts={"host1"}, metadata={"instance_type": "fake1"})]
    assert _outcomes("fake1", aggs) == {"host1": True, "host2": True}
    assert _outcomes("fake2", aggs) == {"host1": False, "host2": True}


def test_comma_separated_flavors_with_spaces():
    # nova's test_aggregate_type_filter_multi_aggregate / ..._comma.
    aggs = [dict(hosts={"host1"}, metadata={"instance_type": "fake1, fake2 ,fake3"})]
    assert _outcomes("fake2", aggs)["host1"]
    assert _outcomes("fake3", aggs)["host1"]
    assert not _outcomes("fake", aggs)["host1"]
    assert not _outcomes("fake1, fake2", aggs)["host1"]


def test_any_aggregate_listing_the_flavor_is_enough():
    aggs = [dict(hosts={"host1"}, metadata={"instance_type": "fake1"}),
            dict(hosts={"host1", "host2"}, metadata={"instance_type": "fake2"})]
    assert _outcomes("fake1", aggs) == {"host1": True, "host2": False}
    assert _outcomes("fake2", aggs) == {"host1": True, "host2": True}
    assert _outcomes("fake3", aggs) == {"host1": False, "host2": False}


def test_flavor_without_a_name_fails_restricted_hosts():
    aggs = [dict(hosts={"host1"}, metadata={"instance_type": "fake1"})]
    assert _outcomes(None, aggs) == {"host1": False, "host2": True}
