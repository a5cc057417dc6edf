"""Driver choices: host_subset_size, the chance driver, loading by name."""

from __future__ import annotations

import collections

import pytest

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.db import compute_nodes as db_nodes
from nova_sched.scheduler import compute_report, driver, request
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
