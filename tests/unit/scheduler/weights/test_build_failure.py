"""BuildFailureWeigher: hosts failing builds sink below all others."""

from __future__ import annotations

import numpy as np
import pytest

from nova_sched.conf import CONF
from nova_sched.scheduler import weights
from nova_sched.scheduler.weights.build_failure import BuildFailureWeigher
from nova_sched.scheduler.weights.cpu import CPUWeigher
from nova_sched.scheduler.weights.disk import DiskWeigher
from nova_sched.scheduler.weights.ram import RAMWeigher
from tests.unit.scheduler import fakes


def _weigh(table, weighers=None):
    rows = table.active_rows()
    result = weights.HostWeightHandler.weigh(weighers or [BuildFailureWeigher()],
                                             fakes.cycle(table, fakes.make_spec()), rows)
    return [table.states[r].host for r in result.rows], result


def _table(aggregates=()):
    # nova's build failure weigher hosts.
    return fakes.make_table([
        dict(host="host1", stats={"failed_builds": 0}),
        dict(host="host2", stats={"failed_builds": 1}),
        dict(host="host3", stats={"failed_builds": 10}),
        dict(host="host4", stats={"failed_builds": 100}),
    ], aggregates)


def test_scaled_weights_as_nova():
    CONF.set_override("build_failure_weight_multiplier", 1000.0, "filter_scheduler")
    hosts, result = _weigh(_table())
    assert hosts == ["host1", "host2", "host3", "host4"]
    # nova's test_build_failure_weigher_scaled: failures count against a host.
    np.testing.assert_allclose(result.totals, [0, -10, -100, -1000])


def test_disabled_with_zero_multiplier():
    CONF.set_override("build_failure_weight_multiplier", 0.0, "filter_scheduler")
    _, result = _weigh(_table())
    assert not result.totals.any()


def test_default_multiplier_sinks_a_failing_host_below_all_others():
    assert CONF.filter_scheduler.build_failure_weight_multiplier == 1e6
    table = fakes.make_table([
        # The best host by every other measure, with one failed build...
        dict(host="big", memory_mb=65536, vcpus=64, local_gb=2000,
             stats={"failed_builds": "1"}),
        # ...against small, busy hosts without failures.
        dict(host="small", memory_mb=1024, vcpus=1, local_gb=10,
             claimed_memory_mb=900),
        dict(host="tiny", memory_mb=512, vcpus=1, local_gb=5),
    ])
    hosts, _ = _weigh(table, [RAMWeigher(), CPUWeigher(), DiskWeigher(),
                              BuildFailureWeigher()])
    assert hosts[-1] == "big"
    # Without failures it would have won.
    fakes.add_node(table, "big", memory_mb=65536, vcpus=64, local_gb=2000,
                   stats={"failed_builds": 0})
    hosts, _ = _weigh(table, [RAMWeigher(), CPUWeigher(), DiskWeigher(),
                              BuildFailureWeigher()])
    assert hosts[0] == "big"


def test_no_failures_anywhere_weighs_nothing():
    table = fakes.make_table([dict(host="a"),
                              dict(host="b", stats={"failed_builds": 0})])
    _, result = _weigh(table)
    assert not result.totals.any()


@pytest.mark.parametrize("stats, expected", [
    ({}, 0),
    ({"failed_builds": 3}, 3),
    ({"failed_builds": "7"}, 7),  # nova's stats values are strings
    ({"failed_builds": None}, 0),
    ({"failed_builds": "many"}, 0),
    ({"failed_builds": [1]}, 0),
    ({"failed_builds": -4}, 0),
    ({"failed_builds": float("inf")}, 0),
])
def test_failed_builds_from_stats(stats, expected):
    table = fakes.make_table([dict(host="h", stats=stats)])
    assert fakes.state(table, "h").failed_builds == expected
    assert fakes.weigh(BuildFailureWeigher(), table, fakes.make_spec()).tolist() == [
        expected]


def test_multiplier_is_the_option_negated():
    table = _table()
    weigher = BuildFailureWeigher()
    assert weigher.weight_multiplier() == -1e6
    assert weigher.weight_multiplier(fakes.state(table, "host1")) == -1e6
    cycle = fakes.cycle(table, fakes.make_spec())
    assert weigher.multipliers(cycle, table.active_rows()) == -1e6


def test_aggregate_metadata_overrides_the_multiplier_negated():
    # nova's test_build_failure_weight_multiplier.
    CONF.set_override("build_failure_weight_multiplier", 0.0, "filter_scheduler")
    one = dict(hosts=["host1"], metadata={"build_failure_weight_multiplier": "1000.0"})
    two = dict(hosts=["host1"], metadata={"build_failure_weight_multiplier": "500"})
    weigher = BuildFailureWeigher()
    table = _table([one])
    assert weigher.weight_multiplier(fakes.state(table, "host1")) == -1000
    assert weigher.weight_multiplier(fakes.state(table, "host2")) == 0.0
    # The smallest of the aggregates' values wins (before negation).
    table = _table([one, two])
    assert weigher.weight_multiplier(fakes.state(table, "host1")) == -500
    # A value that is not a number falls back to the option.
    table = _table([dict(hosts=["host1"],
                         metadata={"build_failure_weight_multiplier": "lots"})])
    assert weigher.weight_multiplier(fakes.state(table, "host1")) == 0.0


def test_host_with_aggregate():
    # nova's test_host_with_agg: the option is 0, the aggregate says 1000.
    CONF.set_override("build_failure_weight_multiplier", 0.0, "filter_scheduler")
    table = _table([dict(hosts=["host1", "host2", "host3", "host4"],
                         metadata={"build_failure_weight_multiplier": "1000"})])
    _, result = _weigh(table)
    np.testing.assert_allclose(result.totals, [0, -10, -100, -1000])


def test_an_aggregate_disabling_the_weigher_ranks_its_hosts_with_clean_ones():
    # The failing host in an aggregate with multiplier 0 ties with the host
    # without failures, not with the worst one (nova's sign convention).
    table = fakes.make_table([
        dict(host="clean", stats={"failed_builds": 0}),
        dict(host="forgiven", stats={"failed_builds": 5}),
        dict(host="failing", stats={"failed_builds": 5}),
    ], [dict(hosts=["forgiven"], metadata={"build_failure_weight_multiplier": "0"})])
    hosts, result = _weigh(table)
    assert hosts == ["clean", "forgiven", "failing"]
    np.testing.assert_allclose(result.totals, [0.0, 0.0, -1e6])


def test_a_successful_build_resets_the_count_and_the_host_recovers():
    table = _table()
    hosts, _ = _weigh(table)
    assert hosts[-1] == "host4"
    # The compute node reports failed_builds 0 after a successful build.
    fakes.add_node(table, "host4", stats={"failed_builds": 0})
    hosts, result = _weigh(table)
    assert hosts[:2] == ["host1", "host4"]
    assert result.totals[0] == result.totals[1] == 0.0
