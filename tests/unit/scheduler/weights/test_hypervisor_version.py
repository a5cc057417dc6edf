"""HypervisorVersionWeigher: newer hypervisors first by default."""

from __future__ import annotations

import numpy as np
import pytest

from nova_sched.conf import CONF
from nova_sched.scheduler import weights
from nova_sched.scheduler.weights.hypervisor_version import HypervisorVersionWeigher
from tests.unit.scheduler import fakes


def _weigh(table):
    rows = table.active_rows()
    result = weights.HostWeightHandler.weigh([HypervisorVersionWeigher()],
                                             fakes.cycle(table, fakes.make_spec()), rows)
    return [table.states[r].host for r in result.rows], result


def _table(aggregates=()):
    # nova's hypervisor version weigher hosts.
    return fakes.make_table([
        dict(host="host1", hypervisor_version=1),
        dict(host="host2", hypervisor_version=200),
        dict(host="host3", hypervisor_version=100),
        dict(host="host4", hypervisor_version=1000),
    ], aggregates)


def test_default_prefers_the_newest():
    assert CONF.filter_scheduler.hypervisor_version_weight_multiplier == 1.0
    hosts, result = _weigh(_table())
    assert hosts == ["host4", "host2", "host3", "host1"]
    assert result.totals[0] == 1.0 and result.totals[-1] == 0.0
    np.testing.assert_allclose(result.totals, [1.0, 199 / 999, 99 / 999, 0.0])


def test_negative_multiplier_prefers_the_oldest():
    CONF.set_override("hypervisor_version_weight_multiplier", -1.0, "filter_scheduler")
    hosts, result = _weigh(_table())
    assert hosts == ["host1", "host3", "host2", "host4"]
    assert result.totals[0] == 0.0 and result.totals[-1] == -1.0


def test_zero_multiplier_disables():
    CONF.set_override("hypervisor_version_weight_multiplier", 0.0, "filter_scheduler")
    hosts, result = _weigh(_table())
    assert hosts == ["host1", "host2", "host3", "host4"]
    assert not result.totals.any()


def test_a_node_without_a_version_weighs_as_version_zero():
    table = _table()
    fakes.add_node(table, "unknown", hypervisor_version=None)
    hosts, result = _weigh(table)
    assert hosts[-1] == "unknown" and result.totals[-1] == 0.0
    raw = fakes.weigh(HypervisorVersionWeigher(), table, fakes.make_spec())
    assert raw.tolist() == [1, 200, 100, 1000, 0]


@pytest.mark.parametrize("metadata, expected", [
    ([{"hypervisor_version_weight_multiplier": "3"}], 3.0),
    ([{"hypervisor_version_weight_multiplier": "3"},
      {"hypervisor_version_weight_multiplier": "-1"}], -1.0),
    ([{"hypervisor_version_weight_multiplier": "newest"}], 1.0),
])
def test_aggregate_metadata_overrides_the_multiplier(metadata, expected):
    table = _table([dict(hosts=["host4"], metadata=m) for m in metadata])
    weigher = HypervisorVersionWeigher()
    assert weigher.weight_multiplier(fakes.state(table, "host4")) == expected
    assert weigher.weight_multiplier(fakes.state(table, "host2")) == 1.0
    hosts, result = _weigh(table)
    assert result.totals[hosts.index("host4")] == expected
