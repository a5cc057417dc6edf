"""ResourceView over most of a large table: whole-table arithmetic, block by
block, kept for the decision, gives the numbers the per-row arithmetic
gives (tables larger than a block, rows in any order, aggregates setting
ratios, nodes with their own ratios)."""

from __future__ import annotations

import numpy as np
import pytest

from nova_sched.capacity import RAM, RESOURCES
from nova_sched.conf import CONF
from nova_sched.scheduler.cloud import resources
from nova_sched.scheduler.cloud.resources import ResourceView
from tests.unit.scheduler import fakes


@pytest.mark.parametrize("aggregates", [False, True])
def test_whole_table_figures_equal_the_rows_own(aggregates):
    rng = np.random.default_rng(7)
    size = 2 * resources._BLOCK + 1234
    table = fakes.make_table(aggregates=[dict(hosts={"h1", "h5"}, metadata={
        "cpu_allocation_ratio": "4.0", "ram_allocation_ratio": "0.5"})])
    for i in range(size):
        fakes.add_node(table, host=f"h{i}", memory_mb=int(rng.integers(0, 9000)),
                       vcpus=int(rng.integers(0, 64)), disk_mb=int(rng.integers(0, 10**6)),
                       reserved_memory_mb=int(rng.integers(0, 600)) if i % 3 else 0,
                       claimed_memory_mb=int(rng.integers(0, 12000)),
                       claimed_vcpus=int(rng.integers(0, 900)),
                       claimed_disk_mb=int(rng.integers(0, 10**6)),
                       node_cpu_ratio=float(rng.choice([0.0, 0.0, 1.5])))
    if aggregates:
        CONF.set_override("enabled_filters", ["AggregateCoreFilter", "AggregateRamFilter"],
                          "filter_scheduler")
    everyone = table.active_rows()
    most = rng.permutation(everyone)[: size - 100]
    for rows in (everyone, most):
        view, alone = ResourceView(table), ResourceView(table)
        for resource in RESOURCES:
            for amount in (0, 1, 512, 5000):
                expected = np.concatenate([alone.fits(resource, rows[i:i + 40], amount)
                                           for i in range(0, len(rows), 40)])
                np.testing.assert_array_equal(view.fits(resource, rows, amount), expected)
            for figure in ("limit", "free", "unclaimed"):
                whole = getattr(view, figure)(resource, rows)
                per_row = np.concatenate([getattr(alone, figure)(resource, rows[i:i + 40])
                                          for i in range(0, len(rows), 40)])
                np.testing.assert_array_equal(whole, per_row)


def test_every_row_is_read_in_place_and_cannot_be_written_through():
    table = fakes.make_table([dict(host=f"h{i}", memory_mb=1024 * (i + 1))
                              for i in range(80)])
    rows = table.active_rows()
    assert rows is table.every_row()
    figures = ResourceView(table).total(RAM, rows)
    # No copy of the column: the table's own numbers, which a filter or a
    # weigher must not be able to change.
    assert np.shares_memory(figures, table.col("memory_mb"))
    with pytest.raises(ValueError):
        figures[0] = 0
    np.testing.assert_array_equal(figures, 1024 * np.arange(1, 81))
    free = ResourceView(table).free(RAM, rows)
    with pytest.raises(ValueError):
        free += 1


def test_rows_left_after_a_deletion_are_gathered():
    table = fakes.make_table([dict(host=f"h{i}", memory_mb=1024 * (i + 1))
                              for i in range(80)])
    table.deactivate(3)
    rows = table.active_rows()
    assert rows is not table.every_row() and 3 not in rows
    figures = ResourceView(table).total(RAM, rows)
    np.testing.assert_array_equal(figures, 1024 * (rows + 1))
    figures[0] = 0  # a copy of its own
    assert table.col("memory_mb")[0] == 1024


def test_figures_stay_whole_numbers_up_to_two_to_the_53():
    # Kept in float64 for the arithmetic: a node as large as a report may
    # describe still fits exactly what it has, and no more.
    big = 2**53 - 2
    table = fakes.make_table([dict(host="h1", memory_mb=big, claimed_memory_mb=big - 1)])
    CONF.set_override("ram_allocation_ratio", 1.0, "filter_scheduler")
    view, rows = ResourceView(table), table.active_rows()
    assert view.fits(RAM, rows, 1).tolist() == [True]
    assert view.fits(RAM, rows, 2).tolist() == [False]
    assert fakes.state(table, "h1").free_ram_mb == 1


def test_a_node_reported_again_after_its_deletion_is_a_candidate_again():
    table = fakes.make_table([dict(host=f"h{i}", memory_mb=1024) for i in range(8)])
    table.deactivate(3)
    assert 3 not in table.active_rows()
    row = table.row_of("h3", "h3")
    table.update_row(row, {"memory_mb": 2048, "active": True})
    assert table.active_rows() is table.every_row()
    fakes.add_node(table, host="h5", memory_mb=1024, active=False)
    assert 5 not in table.active_rows()
    fakes.add_node(table, host="h5", memory_mb=1024)
    assert table.active_rows() is table.every_row()


def test_a_ratio_a_node_reports_later_applies_to_the_next_decision():
    # The table starts with no node reporting its own ratio; one figure
    # update later sets one, and the next view's limits follow it.
    table = fakes.make_table([dict(host=f"h{i}", memory_mb=1000) for i in range(4)])
    CONF.set_override("ram_allocation_ratio", 1.0, "filter_scheduler")
    rows = table.active_rows()
    assert ResourceView(table).limit(RAM, rows).tolist() == [1000.0] * 4
    table.update_row(table.row_of("h2", "h2"), {"node_ram_ratio": 2.5})
    assert ResourceView(table).limit(RAM, rows).tolist() == [1000.0, 1000.0, 2500.0, 1000.0]
