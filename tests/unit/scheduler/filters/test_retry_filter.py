"""RetryFilter: nodes already tried for this instance are skipped."""

from __future__ import annotations

from nova_sched.scheduler.filters.retry_filter import RetryFilter
from tests.unit.scheduler import fakes


def _table():
    return fakes.make_table([
        dict(host="host1", nodename="node1"),
        dict(host="host1", nodename="node2"),
        dict(host="host2", nodename="node1"),
    ])


def _check(table, spec):
    return fakes.passes(RetryFilter(), table, spec)


def test_no_retry_passes_everything():
    table = _table()
    assert len(_check(table, fakes.make_spec())) == 3


def test_empty_retry_passes_everything():
    table = _table()
    assert len(_check(table, fakes.make_spec(retry_hosts=[]))) == 3
    spec = fakes.make_spec(filter_properties={"retry": {"num_attempts": 1}})
    assert len(_check(table, spec)) == 3


def test_tried_node_fails_other_nodes_of_the_host_pass():
    table = _table()
    spec = fakes.make_spec(retry_hosts=[("host1", "node1")])
    assert _check(table, spec) == [("host1", "node2"), ("host2", "node1")]


def test_several_tried_nodes():
    table = _table()
    spec = fakes.make_spec(retry_hosts=[("host1", "node1"), ("host2", "node1")])
    assert _check(table, spec) == [("host1", "node2")]


def test_unknown_tried_nodes_are_ignored():
    table = _table()
    spec = fakes.make_spec(retry_hosts=[("gone", "gone"), ("host2", "node2")])
    assert len(_check(table, spec)) == 3


def test_host_and_node_must_both_match():
    table = _table()
    spec = fakes.make_spec(retry_hosts=[("host2", "node2"), ("host3", "node1")])
    assert len(_check(table, spec)) == 3
