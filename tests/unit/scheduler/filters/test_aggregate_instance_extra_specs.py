"""AggregateInstanceExtraSpecsFilter: flavor extra specs against aggregate metadata."""

from __future__ import annotations

import pytest

from nova_sched.scheduler.filters.aggregate_instance_extra_specs import (
    AggregateInstanceExtraSpecsFilter,
)
from tests.unit.scheduler import fakes

# host1 in both aggregates, host2 in the first only, host3 in none.
_AGGREGATES = [
    dict(hosts={"host1", "host2"}, metadata={"opt1": "1", "opt2": "2", "ssd": "true"}),
    dict(hosts={"host1"}, metadata={"opt1": "3, 5", "gpu": "k80,v100"}),
]


def _outcomes(extra_specs, aggregates=_AGGREGATES):
    """host -> passes."""
    table = fakes.make_table([dict(host=h) for h in ("host1", "host2", "host3")],
                             aggregates=aggregates)
    spec = fakes.make_spec(extra_specs=extra_specs)
    flt = AggregateInstanceExtraSpecsFilter()
    kept = {host for host, _ in fakes.passes(flt, table, spec)}
    return {table.states[r].host: table.states[r].host in kept
            for r in table.active_rows()}


def test_no_extra_specs_pass_every_host():
    assert _outcomes({}) == {"host1": True, "host2": True, "host3": True}


def test_unscoped_and_scoped_keys_are_checked():
    # nova's test_aggregate_filter_passes_extra_specs_simple.
    specs = {"opt1": "1", "aggregate_instance_extra_specs:opt2": "2"}
    assert _outcomes(specs) == {"host1": True, "host2": True, "host3": False}


def test_every_value_of_every_aggregate_counts_split_at_commas():
    # nova's ..._simple_comma: opt1 is {1, 3, 5} on host1, {1} on host2.
    assert _outcomes({"aggregate_instance_extra_specs:opt1": "3"}) == {
        "host1": True, "host2": False, "host3": False}
    assert _outcomes({"opt1": "5", "aggregate_instance_extra_specs:opt1": "1"}) == {
        "host1": True, "host2": False, "host3": False}
    assert _outcomes({"gpu": "v100"})["host1"]


def test_a_value_that_matches_no_aggregate_value_fails():
    # nova's test_aggregate_filter_fails_extra_specs_simple.
    assert _outcomes({"opt1": "1", "opt2": "222"}) == {
        "host1": False, "host2": False, "host3": False}


def test_a_key_missing_from_the_aggregates_fails():
    assert _outcomes({"rack": "1"}) == {"host1": False, "host2": False, "host3": False}


@pytest.mark.parametrize("key", ["capabilities:opt2", "hw:cpu_policy", "trait:CUSTOM_X",
                                 "resources:VCPU"])
def test_other_scopes_are_skipped(key):
    assert _outcomes({key: "nothing matches this"}) == {
        "host1": True, "host2": True, "host3": True}


def test_a_key_named_like_the_scope_is_an_unscoped_key():
    # nova's test_aggregate_filter_passes_with_key_same_as_scope.
    aggs = [dict(hosts={"host1"}, metadata={"aggregate_instance_extra_specs": "1"})]
    assert _outcomes({"aggregate_instance_extra_specs": "1"}, aggs) == {
        "host1": True, "host2": False, "host3": False}


def test_nested_scope_keeps_the_rest_as_the_key():
    aggs = [dict(hosts={"host1"}, metadata={"a:b": "x"})]
    assert _outcomes({"aggregate_instance_extra_specs:a:b": "x"}, aggs)["host1"]


@pytest.mark.parametrize("req,host1,host2", [
    ("s== true", True, True),
    ("<in> tru", True, True),
    ("<or> false <or> true", True, True),
    ("s!= true", False, False),
    ("True", False, False),       # plain string equality is case sensitive
])
def test_operators_apply_to_aggregate_values(req, host1, host2):
    got = _outcomes({"ssd": req})
    assert (got["host1"], got["host2"], got["host3"]) == (host1, host2, False)


def test_numeric_operator_against_every_value():
    # host1's opt1 values are 1, 3 and 5: ">= 4" holds for 5; host2 has only 1.
    assert _outcomes({"opt1": ">= 4"}) == {"host1": True, "host2": False, "host3": False}
    assert _outcomes({"opt1": "== 1"}) == {"host1": True, "host2": True, "host3": False}
