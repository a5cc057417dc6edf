"""AggregateTypeAffinityFilter: aggregates reserved for some flavors."""

from __future__ import annotations

import logging

from nova_sched.scheduler import aggregate_metadata, filters

LOG = logging.getLogger(__name__)


class AggregateTypeAffinityFilter(filters.BaseHostFilter):
    """Hosts in aggregates with ``instance_type`` metadata take only those flavors.

    The metadata is a comma-separated list of flavor names; a host passes
    when the requested flavor's name is in the list of any of its
    aggregates, or when none of its aggregates has the key (nova's).
    """

    # The aggregates and the flavor do not change within a request.
    run_filter_once_per_request = True

    @staticmethod
    def _passes(host_state, flavor_name) -> bool:
        values = aggregate_metadata.values_for_key(host_state.aggregates, "instance_type")
        for value in values:
            if flavor_name in [name.strip() for name in value.split(",")]:
                return True
        if values:
            LOG.debug("%s fails: flavor %s not in its aggregates' instance_type %s",
                      host_state, flavor_name, sorted(values))
        return not values

    def host_passes(self, host_state, spec) -> bool:
        return self._passes(host_state, spec.instance_type.get("name"))

    def filter_all(self, table, rows, spec):
        name = spec.instance_type.get("name")
        return aggregate_metadata.mask(table, rows, lambda st: self._passes(st, name))
