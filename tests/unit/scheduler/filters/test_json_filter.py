"""JsonFilter: nova's query language, its edge cases, and malformed queries."""

from __future__ import annotations

import json

import pytest

from nova_sched import exception
from nova_sched.scheduler.filters import json_filter
from nova_sched.scheduler.filters.json_filter import JsonFilter
from tests.unit.scheduler import fakes

NOVA_QUERY = ["and", [">=", "$free_ram_mb", 1024], [">=", "$free_disk_mb", 200 * 1024]]


def _table():
    return fakes.make_table([
        dict(host="big", memory_mb=4096, disk_mb=400 * 1024,
             stats={"rack": "r1", "gpu": "yes"}, hypervisor_type="kvm",
             cpu_info=json.dumps({"vendor": "Intel"})),
        dict(host="exact", memory_mb=1024, disk_mb=200 * 1024, stats={"rack": "r2"},
             hypervisor_type="kvm"),
        dict(host="small-ram", memory_mb=1023, disk_mb=200 * 1024,
             hypervisor_type="qemu"),
        dict(host="small-disk", memory_mb=1024, disk_mb=200 * 1024 - 1,
             stats={"rack": "r1"}),
    ])


def _spec(query, raw=False):
    if query is _NO_HINT:
        return fakes.make_spec()
    value = query if raw else json.dumps(query)
    return fakes.make_spec(scheduler_hints={"query": value})


_NO_HINT = object()


def _hosts(query, raw=False, table=None):
    table = table or _table()
    spec = _spec(query, raw)
    flt = JsonFilter()
    kept = [h for h, _ in fakes.passes(flt, table, spec)]
    for row in table.active_rows():
        state = table.states[row]
        assert JsonFilter().host_passes(state, spec) == (state.host in kept)
    return kept


ALL = ["big", "exact", "small-ram", "small-disk"]


def test_nova_example_query():
    assert _hosts(NOVA_QUERY) == ["big", "exact"]


def test_query_may_be_an_already_parsed_list_or_nova_wrapped_text():
    assert _hosts(NOVA_QUERY, raw=True) == ["big", "exact"]
    assert _hosts([json.dumps(NOVA_QUERY)], raw=True) == ["big", "exact"]


@pytest.mark.parametrize("query", [_NO_HINT, None, "", [], "[]", "{}", "null", "\"\"",
                                   "0", {}])
def test_no_or_empty_query_passes_every_host(query):
    assert _hosts(query, raw=True) == ALL


@pytest.mark.parametrize("op,args,expected", [
    ("=", [1, 1], True), ("=", [1, 2], False),
    ("<", [1, 2], True), ("<", [1, 1], False), ("<", [2, 1], False),
    (">", [2, 1], True), (">", [2, 2], False), (">", [2, 3], False),
    ("<=", [1, 2], True), ("<=", [1, 1], True), ("<=", [2, 1], False),
    (">=", [2, 1], True), (">=", [2, 2], True), (">=", [2, 3], False),
    ("in", [1, 1], True), ("in", [1, 1, 2, 3], True), ("in", [4, 1, 2, 3], False),
    ("not", [True], False), ("not", [False], True),
    ("or", [True, False], True), ("or", [False, False], False),
    ("and", [True, True], True), ("and", [False, False], False),
    ("and", [True, False], False),
    # nova's nested case: ((True or False) and (2 > 1))
    ("and", [["or", True, False], [">", 2, 1]], True),
    # The first term is compared with every other one.
    ("=", [2, 2, 2], True), ("=", [2, 2, 3], False), ("<", [1, 2, 3], True),
])
def test_basic_operators(op, args, expected):
    assert (_hosts([op] + args) == ALL) is expected
    assert (_hosts([op] + args) == []) is (not expected)


def test_not_with_several_arguments_passes_when_any_negation_is_true():
    # nova: ["not", ...] gives a list of results; any true one passes.
    assert _hosts(["not", True, False, True, False]) == ALL
    assert _hosts(["not", True, True, True]) == []


def test_comparison_needs_two_terms():
    # nova: one term alone (or none, after unknown variables are dropped).
    assert _hosts([">", 1]) == []
    assert _hosts(["=", 1]) == []
    assert _hosts(["in", 1]) == []
    assert _hosts([">", ["and", ["or", ["not", ["<", [">=", ["<=", ["in"]]]]]]]]) == []


def test_unknown_variables_are_dropped_as_in_nova():
    assert _hosts(["=", "$........", 1, 1]) == ALL
    assert _hosts(["=", "$foo", 2, 2]) == ALL
    assert _hosts(["<", "$foo", 5]) == []
    assert _hosts(["=", "$stats.nothing", "x"]) == []
    # nova's test_json_filter_fails_on_service_disabled: an unknown variable
    # under "not" leaves no result, and no result is no pass.
    assert _hosts(["not", "$service.disabled"]) == []


def test_empty_string_argument_is_dropped():
    assert _hosts(["=", "", 1, 1]) == ALL


def test_dotted_variables_reach_into_dicts():
    assert _hosts(["=", "$stats.rack", "r1"]) == ["big", "small-disk"]
    assert _hosts(["in", "$stats.rack", "r2", "r3"]) == ["exact"]
    assert _hosts(["=", "$hypervisor_type", "kvm"]) == ["big", "exact"]


def test_variable_path_continues_into_json_text():
    assert _hosts(["=", "$cpu_info.vendor", "Intel"]) == ["big"]


def test_variable_through_a_non_dict_is_unknown():
    assert _hosts(["=", "$free_ram_mb.foo", 1, 1]) == ALL
    assert _hosts(["=", "$host.foo", "x"]) == []


def test_private_attributes_and_methods_are_not_variables():
    assert _hosts(["=", "$_table", "$_table"]) == []
    assert _hosts(["=", "$_col", "$_col"]) == []


def test_variable_against_variable():
    assert _hosts([">", "$free_disk_mb", "$free_ram_mb"]) == ALL


def test_nested_and_or_not():
    query = ["or",
             ["and", ["=", "$stats.rack", "r1"], [">=", "$free_ram_mb", 2048]],
             ["and", ["not", ["=", "$hypervisor_type", "kvm"]], ["<", "$free_ram_mb", 1024]]]
    assert _hosts(query) == ["big", "small-ram"]


def test_nested_not_excludes_what_it_negates():
    # A sub-query's "not" counts as its negation (nova would treat the
    # non-empty list as true here and keep every host).
    assert _hosts(["and", ["not", ["=", "$host", "big"]],
                   [">=", "$free_ram_mb", 1024]]) == ["exact", "small-disk"]
    assert _hosts(["or", ["not", ["=", 1, 1]]]) == []
    assert _hosts(["not", ["not", ["=", "$host", "exact"]]]) == ["exact"]


def test_nova_happy_day():
    # nova's test_json_filter_happy_day, on hosts with capabilities as stats.
    query = ["and",
             "$stats.enabled",
             ["=", "$stats.opt1", "match"],
             ["or",
              ["and", ["<", "$free_ram_mb", 30], ["<", "$free_disk_mb", 300]],
              ["and", [">", "$free_ram_mb", 30], [">", "$free_disk_mb", 300]]]]
    table = fakes.make_table([
        dict(host="a", memory_mb=10, disk_mb=200, stats={"opt1": "match"}),
        dict(host="b", memory_mb=40, disk_mb=400, stats={"opt1": "match"}),
        dict(host="c", memory_mb=40, disk_mb=400, stats={"enabled": False, "opt1": "match"}),
        dict(host="d", memory_mb=30, disk_mb=300, stats={"enabled": True, "opt1": "match"}),
        dict(host="e", memory_mb=20, disk_mb=400, stats={"enabled": True, "opt1": "match"}),
        dict(host="f", memory_mb=20, disk_mb=400, stats={"enabled": True,
                                                           "opt1": "no-match"}),
    ])
    assert _hosts(query, table=table) == ["a", "b"]


def test_unorderable_comparison_is_false_not_an_error():
    assert _hosts(["<", "$host", 5]) == []
    assert _hosts([">", "$stats", 1]) == []


def test_strings_and_numbers_compare_as_python_values():
    assert _hosts(["=", "$stats.rack", "R1"]) == []
    assert _hosts(["<", "abc", "abd"]) == ALL


@pytest.mark.parametrize("text,problem", [
    ("[", "not valid JSON"),
    ("['=', 1, 1]", "not valid JSON"),
    ("\"free_ram_mb\"", "must be a JSON list"),
    ("5", "must be a JSON list"),
    ("true", "must be a JSON list"),
    ("{\"=\": [1, 1]}", "must be a JSON list"),
    ("[\"!=\", 1, 2]", "unknown operator '!='"),
    ("[\"and\", [\"==\", \"$free_ram_mb\", 1]]", "unknown operator '=='"),
    ("[[\"=\", 1, 1]]", "must start with an operator name"),
    ("[5, 1]", "must start with an operator name"),
    ("[null, 1]", "must start with an operator name"),
    ("[" * 100 + "]" * 100, "must start with an operator name"),
    ("[" * 100000 + "]" * 100000, "nested deeper"),
    ("[\"and\"" + ", [\"and\"" * 100 + "]" * 101, "nested deeper"),
], ids=lambda value: value[:24])
def test_malformed_query_fails_the_request_clearly(text, problem):
    table = _table()
    spec = _spec(text, raw=True)
    with pytest.raises(exception.InvalidRequestSpec) as err:
        fakes.passes(JsonFilter(), table, spec)
    assert "Invalid JsonFilter query" in err.value.message
    assert problem in err.value.message
    assert err.value.instance_uuids == spec.instance_uuids
    with pytest.raises(exception.InvalidRequestSpec):
        JsonFilter().host_passes(table.states[0], spec)


def test_malformed_hint_types():
    table = _table()
    for hint in (5, True, ["!=", 1, 2]):
        spec = fakes.make_spec(scheduler_hints={"query": hint})
        with pytest.raises(exception.InvalidRequestSpec, match="JsonFilter"):
            fakes.passes(JsonFilter(), table, spec)


def test_query_is_compiled_once_per_decision_not_per_host(monkeypatch):
    table = _table()
    calls = []
    real = json_filter._compile_text
    monkeypatch.setattr(json_filter, "_compile_text",
                        lambda text: calls.append(text) or real(text))
    spec = _spec(NOVA_QUERY)
    flt = JsonFilter()
    cycle = fakes.cycle(table, spec)
    rows = table.active_rows()
    cycle.prepare([flt])
    assert len(calls) == 1
    for i in range(len(rows)):
        flt.filter_rows(cycle, rows[i:i + 1])
    assert [table.states[r].host for r in rows[flt.filter_rows(cycle, rows)]] == [
        "big", "exact"]
    assert len(calls) == 1
    # Nothing outlives the decision: the next one compiles its query.
    fakes.passes(flt, table, spec)
    assert len(calls) == 2


def test_json_text_attribute_is_parsed_once_per_report(monkeypatch):
    table = _table()
    parsed = []
    real = json_filter._parse
    monkeypatch.setattr(json_filter, "_parse",
                        lambda text: parsed.append(text) or real(text))
    flt = JsonFilter()
    spec = _spec(["and", ["=", "$cpu_info.vendor", "Intel"],
                  ["=", "$cpu_info.x", "$cpu_info.x"]])
    assert fakes.passes(flt, table, spec) == []
    spec = _spec(["=", "$cpu_info.vendor", "Intel"])
    assert fakes.passes(flt, table, spec) == [("big", "big")]
    assert len(parsed) == 1
    fakes.add_node(table, host="big", cpu_info=json.dumps({"vendor": "AMD"}))
    assert fakes.passes(flt, table, spec) == []
    assert len(parsed) == 2


def test_no_eval(tmp_path):
    marker = tmp_path / "x"
    query = ["=", f"__import__('pathlib').Path('{marker}').touch()", 1]
    assert _hosts(query) == []
    assert not marker.exists()
