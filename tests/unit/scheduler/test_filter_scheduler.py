"""Driver choices: host_subset_size, the chance driver, loading by name."""

from __future__ import annotations

import collections

import pytest

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.db import compute_nodes as db_nodes
from nova_sched.scheduler import driver
from nova_sched.scheduler.cloud import compute_report
from nova_sched.scheduler.wire import request
from nova_sched.scheduler.chance import ChanceScheduler
from nova_sched.scheduler.filter_scheduler import FilterScheduler
from nova_sched.scheduler.host_manager import HostManager
from tests.unit.scheduler.conftest import boot_request, choose, place
from tests.unit.scheduler.conftest import compute_report as report


def _cloud(sizes):
    for host, ram in sizes.items():
        db_nodes.upsert_report(compute_report.validate(
            report(host, memory_mb=ram, vcpus=64, local_gb=10000)))
    hm = HostManager()
    hm.full_resync()
    return hm


def _choose(drv, **kw):
    return choose(drv, request.parse(boot_request(memory_mb=64, **kw), {})).host


def test_host_subset_size_one_always_takes_the_best(db):
    CONF.set_override("weight_classes", ["RAMWeigher"], group="filter_scheduler")
    drv = FilterScheduler(_cloud({"a": 65536, "b": 32768, "c": 16384}))
    assert {_choose(drv) for _ in range(5)} == {"a"}


def test_host_subset_size_picks_among_the_best_only(db):
    CONF.set_override("weight_classes", ["RAMWeigher"], group="filter_scheduler")
    CONF.set_override("host_subset_size", 2, group="filter_scheduler")
    drv = FilterScheduler(_cloud({"a": 655360, "b": 655350, "c": 16384, "d": 8192}))
    seen = collections.Counter(_choose(drv) for _ in range(60))
    assert set(seen) == {"a", "b"}  # never the two worst


def test_multi_instance_request_sees_its_own_consumption(db):
    CONF.set_override("weight_classes", ["RAMWeigher"], group="filter_scheduler")
    CONF.set_override("ram_allocation_ratio", 1.0, group="filter_scheduler")
    drv = FilterScheduler(_cloud({"a": 2048, "b": 1536}))
    spec = request.parse(boot_request(memory_mb=1024, count=3), {})
    hosts = [place(drv, spec, u).host for u in spec.instance_uuids]
    # a (2048 free) then b (1536 > 1024 left on a) then a.
    assert hosts == ["a", "b", "a"]
    with pytest.raises(exception.NoValidHost):
        place(drv, request.parse(boot_request(memory_mb=1024), {}), "x")


def test_chance_scheduler_spreads_randomly_over_live_hosts(db):
    hm = _cloud({"a": 65536, "b": 1024, "c": 1024})
    drv = ChanceScheduler(hm)
    seen = collections.Counter(_choose(drv) for _ in range(60))
    assert set(seen) == {"a", "b", "c"}


def test_load_driver_by_alias_dotted_path_and_havana_name(db):
    hm = HostManager()
    assert isinstance(driver.load_driver("chance_scheduler", hm), ChanceScheduler)
    assert isinstance(driver.load_driver(
        "nova_sched.scheduler.filter_scheduler.FilterScheduler", hm), FilterScheduler)
    assert isinstance(driver.load_driver(
        "nova.scheduler.chance.ChanceScheduler", hm), ChanceScheduler)
    for bad in ("no_such_scheduler", "nova_sched.nothing.Here",
                "nova_sched.scheduler.host_manager.HostManager"):
        with pytest.raises(exception.ConfigurationError):
            driver.load_driver(bad, hm)


# -- decisions over an in-memory table (no database) --------------------------

def _scheduler(nodes, weighers=("RAMWeigher",), filters=("RamFilter",)):
    from tests.unit.scheduler import fakes

    CONF.set_override("enabled_filters", list(filters), group="filter_scheduler")
    CONF.set_override("weight_classes", list(weighers), group="filter_scheduler")
    hm = HostManager()
    hm.table = fakes.make_table(nodes)
    return FilterScheduler(hm)


def _decide(drv, **spec):
    from nova_sched.scheduler.decision.cycle_state import CycleState
    from tests.unit.scheduler import fakes

    return drv.decide(CycleState(spec=fakes.make_spec(**spec)))


def _hosts(decision, rows):
    return [decision.cycle.table.states[int(r)].host for r in rows]


def test_sampling_is_off_by_default():
    drv = _scheduler([dict(host=f"h{i}", memory_mb=1000 + i) for i in range(300)])
    decision = _decide(drv)
    assert len(decision.weighed.candidates) == 300
    assert _hosts(decision, [decision.order[0]]) == ["h299"]
    assert "sampling" not in decision.summary()


def test_max_hosts_to_score_weighs_a_rotating_window_of_the_passing_hosts():
    # h0..h29: every third one too small for the request.
    drv = _scheduler([dict(host=f"h{i:02d}", memory_mb=512 if i % 3 == 0 else 4096 + i)
                      for i in range(30)])
    CONF.set_override("max_hosts_to_score", 5, group="filter_scheduler")
    feasible = [f"h{i:02d}" for i in range(30) if i % 3]
    seen: list[str] = []
    for turn in range(8):
        decision = _decide(drv, memory_mb=1024)
        window = _hosts(decision, decision.weighed.candidates)
        assert len(window) == 5
        # The next five passing hosts, after the previous window, wrapping.
        start = (5 * turn) % len(feasible)
        assert window == [feasible[(start + k) % len(feasible)] for k in range(5)]
        # The best of the window (most free RAM) is chosen; not the cloud's best.
        best = max(window, key=lambda h: int(h[1:]))
        assert _hosts(decision, [decision.order[0]]) == [best]
        assert decision.selection(0).host == best
        seen += window
    # Every passing host is weighed in turn.
    assert set(seen) == set(feasible)
    summary = decision.summary()
    assert [h["host"] for h in summary["hosts"]] == sorted(window,
                                                           key=lambda h: -int(h[1:]))
    sampling = summary["sampling"]
    assert sampling["feasible"] == 20 and sampling["weighed"] == 5
    left_out = sorted(set(feasible) - set(window))
    assert sorted(h for h, _ in sampling["not_weighed"]) == left_out
    # Filters still judged every host.
    assert decision.reason() == "20/30 hosts available: RamFilter removed 10"


def test_percentage_of_hosts_to_score_never_samples_fewer_than_a_hundred():
    from nova_sched.scheduler.filter_scheduler import hosts_to_score

    CONF.set_override("percentage_of_hosts_to_score", 10, group="filter_scheduler")
    assert [hosts_to_score(n) for n in (0, 50, 100, 999, 1000, 5000, 100_000)] == [
        0, 50, 100, 100, 100, 500, 10_000]
    CONF.set_override("max_hosts_to_score", 300, group="filter_scheduler")
    assert [hosts_to_score(n) for n in (50, 1000, 5000, 100_000)] == [50, 100, 300, 300]
    # Never fewer than host_subset_size picks from.
    CONF.set_override("host_subset_size", 400, group="filter_scheduler")
    assert hosts_to_score(100_000) == 400
    assert hosts_to_score(350) == 350


def test_a_sample_is_weighed_as_those_hosts_alone_would_be():
    from nova_sched.scheduler.weights import HostWeightHandler

    nodes = [dict(host=f"h{i:03d}", memory_mb=2048 + (i * 37) % 500,
                  num_io_ops=i % 4) for i in range(200)]
    drv = _scheduler(nodes, weighers=("RAMWeigher", "IoOpsWeigher"))
    CONF.set_override("max_hosts_to_score", 30, group="filter_scheduler")
    for _ in range(10):
        decision = _decide(drv)
        sample = decision.weighed.candidates
        alone = HostWeightHandler.weigh(drv.weighers, decision.cycle, sample)
        assert decision.weighed.rows.tolist() == alone.rows.tolist()
        assert [int(decision.order[p]) for p in range(30)] == alone.rows.tolist()


def test_a_claim_lost_moves_on_to_the_next_candidates_in_weighed_order():
    drv = _scheduler([dict(host=f"h{i:03d}", memory_mb=1000 + (i * 7919) % 1000)
                      for i in range(400)])
    decision = _decide(drv)
    expected = _hosts(decision, decision.weighed.rows)
    # The order is read further than it was first sorted.
    assert [decision.selection(p).host for p in range(len(decision.order))] == expected


def test_host_subset_size_moves_a_pick_of_the_best_to_the_front():
    drv = _scheduler([dict(host=f"h{i}", memory_mb=1000 + i) for i in range(50)])
    CONF.set_override("host_subset_size", 3, group="filter_scheduler")
    firsts = set()
    for _ in range(60):
        decision = _decide(drv)
        order = _hosts(decision, [decision.order[p] for p in range(len(decision.order))])
        firsts.add(order[0])
        rest = [h for h in ["h49", "h48", "h47"] if h != order[0]]
        assert order[1:3] == rest and order[3:] == [f"h{i}" for i in range(46, -1, -1)]
    assert firsts == {"h49", "h48", "h47"}


def test_filters_asked_host_by_host_see_only_the_hosts_left():
    from nova_sched.scheduler import filters
    from nova_sched.scheduler.decision.cycle_state import CycleState
    from tests.unit.scheduler import fakes

    asked = []

    class Recording(filters.BaseHostFilter):
        def host_passes(self, host_state, spec):
            asked.append(host_state.host)
            return host_state.host != "h3"

    from nova_sched.scheduler.filters.ram_filter import RamFilter
    from nova_sched.scheduler.filters.retry_filter import RetryFilter

    table = fakes.make_table([dict(host=f"h{i}", memory_mb=4096 if i % 2 else 10)
                              for i in range(8)])
    spec = fakes.make_spec(memory_mb=1024, retry_hosts=[("h5", "h5")])
    result = filters.HostFilterHandler.run(
        [RetryFilter(), RamFilter(), Recording(), RamFilter()],
        CycleState(spec=spec, table=table), table.active_rows())
    assert asked == ["h1", "h3", "h7"]
    assert [table.states[r].host for r in result.rows] == ["h1", "h7"]
    removed = [(name, [table.states[r].host for r in rows])
               for name, rows in result.removed]
    assert removed == [("RetryFilter", ["h5"]), ("RamFilter", ["h0", "h2", "h4", "h6"]),
                       ("Recording", ["h3"]), ("RamFilter", [])]
    assert result.removed_counts() == [("RetryFilter", 1), ("RamFilter", 4),
                                       ("Recording", 1)]


def test_a_filter_with_nothing_to_judge_keeps_every_host_between_others():
    from nova_sched.scheduler import filters
    from nova_sched.scheduler.decision.cycle_state import CycleState
    from nova_sched.scheduler.filters.ram_filter import RamFilter
    from nova_sched.scheduler.filters.retry_filter import RetryFilter
    from tests.unit.scheduler import fakes

    table = fakes.make_table([dict(host=f"h{i}", memory_mb=4096 if i % 2 else 10)
                              for i in range(6)])
    spec = fakes.make_spec(memory_mb=1024)  # a first attempt: no retry to judge
    cycle = CycleState(spec=spec, table=table)
    retry = RetryFilter()
    cycle.prepare([retry])
    assert not retry.filter_rows(cycle, table.active_rows()).strides[0], (
        "nothing made for a filter with nothing to judge")
    result = filters.HostFilterHandler.run(
        [RamFilter(), retry, RetryFilter(), RamFilter()], cycle, table.active_rows())
    assert [table.states[r].host for r in result.rows] == ["h1", "h3", "h5"]
    removed = [(name, [table.states[r].host for r in rows])
               for name, rows in result.removed]
    assert removed == [("RamFilter", ["h0", "h2", "h4"]), ("RetryFilter", []),
                       ("RetryFilter", []), ("RamFilter", [])]
