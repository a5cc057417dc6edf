"""The resource model: filters and the claim guard judge a node alike.

The property test builds random fleets in the database (capacities,
reservations, claims, the nodes' own ratios), random aggregates with
ratios, random options and a random choice of RamFilter/CoreFilter/
DiskFilter or their Aggregate* variants, then asks both sides about every
node: the filters over the host cache loaded from that database, and the
guarded UPDATE of a real claim with the ratios the decision used. On an
idle cloud (nothing else claiming) they must agree exactly.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nova_sched import exception
from nova_sched.capacity import DISK, RAM, VCPU
from nova_sched.conf import CONF
from nova_sched.db import aggregates as db_aggregates
from nova_sched.db import api as db_api
from nova_sched.db import compute_nodes as db_nodes
from nova_sched.db import models
from nova_sched.scheduler.cloud import compute_report
from nova_sched.scheduler.claims import Claim, DatabaseClaims
from nova_sched.scheduler.decision.cycle_state import CycleState
from nova_sched.scheduler.filters.core_filter import AggregateCoreFilter, CoreFilter
from nova_sched.scheduler.filters.disk_filter import AggregateDiskFilter, DiskFilter
from nova_sched.scheduler.filters.ram_filter import AggregateRamFilter, RamFilter
from nova_sched.scheduler.host_manager import HostManager
from tests import db_backends
from tests.unit.scheduler import fakes
from tests.unit.scheduler.conftest import compute_report as report

RATIOS = st.sampled_from([0.5, 0.7, 1.0, 1.2, 1.5, 2.0, 3.3, 16.0])
OWN_RATIO = st.one_of(st.none(), st.just(0.0), RATIOS)

NODE = st.fixed_dictionaries({
    "memory_mb": st.integers(0, 8192),
    "vcpus": st.integers(0, 16),
    "local_gb": st.integers(0, 200),
    "reserved_host_memory_mb": st.integers(0, 1024),
    "reserved_host_cpus": st.integers(0, 4),
    "reserved_host_disk_mb": st.integers(0, 4096),
    "ram_allocation_ratio": OWN_RATIO,
    "cpu_allocation_ratio": OWN_RATIO,
    "disk_allocation_ratio": OWN_RATIO,
    # Claimed so far, as a share of the physical total: near the limits.
    "used": st.sampled_from([0.0, 0.5, 0.9, 1.0, 1.1, 1.5, 2.0, 3.0]),
    "slack": st.integers(-2, 2),
})
AGGREGATE = st.fixed_dictionaries({
    "members": st.lists(st.integers(0, 5), max_size=6),
    "metadata": st.dictionaries(
        st.sampled_from(["ram_allocation_ratio", "cpu_allocation_ratio",
                         "disk_allocation_ratio"]),
        st.one_of(RATIOS.map(str), st.just("lots")), max_size=3),
})
CASE = st.fixed_dictionaries({
    "nodes": st.lists(NODE, min_size=1, max_size=6),
    "aggregates": st.lists(AGGREGATE, max_size=3),
    "options": st.tuples(RATIOS, RATIOS, RATIOS),
    "aggregate_filters": st.tuples(st.booleans(), st.booleans(), st.booleans()),
    "request": st.tuples(st.integers(0, 4096), st.integers(0, 8), st.integers(0, 40),
                         st.integers(0, 10), st.integers(0, 2048)),
})


def _reset_tables():
    with db_api.session_scope() as s:
        for model in (models.Allocation, models.AggregateMetadata,
                      models.AggregateHost, models.Aggregate, models.ComputeNode,
                      models.Service):
            s.execute(sa.delete(model))
        s.execute(sa.update(models.ChangeCounter).values(value=models.ChangeCounter.value + 1))


def _store(case) -> dict[str, int]:
    """Write the case's fleet and aggregates; host name -> node id."""
    ids = {}
    for number, node in enumerate(case["nodes"]):
        host = f"n{number}"
        figures = {k: v for k, v in node.items() if k not in ("used", "slack")}
        # A report reserving more than the node has is refused as nonsense.
        figures["reserved_host_memory_mb"] = min(figures["reserved_host_memory_mb"],
                                                 figures["memory_mb"])
        figures["reserved_host_cpus"] = min(figures["reserved_host_cpus"],
                                            figures["vcpus"])
        figures["reserved_host_disk_mb"] = min(figures["reserved_host_disk_mb"],
                                               figures["local_gb"] * 1024)
        ids[host] = db_nodes.upsert_report(compute_report.validate(report(host, **figures)))
        claimed = {
            "claimed_memory_mb": node["memory_mb"] * node["used"] + node["slack"],
            "claimed_vcpus": node["vcpus"] * node["used"] + node["slack"],
            "claimed_disk_mb": node["local_gb"] * 1024 * node["used"] + node["slack"],
        }
        with db_api.session_scope() as s:
            s.execute(sa.update(models.ComputeNode).where(
                models.ComputeNode.id == ids[host]).values(
                **{k: max(0, int(v)) for k, v in claimed.items()}))
    for number, agg in enumerate(case["aggregates"]):
        name = f"agg{number}"
        db_aggregates.create(name)
        for member in sorted(set(agg["members"])):
            if member < len(case["nodes"]):
                db_aggregates.add_host(name, f"n{member}")
        if agg["metadata"]:
            db_aggregates.set_metadata(name, agg["metadata"])
    return ids


def _configure(case):
    ram, cpu, disk = case["options"]
    CONF.set_override("ram_allocation_ratio", ram, "filter_scheduler")
    CONF.set_override("cpu_allocation_ratio", cpu, "filter_scheduler")
    CONF.set_override("disk_allocation_ratio", disk, "filter_scheduler")
    by_aggregate = case["aggregate_filters"]
    filters = [
        (AggregateRamFilter if by_aggregate[0] else RamFilter)(),
        (AggregateCoreFilter if by_aggregate[1] else CoreFilter)(),
        (AggregateDiskFilter if by_aggregate[2] else DiskFilter)(),
    ]
    CONF.set_override("enabled_filters", [f.name() for f in filters] + ["ComputeFilter"],
                      "filter_scheduler")
    return filters


def _check_agreement(case):
    _reset_tables()
    filters = _configure(case)
    ids = _store(case)
    hm = HostManager()
    hm.full_resync()
    memory_mb, vcpus, root_gb, ephemeral_gb, swap = case["request"]
    spec = fakes.make_spec(memory_mb=memory_mb, vcpus=vcpus, root_gb=root_gb,
                           ephemeral_gb=ephemeral_gb, swap=swap)
    table = hm.table
    rows = table.active_rows()
    cycle = CycleState(spec=spec, table=table)
    passes = np.ones(len(rows), dtype=bool)
    for flt in filters:
        passes &= flt.filter_rows(cycle, rows)
    store = DatabaseClaims()
    for i, row in enumerate(rows):
        state = table.states[row]
        claim = Claim(str(uuid.uuid4()), ids[state.host], spec.memory_mb, spec.vcpus,
                      spec.disk_mb, ratios=cycle.resources.ratios_at(int(row)))
        try:
            store.claim(claim)
            taken = True
        except exception.ClaimFailed:
            taken = False
        physical = (spec.memory_mb <= state.total_usable_ram_mb
                    and spec.vcpus <= state.vcpus_total
                    and spec.disk_mb <= state.total_usable_disk_gb * 1024)
        # The filters add nova's "never larger than the node" rule.
        assert bool(passes[i]) == (taken and physical), (
            state.host, case, cycle.resources.ratios_at(int(row)))
        if taken:
            store.release([claim.instance_uuid])


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(case=CASE)
def test_filters_and_the_claim_guard_agree_on_sqlite(db, case):
    _check_agreement(case)


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_filters_and_the_claim_guard_agree_on_server_databases(kind):
    with db_backends.server_scheduler_database(kind):

        @settings(max_examples=40, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow])
        @given(case=CASE)
        def check(case):
            _check_agreement(case)

        check()


# -- the rule, case by case ---------------------------------------------------
def _view(**node):
    table = fakes.make_table([dict(host="h1", **node)])
    return fakes.cycle(table, fakes.make_spec()).resources, np.array([0])


def test_a_nodes_own_ratio_beats_aggregates_and_the_option():
    CONF.set_override("enabled_filters", ["AggregateRamFilter"], "filter_scheduler")
    CONF.set_override("ram_allocation_ratio", 1.0, "filter_scheduler")
    table = fakes.make_table(
        [dict(host="own", memory_mb=1000, node_ram_ratio=2.5),
         dict(host="agg", memory_mb=1000), dict(host="plain", memory_mb=1000)],
        aggregates=[{"hosts": ["own", "agg"],
                     "metadata": {"ram_allocation_ratio": "4.0"}}])
    view = fakes.cycle(table, fakes.make_spec()).resources
    rows = np.array([table.row_of(h, h) for h in ("own", "agg", "plain")])
    assert view.ratio(RAM, rows).tolist() == [2.5, 4.0, 1.0]
    assert view.limit(RAM, rows).tolist() == [2500.0, 4000.0, 1000.0]


def test_aggregates_set_a_ratio_only_while_their_filter_runs():
    CONF.set_override("enabled_filters", ["RamFilter", "AggregateCoreFilter"],
                      "filter_scheduler")
    table = fakes.make_table(
        [dict(host="h1", memory_mb=1000, vcpus=4)],
        aggregates=[{"hosts": ["h1"], "metadata": {"ram_allocation_ratio": "4.0",
                                                    "cpu_allocation_ratio": "2.0"}}])
    view = fakes.cycle(table, fakes.make_spec()).resources
    rows = np.array([0])
    assert view.ratio(RAM, rows)[0] == CONF.filter_scheduler.ram_allocation_ratio
    assert view.ratio(VCPU, rows)[0] == 2.0


def test_limits_free_and_unclaimed():
    CONF.set_override("disk_allocation_ratio", 2.0, "filter_scheduler")
    view, rows = _view(local_gb=10, reserved_disk_mb=1024, claimed_disk_mb=4096)
    assert view.limit(DISK, rows)[0] == 10 * 1024 * 2.0 - 1024
    assert view.free(DISK, rows)[0] == 10 * 1024 * 2.0 - 1024 - 4096
    assert view.unclaimed(DISK, rows)[0] == 10 * 1024 - 1024 - 4096
    assert view.compute_limits(DISK, 0) == {"disk_gb": 20.0}


def test_a_node_without_vcpus_fits_no_instance_that_needs_one():
    view, rows = _view(vcpus=0, memory_mb=1024)
    assert not view.fits(VCPU, rows, 1)[0]
    assert view.fits(VCPU, rows, 0)[0]


def _fleet(count=100, **node):
    """Enough nodes that a decision works out every row's figures at once
    (those the host table keeps across decisions)."""
    return fakes.make_table([dict(host=f"h{n}", memory_mb=4096, vcpus=8, **node)
                             for n in range(count)])


def _fitting(table, memory_mb):
    spec = fakes.make_spec(memory_mb=memory_mb)
    rows = table.active_rows()
    return int(np.count_nonzero(fakes.cycle(table, spec).resources.fits(RAM, rows, memory_mb)))


def test_limits_kept_across_decisions_follow_every_change_of_capacity():
    """What each node can hand out is kept from one decision to the next,
    and never outlives a report that changes a node's figures, a node
    leaving, aggregates or the ratio option."""
    CONF.set_override("ram_allocation_ratio", 1.0, "filter_scheduler")
    CONF.set_override("enabled_filters", ["AggregateRamFilter"], "filter_scheduler")
    table = _fleet()
    assert _fitting(table, 4096) == 100
    # A report with the same figures, then one with less memory.
    table.update_row(0, {"memory_mb": 4096.0, "reserved_memory_mb": 0.0})
    assert _fitting(table, 4096) == 100
    table.update_row(0, {"memory_mb": 2048.0})
    table.update_row(1, {"reserved_memory_mb": 1.0})
    assert _fitting(table, 4096) == 98
    assert _fitting(table, 2048) == 100
    # Half of every node claimed: a node's own ratio, the option's, then
    # an aggregate's decide who takes 3000 MB more.
    for row in range(100):
        table.update_row(row, {"claimed_memory_mb": 2048.0})
    assert _fitting(table, 3000) == 0
    table.update_row(2, {"node_ram_ratio": 2.0})
    assert _fitting(table, 3000) == 1
    CONF.set_override("ram_allocation_ratio", 2.0, "filter_scheduler")
    assert _fitting(table, 3000) == 99      # h0 is smaller than that
    fakes.add_node(table, "h3", memory_mb=4096, vcpus=8, node_ram_ratio=0.5)
    assert _fitting(table, 3000) == 98
    table.set_aggregates([fakes.AggregateInfo(
        id=1, name="small", hosts=frozenset({"h4", "h5"}),
        metadata={"ram_allocation_ratio": "0.5"})])
    assert _fitting(table, 3000) == 96
    # The smallest node leaving: every node left is larger than the instance.
    table.deactivate(0)
    assert _fitting(table, 3000) == 96
    table.update_row(7, {"memory_mb": 1024.0})
    assert _fitting(table, 3000) == 95


def test_capacity_derived_results_are_worked_out_again_only_on_change():
    table = _fleet(count=3)
    computed = []

    def smallest():
        computed.append(1)
        return float(table.col("memory_mb").min())

    assert table.capacity_derived("smallest", smallest) == 4096.0
    table.update_row(1, {"memory_mb": 4096.0, "claimed_memory_mb": 512.0,
                         "num_instances": 1, "service_updated": 5.0})
    assert table.capacity_derived("smallest", smallest) == 4096.0
    assert len(computed) == 1   # claims and heartbeats are not capacity
    table.update_row(1, {"memory_mb": 1024.0})
    assert table.capacity_derived("smallest", smallest) == 1024.0
    fakes.add_node(table, "h9", memory_mb=512, vcpus=1)
    assert table.capacity_derived("smallest", smallest) == 512.0
    assert len(computed) == 3
