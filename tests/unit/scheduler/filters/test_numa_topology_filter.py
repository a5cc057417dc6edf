"""NUMATopologyFilter: guest NUMA cells against the host's reported cells."""

from __future__ import annotations

import pytest

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler.wire import cpu_spec
from nova_sched.scheduler.filters import numa_topology_filter as numa
from nova_sched.scheduler.filters.numa_topology_filter import NUMATopologyFilter
from tests.unit.scheduler import fakes


def _cell(id, ncpus, memory_mb, cpu_usage=0, memory_usage=0):
    return {"id": id, "cpus": list(range(id * ncpus, (id + 1) * ncpus)),
            "memory_mb": memory_mb, "cpu_usage": cpu_usage, "memory_usage": memory_usage}


def _topology(*cells):
    return {"cells": list(cells)}


@pytest.fixture(autouse=True)
def ratios():
    CONF.set_override("cpu_allocation_ratio", 1.0, "filter_scheduler")
    CONF.set_override("ram_allocation_ratio", 1.0, "filter_scheduler")


def _hosts(table, vcpus=4, memory_mb=4096, extra_specs=None, image_props=None):
    spec = fakes.make_spec(memory_mb=memory_mb, vcpus=vcpus, extra_specs=extra_specs,
                           image_props=image_props)
    flt = NUMATopologyFilter()
    kept = [h for h, _ in fakes.passes(flt, table, spec)]
    for row in table.active_rows():
        state = table.states[row]
        assert flt.host_passes(state, spec) == (state.host in kept)
    return kept


def _table():
    return fakes.make_table([
        dict(host="flat"),  # no topology reported
        dict(host="one-big", numa_topology=_topology(_cell(0, 8, 8192))),
        dict(host="two-small", numa_topology=_topology(_cell(0, 2, 2048),
                                                       _cell(1, 2, 2048))),
        dict(host="two-big", numa_topology=_topology(_cell(0, 4, 4096),
                                                     _cell(1, 4, 4096))),
        dict(host="four", numa_topology=_topology(*(_cell(i, 2, 2048) for i in range(4)))),
    ])


@pytest.mark.parametrize("extra", [None, {}, {"hw:cpu_policy": "shared"},
                                   {"hw:numa_cpus.0": "0-3", "hw:numa_mem.0": "4096"}])
def test_no_numa_request_passes_every_host(extra):
    # hw:numa_cpus.X without hw:numa_nodes asks for nothing (nova).
    assert len(_hosts(_table(), extra_specs=extra)) == 5


def test_dedicated_cpus_imply_one_cell_so_a_host_without_topology_fails():
    # nova's numa_get_constraints: a pinned guest has one cell when it asks
    # for none (how nova rejects the VCPU hosts of its PCPU fallback query).
    # Cells reporting no dedicated CPUs (before nova split them) pin the
    # shared ones.
    assert _hosts(_table(), extra_specs={"hw:cpu_policy": "dedicated"}) == [
        "one-big", "two-big"]
    assert _hosts(_table(), image_props={"hw_cpu_policy": "dedicated"}) == [
        "one-big", "two-big"]


def test_a_pinned_guest_fits_on_free_dedicated_cpus_without_overcommit():
    CONF.set_override("cpu_allocation_ratio", 16.0, "filter_scheduler")
    pinned = dict(_cell(0, 4, 8192), pcpus=[4, 5, 6, 7])
    busy = dict(_cell(0, 8, 8192), pcpus=[8, 9, 10, 11], pinned=2)
    shared_only = dict(_cell(0, 8, 8192), pcpus=[])
    table = fakes.make_table([
        dict(host="pinned", numa_topology=_topology(pinned)),
        dict(host="busy", numa_topology=_topology(busy)),
        dict(host="mixed-cells", numa_topology=_topology(shared_only, pinned)),
    ])
    dedicated = {"hw:cpu_policy": "dedicated"}
    assert _hosts(table, vcpus=4, extra_specs=dedicated) == ["pinned", "mixed-cells"]
    # Two of busy's four are pinned: two more fit, a third does not, ratio or not.
    assert _hosts(table, vcpus=2, extra_specs=dedicated) == ["pinned", "busy",
                                                              "mixed-cells"]
    assert _hosts(table, vcpus=3, extra_specs=dedicated) == ["pinned", "mixed-cells"]
    # An unpinned guest still uses the shared CPUs (no more than a cell has).
    assert _hosts(table, vcpus=8, extra_specs={"hw:numa_nodes": "1"}) == [
        "busy", "mixed-cells"]


def test_one_node_needs_one_cell_that_holds_the_whole_guest():
    assert _hosts(_table(), extra_specs={"hw:numa_nodes": "1"}) == [
        "one-big", "two-big"]


def test_host_without_topology_fails_a_numa_request():
    assert "flat" not in _hosts(_table(), vcpus=1, memory_mb=512,
                                extra_specs={"hw:numa_nodes": 1})


def test_even_split_over_two_nodes():
    # 4 vCPUs / 4096 MB -> two cells of 2 vCPUs / 2048 MB.
    assert _hosts(_table(), extra_specs={"hw:numa_nodes": "2"}) == [
        "two-small", "two-big", "four"]


def test_more_guest_cells_than_host_cells_fails():
    assert _hosts(_table(), vcpus=4, memory_mb=4096,
                  extra_specs={"hw:numa_nodes": "4"}) == ["four"]


def test_image_property_asks_too():
    assert _hosts(_table(), image_props={"hw_numa_nodes": "2"}) == [
        "two-small", "two-big", "four"]


def test_manual_split():
    # 3 CPUs + 3072 MB on one cell cannot go on a 2-CPU cell.
    extra = {"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-2", "hw:numa_mem.0": "3072",
             "hw:numa_cpus.1": "3", "hw:numa_mem.1": "1024"}
    assert _hosts(_table(), extra_specs=extra) == ["two-big"]


def test_manual_split_from_image_properties():
    props = {"hw_numa_nodes": "2", "hw_numa_cpus.0": "0,1,2", "hw_numa_mem.0": "3072",
             "hw_numa_cpus.1": "3", "hw_numa_mem.1": "1024"}
    assert _hosts(_table(), image_props=props) == ["two-big"]


def test_cells_go_to_distinct_host_cells_in_any_order():
    # Cell 0 of the guest only fits host cell 1; cell 1 fits either.
    table = fakes.make_table([dict(host="h", numa_topology=_topology(
        _cell(0, 2, 2048), _cell(1, 4, 4096)))])
    extra = {"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-2", "hw:numa_mem.0": "3072",
             "hw:numa_cpus.1": "3", "hw:numa_mem.1": "1024"}
    assert _hosts(table, extra_specs=extra) == ["h"]
    # Two guest cells that both need the big host cell cannot share it.
    extra = {"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-2", "hw:numa_mem.0": "3072",
             "hw:numa_cpus.1": "3-5", "hw:numa_mem.1": "3072"}
    assert _hosts(table, vcpus=6, memory_mb=6144, extra_specs=extra) == []


def test_usage_counts_against_the_allocation_ratios():
    busy = _topology(_cell(0, 4, 4096, cpu_usage=3, memory_usage=1024),
                     _cell(1, 4, 4096, cpu_usage=0, memory_usage=3072))
    table = fakes.make_table([dict(host="busy", numa_topology=busy)])
    # Each cell is too busy for 2 vCPUs + 2048 MB at ratio 1.0 (cell 0 CPU,
    # cell 1 memory)...
    assert _hosts(table, extra_specs={"hw:numa_nodes": "2"}) == []
    # ...but not once oversubscription is allowed.
    CONF.set_override("cpu_allocation_ratio", 2.0, "filter_scheduler")
    CONF.set_override("ram_allocation_ratio", 1.5, "filter_scheduler")
    assert _hosts(table, extra_specs={"hw:numa_nodes": "2"}) == ["busy"]


def test_ratios_are_the_nodes_effective_ones():
    # The resource model decides each node's ratios: its own reported ones
    # first, then (with AggregateCoreFilter/AggregateRamFilter enabled) its
    # aggregates', then the options (1.0 here).
    busy = _topology(_cell(0, 4, 4096, cpu_usage=3, memory_usage=1024),
                     _cell(1, 4, 4096, cpu_usage=0, memory_usage=3072))
    table = fakes.make_table([
        dict(host="own", numa_topology=busy, node_cpu_ratio=2.0, node_ram_ratio=1.5),
        dict(host="cpu-only", numa_topology=busy, node_cpu_ratio=2.0),
        dict(host="agg", numa_topology=busy),
        dict(host="plain", numa_topology=busy),
    ], aggregates=[dict(hosts={"agg"}, metadata={"cpu_allocation_ratio": "2.0",
                                                  "ram_allocation_ratio": "1.5"})])
    extra = {"hw:numa_nodes": "2"}
    assert _hosts(table, extra_specs=extra) == ["own"]
    CONF.set_override("enabled_filters", ["NUMATopologyFilter", "AggregateCoreFilter",
                                          "AggregateRamFilter"], "filter_scheduler")
    assert _hosts(table, extra_specs=extra) == ["own", "agg"]


def test_hosts_are_judged_column_wise_and_only_big_ones_on_their_own(monkeypatch):
    calls = []
    real = numa.fit
    monkeypatch.setattr(numa, "fit", lambda *a: calls.append(1) or real(*a))
    table = fakes.make_table(
        [dict(host=f"h{i}", numa_topology=_topology(_cell(0, 4, 4096, cpu_usage=i),
                                                    _cell(1, 4, 4096)))
         for i in range(8)]
        + [dict(host="ratio", numa_topology=_topology(_cell(0, 4, 4096)),
                node_cpu_ratio=4.0),
           # More cells than the columns hold: asked with fit() on its own.
           dict(host="many", numa_topology=_topology(*(_cell(i, 1, 1024)
                                                       for i in range(6))))])
    spec = fakes.make_spec(vcpus=2, memory_mb=1024, extra_specs={"hw:numa_nodes": 2})
    kept = [h for h, _ in fakes.passes(NUMATopologyFilter(), table, spec)]
    # A cell of 4 CPUs at ratio 1.0 takes a 1-CPU guest cell while its usage
    # is at most 3; "ratio" has one cell for two guest cells.
    assert kept == ["h0", "h1", "h2", "h3", "many"]
    assert len(calls) == 1


def _random_topology(rng):
    if rng.random() < 0.1:
        return rng.choice([None, {"cells": []}])
    cells = []
    for i in range(int(rng.integers(1, 7))):
        cpus = int(rng.integers(1, 9))
        memory = int(rng.choice([512, 1024, 2048, 4096]))
        cells.append(_cell(i, cpus, memory,
                           cpu_usage=float(rng.choice([0, 1, 2.5, cpus, 2 * cpus])),
                           memory_usage=int(rng.integers(0, 2 * memory + 1))))
    return _topology(*cells)


@pytest.mark.parametrize("seed", range(4))
def test_column_wise_fit_agrees_with_fit_host_by_host(seed):
    import numpy as np

    from nova_sched.capacity import RAM, VCPU

    rng = np.random.default_rng(seed)
    table = fakes.make_table([
        dict(host=f"h{i}", numa_topology=_random_topology(rng),
             node_cpu_ratio=float(rng.choice([0.0, 1.0, 1.5, 4.0])),
             node_ram_ratio=float(rng.choice([0.0, 1.0, 1.5])))
        for i in range(200)])
    rows = table.active_rows()
    for _ in range(20):
        nodes = int(rng.integers(1, 5))
        spec = fakes.make_spec(vcpus=nodes * int(rng.integers(1, 4)),
                               memory_mb=nodes * int(rng.choice([256, 512, 1024])),
                               extra_specs={"hw:numa_nodes": nodes})
        cycle = fakes.cycle(table, spec)
        ours = NUMATopologyFilter().filter_rows(cycle, rows)
        guests = numa.guest_cells(spec.vcpus, spec.memory_mb, spec.extra_specs, {})
        cpu = cycle.resources.ratio(VCPU, rows)
        ram = cycle.resources.ratio(RAM, rows)
        for i, row in enumerate(rows.tolist()):
            cells = numa.host_cells(table.states[row].numa_topology)
            expected = cells is not None and numa.fit(
                guests, cells, float(cpu[i]), float(ram[i])) is not None
            assert ours[i] == expected, (table.states[row].numa_topology, guests)


def test_a_guest_cell_never_overcommits_against_itself():
    # nova: a guest cell larger than the host cell fails whatever the ratio.
    CONF.set_override("cpu_allocation_ratio", 16.0, "filter_scheduler")
    CONF.set_override("ram_allocation_ratio", 16.0, "filter_scheduler")
    table = fakes.make_table([dict(host="h", numa_topology=_topology(
        _cell(0, 2, 2048), _cell(1, 2, 2048)))])
    assert _hosts(table, vcpus=4, memory_mb=2048, extra_specs={"hw:numa_nodes": 1}) == []
    assert _hosts(table, vcpus=2, memory_mb=4096, extra_specs={"hw:numa_nodes": 1}) == []
    assert _hosts(table, vcpus=2, memory_mb=2048, extra_specs={"hw:numa_nodes": 1}) == [
        "h"]


@pytest.mark.parametrize("topology", [
    None, {}, {"cells": []}, {"cells": "x"}, {"cells": [{"id": 0}]},
    {"cells": [{"id": 0, "cpus": 4, "memory_mb": 4096}]},
    {"cells": [{"id": 0, "cpus": [0, 1], "memory_mb": "lots"}]},
    {"cells": ["cell"]}, ["not", "a", "dict"],
])
def test_unusable_host_topology_fails_a_numa_request_without_error(topology):
    table = fakes.make_table([dict(host="h", numa_topology=topology)])
    assert _hosts(table, vcpus=1, memory_mb=512, extra_specs={"hw:numa_nodes": 1}) == []
    assert _hosts(table, vcpus=1, memory_mb=512) == ["h"]


@pytest.mark.parametrize("vcpus,memory_mb,extra,image,problem", [
    (3, 4096, {"hw:numa_nodes": "2"}, {}, "cannot be split evenly"),
    (4, 4095, {"hw:numa_nodes": "2"}, {}, "cannot be split evenly"),
    (4, 4096, {"hw:numa_nodes": "two"}, {}, "whole number"),
    (4, 4096, {"hw:numa_nodes": "0"}, {}, "at least 1"),
    (4, 4096, {"hw:numa_nodes": "-1"}, {}, "at least 1"),
    (4, 4096, {"hw:numa_nodes": "2"}, {"hw_numa_nodes": "2"}, "may not override"),
    (4, 4096, {"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-1", "hw:numa_cpus.1": "2-3"},
     {}, "must both be given"),
    (4, 4096, {"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-3", "hw:numa_mem.0": "4096"},
     {}, "must both be given"),
    (4, 4096, {"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-1", "hw:numa_mem.0": "2048",
               "hw:numa_cpus.1": "2-4", "hw:numa_mem.1": "2048"}, {}, "names CPU 4"),
    (4, 4096, {"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-2", "hw:numa_mem.0": "2048",
               "hw:numa_cpus.1": "2-3", "hw:numa_mem.1": "2048"}, {},
     "CPU 2 is in more than one"),
    (4, 4096, {"hw:numa_nodes": "2", "hw:numa_cpus.0": "0", "hw:numa_mem.0": "2048",
               "hw:numa_cpus.1": "1", "hw:numa_mem.1": "2048"}, {}, "[2, 3] are in no"),
    (4, 4096, {"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-1", "hw:numa_mem.0": "2048",
               "hw:numa_cpus.1": "2-3", "hw:numa_mem.1": "1024"}, {}, "add up to 3072"),
    (4, 4096, {"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-1", "hw:numa_mem.0": "2G",
               "hw:numa_cpus.1": "2-3", "hw:numa_mem.1": "2048"}, {}, "whole number of MB"),
    (4, 4096, {"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-x", "hw:numa_mem.0": "2048",
               "hw:numa_cpus.1": "2-3", "hw:numa_mem.1": "2048"}, {}, "not a CPU list"),
    (4, 4096, {"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-1", "hw:numa_mem.0": "2048",
               "hw:numa_cpus.1": "2-3", "hw:numa_mem.1": "2048"},
     {"hw_numa_cpus.0": "0-3"}, "may not override"),
])
def test_inconsistent_request_fails_clearly(vcpus, memory_mb, extra, image, problem):
    spec = fakes.make_spec(vcpus=vcpus, memory_mb=memory_mb, extra_specs=extra,
                           image_props=image)
    with pytest.raises(exception.InvalidRequestSpec) as err:
        fakes.passes(NUMATopologyFilter(), _table(), spec)
    assert err.value.message.startswith("Invalid request: NUMA topology request")
    assert problem in err.value.message


def test_cpu_spec_syntax():
    assert cpu_spec.parse_cpu_spec("0-3,^2,5") == {0, 1, 3, 5}
    assert cpu_spec.parse_cpu_spec(" 1 , 2 ") == {1, 2}
    assert cpu_spec.parse_cpu_spec("0-3,^1-2") == {0, 3}
    assert cpu_spec.parse_cpu_spec(3) == {3}
    for bad in ("3-1", "a", "1-", None):
        with pytest.raises(ValueError):
            cpu_spec.parse_cpu_spec(bad)


def test_fit_finds_a_matching_where_first_choice_blocks():
    guests = [numa.GuestCell(0, 1, 100), numa.GuestCell(1, 4, 100)]
    cells = [numa.HostCell(0, 4, 1000, 0, 0), numa.HostCell(1, 1, 1000, 0, 0)]
    assert numa.fit(guests, cells, 1.0, 1.0) == {0: 1, 1: 0}
