"""NumInstancesWeigher: off by default; negative spreads, positive packs."""

from __future__ import annotations

import numpy as np
import pytest

from nova_sched.conf import CONF
from nova_sched.scheduler import weights
from nova_sched.scheduler.weights.num_instances import NumInstancesWeigher
from nova_sched.scheduler.weights.ram import RAMWeigher
from tests.unit.scheduler import fakes


def _weigh(table, weighers=None):
    rows = table.active_rows()
    result = weights.HostWeightHandler.weigh(weighers or [NumInstancesWeigher()],
                                             fakes.cycle(table, fakes.make_spec()), rows)
    return [table.states[r].host for r in result.rows], result


def _table(aggregates=()):
    return fakes.make_table([
        dict(host="host1", num_instances=3, memory_mb=1024),
        dict(host="host2", num_instances=0, memory_mb=2048),
        dict(host="host3", num_instances=10, memory_mb=8192),
        dict(host="host4", num_instances=5, memory_mb=4096),
    ], aggregates)


def test_default_multiplier_is_zero_and_changes_nothing():
    assert CONF.filter_scheduler.num_instances_weight_multiplier == 0.0
    hosts, result = _weigh(_table())
    assert hosts == ["host1", "host2", "host3", "host4"]
    assert not result.totals.any()
    # Beside another weigher it adds nothing.
    hosts, _ = _weigh(_table(), [RAMWeigher(), NumInstancesWeigher()])
    assert hosts == ["host3", "host4", "host2", "host1"]


def test_negative_multiplier_prefers_emptier_hosts():
    CONF.set_override("num_instances_weight_multiplier", -1.0, "filter_scheduler")
    hosts, result = _weigh(_table())
    assert hosts == ["host2", "host1", "host4", "host3"]
    # No minval: scaled between the emptiest and the fullest candidate.
    np.testing.assert_allclose(result.totals, [0.0, -0.3, -0.5, -1.0])


def test_positive_multiplier_packs():
    CONF.set_override("num_instances_weight_multiplier", 2.0, "filter_scheduler")
    hosts, result = _weigh(_table())
    assert hosts == ["host3", "host4", "host1", "host2"]
    np.testing.assert_allclose(result.totals, [2.0, 1.0, 0.6, 0.0])


@pytest.mark.parametrize("metadata, expected", [
    ([{"num_instances_weight_multiplier": "-2"}], -2.0),
    ([{"num_instances_weight_multiplier": "1"},
      {"num_instances_weight_multiplier": "-0.5"}], -0.5),
    ([{"num_instances_weight_multiplier": ""}], 0.0),
])
def test_aggregate_metadata_overrides_the_multiplier(metadata, expected):
    table = _table([dict(hosts=["host3"], metadata=m) for m in metadata])
    weigher = NumInstancesWeigher()
    assert weigher.weight_multiplier(fakes.state(table, "host3")) == expected
    assert weigher.weight_multiplier(fakes.state(table, "host1")) == 0.0
    hosts, result = _weigh(table)
    # Only host3 (the fullest, normalised 1.0) is weighed.
    assert result.totals[hosts.index("host3")] == expected
    assert not np.delete(result.totals, hosts.index("host3")).any()
