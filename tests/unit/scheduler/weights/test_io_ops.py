"""IoOpsWeigher: nova's semantics (prefers idle hosts by default)."""

from __future__ import annotations

import numpy as np
import pytest

from nova_sched.conf import CONF
from nova_sched.scheduler import weights
from nova_sched.scheduler.weights.io_ops import IoOpsWeigher
from tests.unit.scheduler import fakes


def _weigh(table, rows=None):
    rows = table.active_rows() if rows is None else np.asarray(rows)
    result = weights.HostWeightHandler.weigh([IoOpsWeigher()],
                                             fakes.cycle(table, fakes.make_spec()), rows)
    return [table.states[r].host for r in result.rows], result


def _table(aggregates=()):
    # nova's io ops weigher hosts.
    return fakes.make_table([
        dict(host="host1", num_io_ops=1),
        dict(host="host2", num_io_ops=3),
        dict(host="host3", num_io_ops=6),
        dict(host="host4", num_io_ops=8),
    ], aggregates)


def test_default_multiplier_is_negative_and_prefers_idle_hosts():
    assert CONF.filter_scheduler.io_ops_weight_multiplier == -1.0
    hosts, result = _weigh(_table())
    assert hosts == ["host1", "host2", "host3", "host4"]
    # minval 0: the busiest host weighs -1, the rest in proportion.
    np.testing.assert_allclose(result.totals, [-1 / 8, -3 / 8, -6 / 8, -1.0])


def test_an_idle_host_weighs_zero():
    table = _table()
    fakes.add_node(table, "idle", num_io_ops=0)
    hosts, result = _weigh(table)
    assert hosts[0] == "idle" and result.totals[0] == 0.0


def test_positive_multiplier_prefers_busy_hosts():
    CONF.set_override("io_ops_weight_multiplier", 2.0, "filter_scheduler")
    hosts, result = _weigh(_table())
    assert hosts == ["host4", "host3", "host2", "host1"]
    assert result.totals[0] == 2.0


def test_zero_multiplier_keeps_filter_order():
    CONF.set_override("io_ops_weight_multiplier", 0.0, "filter_scheduler")
    table = _table()
    hosts, result = _weigh(table, table.active_rows()[[3, 0, 2, 1]])
    assert hosts == ["host4", "host1", "host3", "host2"]
    assert not result.totals.any()


def test_all_idle_hosts_tie():
    table = fakes.make_table([dict(host=f"h{i}") for i in range(3)])
    hosts, result = _weigh(table)
    assert hosts == ["h0", "h1", "h2"] and not result.totals.any()


@pytest.mark.parametrize("metadata, expected", [
    ([{"io_ops_weight_multiplier": "2"}], 2.0),
    # In several aggregates, the smallest value wins.
    ([{"io_ops_weight_multiplier": "3"}, {"io_ops_weight_multiplier": "1.5"}], 1.5),
    # A value that is not a number falls back to the option.
    ([{"io_ops_weight_multiplier": "fast"}], -1.0),
    # Other keys do not matter.
    ([{"ram_weight_multiplier": "5"}], -1.0),
])
def test_aggregate_metadata_overrides_the_multiplier(metadata, expected):
    aggs = [dict(hosts=["host1", "host4"], metadata=m) for m in metadata]
    table = _table(aggs)
    weigher = IoOpsWeigher()
    assert weigher.weight_multiplier(fakes.state(table, "host4")) == expected
    assert weigher.weight_multiplier(fakes.state(table, "host2")) == -1.0
    rows = table.active_rows()
    np.testing.assert_allclose(
        np.broadcast_to(weigher.multipliers(fakes.cycle(table, fakes.make_spec()), rows),
                        (4,)),
        [expected, -1.0, -1.0, expected])


def test_aggregate_override_turns_the_preference_for_its_hosts():
    table = _table([dict(hosts=["host4"], metadata={"io_ops_weight_multiplier": "1"})])
    hosts, result = _weigh(table)
    # host4 is the busiest: normalised 1.0, times its aggregate's +1.
    assert hosts[0] == "host4" and result.totals[0] == 1.0
    assert hosts[1:] == ["host1", "host2", "host3"]
