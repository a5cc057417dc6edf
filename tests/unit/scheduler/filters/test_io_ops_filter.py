"""IoOpsFilter and AggregateIoOpsFilter: num_io_ops below the limit."""

from __future__ import annotations

import pytest

from nova_sched.conf import CONF
from nova_sched.scheduler.filters.io_ops_filter import AggregateIoOpsFilter, IoOpsFilter
from tests.unit.scheduler import fakes


def _outcomes(flt, io_ops: dict[str, int], aggregates=()):
    """host -> passes."""
    table = fakes.make_table([dict(host=h, num_io_ops=n) for h, n in io_ops.items()],
                             aggregates=aggregates)
    spec = fakes.make_spec()
    kept = {host for host, _ in fakes.passes(flt, table, spec)}
    return {table.states[r].host: table.states[r].host in kept
            for r in table.active_rows()}


def test_default_limit_is_eight():
    assert CONF.filter_scheduler.max_io_ops_per_host == 8
    assert _outcomes(IoOpsFilter(), {"a": 7, "b": 8, "c": 9}) == {
        "a": True, "b": False, "c": False}


@pytest.mark.parametrize("limit,expected", [(0, False), (1, True), (3, True)])
def test_strictly_below_the_limit(limit, expected):
    # nova's test_filter_num_iops_passes/fails: passes iff num_io_ops < max.
    CONF.set_override("max_io_ops_per_host", limit, "filter_scheduler")
    assert _outcomes(IoOpsFilter(), {"a": 0})["a"] is expected
    assert _outcomes(IoOpsFilter(), {"a": 2})["a"] is (limit > 2)


def test_plain_filter_ignores_aggregates():
    aggs = [dict(hosts={"a"}, metadata={"max_io_ops_per_host": "2"})]
    assert _outcomes(IoOpsFilter(), {"a": 5}, aggs) == {"a": True}


def test_aggregate_value_overrides_the_option():
    # nova's test_aggregate_filter_num_iops_value.
    CONF.set_override("max_io_ops_per_host", 7, "filter_scheduler")
    aggs = [dict(hosts={"a"}, metadata={"max_io_ops_per_host": "2"})]
    assert _outcomes(AggregateIoOpsFilter(), {"a": 2, "b": 2}, aggs) == {
        "a": False, "b": True}
    assert _outcomes(AggregateIoOpsFilter(), {"a": 1, "b": 6}, aggs) == {
        "a": True, "b": True}


def test_minimum_of_several_aggregates():
    aggs = [dict(hosts={"a", "b"}, metadata={"max_io_ops_per_host": "10"}),
            dict(hosts={"a"}, metadata={"max_io_ops_per_host": "3"})]
    assert _outcomes(AggregateIoOpsFilter(), {"a": 3, "b": 9, "c": 9}, aggs) == {
        "a": False, "b": True, "c": False}


@pytest.mark.parametrize("bad", ["XXX", "2.5", ""])
def test_value_that_is_not_a_whole_number_falls_back_to_the_option(bad):
    # nova's test_aggregate_filter_num_iops_value_error (cast_to=int).
    CONF.set_override("max_io_ops_per_host", 8, "filter_scheduler")
    aggs = [dict(hosts={"a"}, metadata={"max_io_ops_per_host": bad}),
            dict(hosts={"a"}, metadata={"max_io_ops_per_host": "1"})]
    assert _outcomes(AggregateIoOpsFilter(), {"a": 7}, aggs) == {"a": True}
