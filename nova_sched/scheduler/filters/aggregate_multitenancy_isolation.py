"""AggregateMultiTenancyIsolation: aggregates reserved for some projects."""

from __future__ import annotations

from nova_sched.scheduler import filters
from nova_sched.scheduler.cloud import aggregate_metadata

_PREFIX = "filter_tenant_id"


class AggregateMultiTenancyIsolation(filters.BaseHostFilter):
    """Hosts in aggregates with ``filter_tenant_id*`` metadata take only those projects.

    As in today's nova: every metadata key that starts with
    ``filter_tenant_id`` (``filter_tenant_id``, ``filter_tenant_id_gr1``...)
    lists project ids, comma-separated; the ids of all the host's aggregates
    together are the projects the host accepts, so a host also in an
    aggregate without such keys is still restricted. A host in no aggregate
    with such keys accepts every project.
    """

    def filter_all(self, cycle, rows):
        project_id = cycle.spec.project_id
        return filters.by_aggregates(
            cycle, rows, "aggregate_multitenancy_isolation.allowed", _allowed,
            lambda allowed: not allowed or project_id in allowed)


def _allowed(aggs) -> frozenset[str]:
    """The projects a set of aggregates accepts (empty: every project)."""
    allowed: set[str] = set()
    for key, values in aggregate_metadata.metadata(aggs).items():
        if key.startswith(_PREFIX):
            allowed.update(values)
    return frozenset(allowed)
