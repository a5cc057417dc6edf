"""ResourceView over most of a large table: whole-table arithmetic, block by
block, kept for the decision, gives the numbers the per-row arithmetic
gives (tables larger than a block, rows in any order, aggregates setting
ratios, nodes with their own ratios)."""

from __future__ import annotations

import numpy as np
import pytest

from nova_sched.capacity import RESOURCES
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
