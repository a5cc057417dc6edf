"""NumInstancesFilter and AggregateNumInstancesFilter: num_instances below the limit."""

from __future__ import annotations

import pytest

from nova_sched.conf import CONF
from nova_sched.scheduler.filters.num_instances_filter import (
    AggregateNumInstancesFilter,
    NumInstancesFilter,
)
from tests.unit.scheduler import fakes


def _outcomes(flt, instances: dict[str, int], aggregates=()):
    """host -> passes."""
    table = fakes.make_table([dict(host=h, num_instances=n) for h, n in instances.items()],
                             aggregates=aggregates)
    spec = fakes.make_spec()
    kept = {host for host, _ in fakes.passes(flt, table, spec)}
    return {table.states[r].host: table.states[r].host in kept
            for r in table.active_rows()}


def test_default_limit_is_fifty():
    assert CONF.filter_scheduler.max_instances_per_host == 50
    assert _outcomes(NumInstancesFilter(), {"a": 49, "b": 50, "c": 51}) == {
        "a": True, "b": False, "c": False}


def test_strictly_below_the_limit():
    # nova's test_filter_num_instances_passes/fails with max 5.
    CONF.set_override("max_instances_per_host", 5, "filter_scheduler")
    assert _outcomes(NumInstancesFilter(), {"a": 4, "b": 5}) == {"a": True, "b": False}


def test_plain_filter_ignores_aggregates():
    aggs = [dict(hosts={"a"}, metadata={"max_instances_per_host": "1"})]
    assert _outcomes(NumInstancesFilter(), {"a": 4}, aggs) == {"a": True}


def test_aggregate_value_overrides_the_option():
    # nova's test_filter_aggregate_num_instances_value: option 4, aggregate 6.
    CONF.set_override("max_instances_per_host", 4, "filter_scheduler")
    aggs = [dict(hosts={"a"}, metadata={"max_instances_per_host": "6"})]
    assert _outcomes(AggregateNumInstancesFilter(), {"a": 5, "b": 5}, aggs) == {
        "a": True, "b": False}
    assert _outcomes(AggregateNumInstancesFilter(), {"a": 6, "b": 3}, aggs) == {
        "a": False, "b": True}


def test_minimum_of_several_aggregates():
    aggs = [dict(hosts={"a"}, metadata={"max_instances_per_host": "10"}),
            dict(hosts={"a"}, metadata={"max_instances_per_host": " 3 "})]
    assert _outcomes(AggregateNumInstancesFilter(), {"a": 3}, aggs) == {"a": False}
    assert _outcomes(AggregateNumInstancesFilter(), {"a": 2}, aggs) == {"a": True}


@pytest.mark.parametrize("bad", ["XXX", "3.0", "none"])
def test_value_that_is_not_a_whole_number_falls_back_to_the_option(bad):
    # nova's test_filter_aggregate_num_instances_value_error.
    CONF.set_override("max_instances_per_host", 5, "filter_scheduler")
    aggs = [dict(hosts={"a"}, metadata={"max_instances_per_host": bad})]
    assert _outcomes(AggregateNumInstancesFilter(), {"a": 4}, aggs) == {"a": True}
    assert _outcomes(AggregateNumInstancesFilter(), {"a": 5}, aggs) == {"a": False}
