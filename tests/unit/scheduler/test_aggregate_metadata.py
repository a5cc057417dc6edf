"""aggregate_metadata: comma-split metadata, nova's number rule, and
evaluation once per set of aggregates."""

from __future__ import annotations

import numpy as np

from nova_sched.db.aggregates import AggregateInfo
from nova_sched.scheduler.cloud import aggregate_metadata
from tests.unit.scheduler import fakes


def _agg(id, hosts, **metadata):
    return AggregateInfo(id=id, name=f"agg{id}", hosts=frozenset(hosts), metadata=metadata)


def test_metadata_splits_at_commas_and_strips():
    aggs = [_agg(1, ["h"], a="x, y", b="1"), _agg(2, ["h"], a="z", c="")]
    assert aggregate_metadata.metadata(aggs) == {"a": {"x", "y", "z"}, "b": {"1"}, "c": {""}}
    assert aggregate_metadata.metadata([]) == {}


def test_values_for_key_are_not_split():
    aggs = [_agg(1, ["h"], a="x, y"), _agg(2, ["h"], a="z"), _agg(3, ["h"], b="1")]
    assert aggregate_metadata.values_for_key(aggs, "a") == {"x, y", "z"}
    assert aggregate_metadata.values_for_key(aggs, "c") == set()


def test_number_is_the_smallest_value_else_the_default():
    aggs = [_agg(1, ["h"], r="3.5"), _agg(2, ["h"], r=" 1.5 "), _agg(3, ["h"], s="x")]
    assert aggregate_metadata.number(aggs, "r", 9.0) == 1.5
    assert aggregate_metadata.number(aggs, "missing", 9.0) == 9.0
    assert aggregate_metadata.number([], "r", 9.0) == 9.0


def test_number_with_a_value_that_does_not_cast_is_the_default():
    # nova's validate_num_values: one bad value invalidates the whole set.
    aggs = [_agg(1, ["h"], r="2"), _agg(2, ["h"], r="2.5")]
    assert aggregate_metadata.number(aggs, "r", 7, int) == 7
    assert aggregate_metadata.number(aggs, "r", 7.0, float) == 2.0


def test_host_value_reads_the_hosts_aggregates():
    table = fakes.make_table([dict(host="h0"), dict(host="h1")],
                             aggregates=[dict(hosts={"h0"}, metadata={"r": "4"})])
    assert aggregate_metadata.host_value(fakes.state(table, "h0"), "r", 1.0) == 4.0
    assert aggregate_metadata.host_value(fakes.state(table, "h1"), "r", 1.0) == 1.0
    assert aggregate_metadata.host_value(None, "r", 1.0) == 1.0


def test_uses_key():
    table = fakes.make_table([dict(host="h0")],
                             aggregates=[dict(hosts={"h0"}, metadata={"r": "4"})])
    assert aggregate_metadata.uses_key(table, "r")
    assert not aggregate_metadata.uses_key(table, "s")
    assert not aggregate_metadata.uses_key(fakes.make_table([dict(host="h0")]), "r")


def _table(n_hosts=6, nodes_per_host=2):
    return fakes.make_table([dict(host=f"h{i}", nodename=f"h{i}-n{j}")
                             for i in range(n_hosts) for j in range(nodes_per_host)])


def _value(aggs):
    return min((int(a.metadata["v"]) for a in aggs if "v" in a.metadata), default=-1)


def _expected(table, rows):
    return [_value(table.states[r].aggregates) for r in rows]


def test_uniform_value():
    table = _table()
    rows = table.active_rows()
    assert aggregate_metadata.per_row(table, rows, _value).tolist() == [-1] * len(rows)
    table.set_aggregates([_agg(1, ["h0", "h1"], other="1")])
    assert aggregate_metadata.per_row(table, rows, _value).tolist() == [-1] * len(rows)


def test_values_per_row_follow_the_hosts_aggregates():
    table = _table()
    table.set_aggregates([_agg(1, ["h0", "h1"], v="5"), _agg(2, ["h1", "h2"], v="3"),
                          _agg(3, ["h4"], other="x")])
    rows = np.random.default_rng(0).permutation(table.active_rows())
    got = aggregate_metadata.per_row(table, rows, _value)
    assert got.tolist() == _expected(table, rows)


def test_the_function_receives_the_hosts_aggregates():
    table = _table(n_hosts=2, nodes_per_host=1)
    first, second = _agg(1, ["h0"], v="1"), _agg(2, ["h0", "h1"], v="2")
    table.set_aggregates([first, second])
    seen = []
    aggregate_metadata.per_row(table, table.active_rows(),
                               lambda aggs: seen.append(aggs) or 0)
    assert sorted(seen, key=len) == [(second,), (first, second)]


def test_evaluated_once_per_distinct_set_of_aggregates():
    table = _table(n_hosts=50)
    table.set_aggregates([_agg(1, [f"h{i}" for i in range(0, 50, 2)], v="1"),
                          _agg(2, [f"h{i}" for i in range(0, 50, 3)], v="2")])
    calls = []

    def counting(aggs):
        calls.append(tuple(a.id for a in aggs))
        return _value(aggs)

    rows = table.active_rows()
    assert aggregate_metadata.per_row(table, rows, counting).tolist() == _expected(
        table, rows)
    # none, {1}, {2}, {1, 2}
    assert sorted(calls) == [(), (1,), (1, 2), (2,)]


def test_follows_aggregate_changes_and_new_rows():
    table = _table(n_hosts=2)
    rows = table.active_rows()
    table.set_aggregates([_agg(1, ["h0"], v="1")])
    assert aggregate_metadata.per_row(table, rows, _value).tolist() == [1, 1, -1, -1]
    table.set_aggregates([_agg(1, ["h1"], v="7")])
    assert aggregate_metadata.per_row(table, rows, _value).tolist() == [-1, -1, 7, 7]
    fakes.add_node(table, host="h1", nodename="h1-new")
    rows = table.active_rows()
    assert aggregate_metadata.per_row(table, rows, _value).tolist() == [-1, -1, 7, 7, 7]


def test_only_the_sets_among_the_rows_are_evaluated():
    n = 100
    table = _table(n_hosts=n, nodes_per_host=1)
    table.set_aggregates([_agg(i, [f"h{i}"], v=str(i)) for i in range(n)])
    calls = []

    def counting(aggs):
        calls.append(aggs[0].id)
        return _value(aggs)

    rows = table.active_rows()[[3, 5, 70]]
    assert aggregate_metadata.per_row(table, rows, counting).tolist() == [3, 5, 70]
    assert sorted(calls) == [3, 5, 70]


def test_mask_and_empty_rows():
    table = _table(n_hosts=3)
    table.set_aggregates([_agg(1, ["h1"], v="1")])
    rows = table.active_rows()
    assert aggregate_metadata.mask(table, rows, lambda aggs: _value(aggs) > 0).tolist() == [
        False, False, True, True, False, False]
    assert aggregate_metadata.mask(table, rows, lambda aggs: True).tolist() == [True] * 6
    empty = np.array([], dtype=np.int64)
    assert aggregate_metadata.mask(table, empty, lambda aggs: True).shape == (0,)


def test_cycle_aggregate_number():
    table = _table(n_hosts=3, nodes_per_host=1)
    spec = fakes.make_spec()
    rows = table.active_rows()
    # No aggregate sets the key: the option itself, a scalar.
    assert fakes.cycle(table, spec).aggregate_number(rows, "v", 8, cast=int) == 8
    table.set_aggregates([_agg(1, ["h0", "h1"], v="5"), _agg(2, ["h1"], v="3"),
                          _agg(3, ["h2"], v="x")])
    got = fakes.cycle(table, spec).aggregate_number(rows, "v", 8, cast=int)
    assert got.tolist() == [5, 3, 8]
