"""aggregate_metadata: comma-split metadata and evaluation once per set of aggregates."""

from __future__ import annotations

import numpy as np

from nova_sched.scheduler import aggregate_metadata
from nova_sched.scheduler.host_state import AggregateInfo
from tests.unit.scheduler import fakes


def _agg(id, hosts, **metadata):
    return AggregateInfo(id=id, name=f"agg{id}", hosts=frozenset(hosts), metadata=metadata)


def test_metadata_splits_at_commas_and_strips():
    aggs = [_agg(1, ["h"], a="x, y", b="1"), _agg(2, ["h"], a="z", c="")]
    assert aggregate_metadata.metadata(aggs) == {"a": {"x", "y", "z"}, "b": {"1"}, "c": {""}}
    assert aggregate_metadata.metadata([]) == {}


def _table(n_hosts=6, nodes_per_host=2):
    return fakes.make_table([dict(host=f"h{i}", nodename=f"h{i}-n{j}")
                             for i in range(n_hosts) for j in range(nodes_per_host)])


def _value(state):
    return min((int(a.metadata["v"]) for a in state.aggregates if "v" in a.metadata),
               default=-1)


def test_uniform_value_is_returned_as_is():
    table = _table()
    assert aggregate_metadata.per_row(table, table.active_rows(), _value) == -1
    table.set_aggregates([_agg(1, ["h0", "h1"], other="1")])
    assert aggregate_metadata.per_row(table, table.active_rows(), _value) == -1


def test_values_per_row_follow_the_hosts_aggregates():
    table = _table()
    table.set_aggregates([_agg(1, ["h0", "h1"], v="5"), _agg(2, ["h1", "h2"], v="3"),
                          _agg(3, ["h4"], other="x")])
    rows = np.random.default_rng(0).permutation(table.active_rows())
    got = aggregate_metadata.per_row(table, rows, _value)
    assert got.tolist() == [_value(table.states[r]) for r in rows]


def test_evaluated_once_per_distinct_set_of_aggregates():
    table = _table(n_hosts=50)
    table.set_aggregates([_agg(1, [f"h{i}" for i in range(0, 50, 2)], v="1"),
                          _agg(2, [f"h{i}" for i in range(0, 50, 3)], v="2")])
    calls = []

    def counting(state):
        calls.append(state.host)
        return _value(state)

    aggregate_metadata.per_row(table, table.active_rows(), counting)
    # none, {1}, {2}, {1, 2}
    assert len(calls) == 4


def test_cache_follows_aggregate_changes_and_new_rows():
    table = _table(n_hosts=2)
    rows = table.active_rows()
    table.set_aggregates([_agg(1, ["h0"], v="1")])
    assert aggregate_metadata.per_row(table, rows, _value).tolist() == [1, 1, -1, -1]
    table.set_aggregates([_agg(1, ["h1"], v="7")])
    assert aggregate_metadata.per_row(table, rows, _value).tolist() == [-1, -1, 7, 7]
    fakes.add_node(table, host="h1", nodename="h1-new")
    rows = table.active_rows()
    assert aggregate_metadata.per_row(table, rows, _value).tolist() == [-1, -1, 7, 7, 7]


def test_many_distinct_sets_evaluate_only_those_among_the_rows():
    n = aggregate_metadata._EVALUATE_ALL_UP_TO + 20
    table = _table(n_hosts=n, nodes_per_host=1)
    table.set_aggregates([_agg(i, [f"h{i}"], v=str(i)) for i in range(n)])
    calls = []

    def counting(state):
        calls.append(state.host)
        return _value(state)

    rows = table.active_rows()[[3, 5, 70]]
    assert aggregate_metadata.per_row(table, rows, counting).tolist() == [3, 5, 70]
    assert sorted(calls) == ["h3", "h5", "h70"]


def test_mask_and_empty_rows():
    table = _table(n_hosts=3)
    table.set_aggregates([_agg(1, ["h1"], v="1")])
    rows = table.active_rows()
    assert aggregate_metadata.mask(table, rows, lambda st: _value(st) > 0).tolist() == [
        False, False, True, True, False, False]
    assert aggregate_metadata.mask(table, rows, lambda st: True).tolist() == [True] * 6
    empty = np.array([], dtype=np.int64)
    assert aggregate_metadata.mask(table, empty, lambda st: True).shape == (0,)
