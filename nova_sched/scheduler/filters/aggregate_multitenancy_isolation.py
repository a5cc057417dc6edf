"""AggregateMultiTenancyIsolation: aggregates reserved for some projects."""

from __future__ import annotations

import logging

from nova_sched.scheduler import aggregate_metadata, filters

LOG = logging.getLogger(__name__)

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

    # The aggregates and the project do not change within a request.
    run_filter_once_per_request = True

    @staticmethod
    def _allowed(host_state) -> set[str]:
        allowed: set[str] = set()
        for key, values in aggregate_metadata.metadata(host_state.aggregates).items():
            if key.startswith(_PREFIX):
                allowed.update(values)
        return allowed

    def _passes(self, host_state, project_id) -> bool:
        allowed = self._allowed(host_state)
        if allowed and project_id not in allowed:
            LOG.debug("%s fails tenant id on aggregate", host_state)
            return False
        return True

    def host_passes(self, host_state, spec) -> bool:
        return self._passes(host_state, spec.project_id)

    def filter_all(self, table, rows, spec):
        project_id = spec.project_id
        return aggregate_metadata.mask(table, rows, lambda st: self._passes(st, project_id))
