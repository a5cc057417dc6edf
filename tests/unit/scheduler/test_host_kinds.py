"""HostKinds: per-row kind codes the host table keeps current.

Codes are worked out for every row the first time a kind is asked for and
follow the table from then on: a node's new report (a new HostState through
``HostTable.upsert``), a node added, a node deleted (its row inactive),
aggregates changed, reports that only move figures (``update_row``). Every
check compares the codes with the kind's function applied to the rows'
current HostStates.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from nova_sched.scheduler.cloud import host_kinds
from nova_sched.scheduler.cloud.host_kinds import HostKinds, freeze
from nova_sched.scheduler.cloud.host_state import HostState, attribute_kind
from tests.unit.scheduler import fakes

_KIND = "test.supported_and_rack"


def _value(state):
    return (state.supported_instances, (state.stats or {}).get("rack"))


def _assert_current(table, name=_KIND, value_of=_value):
    codes = table.kinds.codes(name, value_of)
    values = table.kinds.values(name)
    assert len(codes) == table.size
    for row in range(table.size):
        assert freeze(values[codes[row]]) == freeze(value_of(table.states[row])), row
    # Equal values, equal codes.
    by_value: dict = {}
    for row in range(table.size):
        key = freeze(value_of(table.states[row]))
        assert by_value.setdefault(key, codes[row]) == codes[row]


def _node(i, arch="x86_64", rack="1"):
    return dict(host=f"h{i}", supported_instances=[[arch, "kvm", "hvm"]],
                stats={"rack": rack})


def test_codes_are_worked_out_for_every_row_on_first_use():
    table = fakes.make_table([_node(i, rack=str(i % 3)) for i in range(9)])
    _assert_current(table)
    codes = table.kinds.codes(_KIND, _value)
    assert len(set(codes.tolist())) == 3


def test_codes_follow_new_reports_new_nodes_and_deleted_nodes():
    table = fakes.make_table([_node(i) for i in range(6)])
    _assert_current(table)
    # A node's new report describes it differently.
    fakes.add_node(table, **_node(2, arch="aarch64"))
    _assert_current(table)
    # A report that describes a node as before but moves its figures.
    row = table.row_of("h3", "h3")
    table.update_row(row, {"claimed_memory_mb": 1024})
    _assert_current(table)
    # New nodes, past the arrays' first capacity.
    for i in range(6, 40):
        fakes.add_node(table, **_node(i, rack=str(i % 5)))
    _assert_current(table)
    # A deleted node keeps its row (inactive) and its code.
    table.deactivate(table.row_of("h4", "h4"))
    _assert_current(table)
    codes = table.kinds.codes(_KIND, _value)
    aarch = codes[table.row_of("h2", "h2")]
    assert table.kinds.values(_KIND)[aarch][0] == [["aarch64", "kvm", "hvm"]]


def test_values_no_row_has_any_more_are_forgotten():
    table = fakes.make_table([_node(i) for i in range(4)])
    name = "test.metric"

    def value_of(state):
        return (state.stats or {}).get("load")

    table.kinds.codes(name, value_of)
    for report in range(200):
        fakes.add_node(table, host=f"h{report % 4}", stats={"load": report})
        _assert_current(table, name, value_of)
    assert len(table.kinds.values(name)) <= 2 * table.size + 64


def test_numbers_follow_new_reports():
    table = fakes.make_table([dict(host=f"h{i}", stats={"load": i}) for i in range(5)])

    def load(state):
        return float(state.stats.get("load", -1))

    assert table.kinds.numbers("test.load", load).tolist() == [0, 1, 2, 3, 4]
    fakes.add_node(table, host="h1", stats={"load": 7})
    fakes.add_node(table, host="h9", stats={})
    assert table.kinds.numbers("test.load", load).tolist() == [0, 7, 2, 3, 4, -1]


def test_least_recently_asked_kinds_are_dropped_and_rebuilt_when_asked_again():
    table = fakes.make_table([_node(i, rack=str(i)) for i in range(3)])
    for k in range(host_kinds.MAX_KINDS + 5):
        table.kinds.codes(("test.many", k), _value)
    assert len(table.kinds._kinds) == host_kinds.MAX_KINDS
    fakes.add_node(table, **_node(0, rack="9"))
    _assert_current(table, ("test.many", 0))


def test_aggregate_summaries_follow_aggregate_changes():
    table = fakes.make_table([dict(host="a"), dict(host="b")],
                             aggregates=[dict(hosts={"a"}, metadata={"k": "1"})])

    def keys(aggs):
        return sorted(k for agg in aggs for k in agg.metadata)

    def summary(host):
        code = table.col("agg_code")[table.row_of(host, host)]
        return table.kinds.per_aggregate_set("test.keys", keys)[code]

    assert (summary("a"), summary("b")) == (["k"], [])
    table.set_aggregates([fakes.make_table(
        aggregates=[dict(hosts={"b"}, metadata={"j": "2"})]).aggregates[0]])
    assert (summary("a"), summary("b")) == ([], ["j"])
    fakes.add_node(table, host="c")  # a new node in no aggregate
    assert summary("c") == []


def test_freeze_keeps_apart_what_prints_or_compares_differently():
    assert len({freeze(1), freeze(1.0), freeze(True), freeze("1")}) == 4
    assert freeze({"a": [1, {"b": 2}], "c": None}) == \
        freeze({"c": None, "a": [1, {"b": 2}]})
    assert freeze([1, 2]) != freeze((1, 2))
    assert freeze({1: "x", "1": "y"}) == freeze({"1": "y", 1: "x"})  # mixed keys
    unshared = bytearray(b"x")
    assert freeze(unshared) != freeze(unshared)


def test_every_host_state_attribute_is_classified():
    fields = {f.name for f in dataclasses.fields(HostState)}
    properties = {name for name, value in vars(HostState).items()
                  if isinstance(value, property)}
    for name in fields | properties:
        what = attribute_kind(name)
        if name.startswith("_"):
            assert what == host_kinds.ABSENT
        else:
            assert what in (host_kinds.REPORT, host_kinds.FIGURE,
                            host_kinds.AGGREGATES, host_kinds.BY_HOST), name
    # Every property is known: none is read host by host by mistake.
    assert not [n for n in properties if attribute_kind(n) == host_kinds.BY_HOST]
    assert attribute_kind("numeric_metrics") == host_kinds.ABSENT
    assert attribute_kind("no_such_thing") == host_kinds.ABSENT
    assert attribute_kind("disabled_reason") == host_kinds.BY_HOST


@pytest.mark.parametrize("seed", range(3))
def test_figures_are_what_host_state_says_for_every_row(seed):
    rng = np.random.default_rng(seed)
    nodes = [dict(host=f"h{i}", memory_mb=int(rng.integers(0, 9000)),
                  vcpus=int(rng.integers(0, 64)), disk_mb=int(rng.integers(0, 10**6)),
                  reserved_memory_mb=int(rng.integers(0, 600)),
                  reserved_cpus=int(rng.integers(0, 3)),
                  reserved_disk_mb=int(rng.integers(0, 3000)),
                  claimed_memory_mb=int(rng.integers(0, 9000)),
                  claimed_vcpus=int(rng.integers(0, 90)),
                  claimed_disk_mb=int(rng.integers(0, 10**6)),
                  num_instances=int(rng.integers(0, 30)),
                  num_io_ops=int(rng.integers(0, 9)),
                  node_ram_ratio=float(rng.choice([0.0, 1.0, 1.5])),
                  disabled=bool(rng.random() < 0.3),
                  service_updated=float(rng.integers(0, 10**9)))
             for i in range(60)]
    aggregates = [dict(hosts={f"h{i}" for i in range(0, 60, 3)},
                       metadata={"cpu_allocation_ratio": "4.0"})]
    table = fakes.make_table(nodes, aggregates)
    cycle = fakes.cycle(table, fakes.make_spec())
    rows = rng.permutation(table.active_rows())
    for name in host_kinds._FIGURES:
        column = host_kinds.figure_column(cycle, name, rows)
        expected = [getattr(table.states[r], name) for r in rows.tolist()]
        assert column.tolist() == expected, name
    for name in host_kinds._AGGREGATE_CODES:
        codes, values = host_kinds.aggregate_codes(cycle, name, rows)
        assert [values[c] for c in codes.tolist()] == [
            getattr(table.states[r], name) for r in rows.tolist()]


def test_a_table_keeps_its_kinds_current_without_being_asked_again():
    # The hook in HostTable.upsert: kinds asked once are updated by reports.
    table = fakes.make_table([dict(host="h", cpu_info=json.dumps({"vendor": "A"}))])
    assert isinstance(table.kinds, HostKinds)

    def vendor(state):
        return json.loads(state.cpu_info)["vendor"]

    table.kinds.codes("test.vendor", vendor)
    fakes.add_node(table, host="h", cpu_info=json.dumps({"vendor": "B"}))
    kind = table.kinds._kinds["test.vendor"]
    assert kind.values[kind.codes[0]] == "B"
