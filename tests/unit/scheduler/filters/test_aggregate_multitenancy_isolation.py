"""AggregateMultiTenancyIsolation: filter_tenant_id* metadata restricts projects."""

from __future__ import annotations

from nova_sched.scheduler.filters.aggregate_multitenancy_isolation import (
    AggregateMultiTenancyIsolation,
)
from tests.unit.scheduler import fakes


def _outcomes(project_id, aggregates, hosts=("host1", "host2")):
    """host -> passes for a request of ``project_id``."""
    table = fakes.make_table([dict(host=h) for h in hosts], aggregates=aggregates)
    spec = fakes.make_spec(project_id=project_id)
    flt = AggregateMultiTenancyIsolation()
    kept = {host for host, _ in fakes.passes(flt, table, spec)}
    return {table.states[r].host: table.states[r].host in kept
            for r in table.active_rows()}


def test_host_in_no_restricted_aggregate_takes_every_project():
    aggs = [dict(hosts={"host1"}, metadata={"availability_zone": "az1"})]
    assert _outcomes("anyone", aggs) == {"host1": True, "host2": True}
    assert _outcomes("anyone", []) == {"host1": True, "host2": True}


def test_listed_project_passes_others_fail():
    aggs = [dict(hosts={"host1"}, metadata={"filter_tenant_id": "my_tenantid"})]
    assert _outcomes("my_tenantid", aggs) == {"host1": True, "host2": True}
    assert _outcomes("other", aggs) == {"host1": False, "host2": True}


def test_comma_separated_projects():
    aggs = [dict(hosts={"host1"}, metadata={"filter_tenant_id": "p1, my_tenantid,p3"})]
    assert _outcomes("my_tenantid", aggs)["host1"]
    assert _outcomes("p3", aggs)["host1"]
    assert not _outcomes("p2", aggs)["host1"]


def test_every_key_with_the_prefix_adds_projects():
    # nova's test_aggregate_multi_tenancy_isolation_with_prefix.
    aggs = [dict(hosts={"host1"}, metadata={
        "filter_tenant_id": "my_tenantid",
        "filter_tenant_id_gr1": "my_tenantid1,my_tenantid2",
        "filter_tenant_id_gr2": "my_tenantid5,my_tenantid4"})]
    assert _outcomes("my_tenantid", aggs)["host1"]
    assert _outcomes("my_tenantid2", aggs)["host1"]
    assert _outcomes("my_tenantid4", aggs)["host1"]
    assert not _outcomes("my_tenantid6", aggs)["host1"]


def test_projects_of_all_the_hosts_aggregates_are_allowed_together():
    aggs = [dict(hosts={"host1", "host2"}, metadata={"filter_tenant_id": "a"}),
            dict(hosts={"host1"}, metadata={"filter_tenant_id2": "b"})]
    assert _outcomes("a", aggs) == {"host1": True, "host2": True}
    assert _outcomes("b", aggs) == {"host1": True, "host2": False}
    assert _outcomes("c", aggs) == {"host1": False, "host2": False}


def test_an_unrestricted_aggregate_does_not_open_a_restricted_host():
    aggs = [dict(hosts={"host1"}, metadata={"filter_tenant_id": "a"}),
            dict(hosts={"host1", "host2"}, metadata={"ssd": "true"})]
    assert _outcomes("b", aggs) == {"host1": False, "host2": True}


def test_request_without_a_project_fails_restricted_hosts():
    aggs = [dict(hosts={"host1"}, metadata={"filter_tenant_id": "a"})]
    assert _outcomes(None, aggs) == {"host1": False, "host2": True}
