"""AggregateTypeAffinityFilter: aggregates reserved for some flavors."""

from __future__ import annotations

from nova_sched.scheduler import filters
from nova_sched.scheduler.cloud import aggregate_metadata


class AggregateTypeAffinityFilter(filters.BaseHostFilter):
    """Hosts in aggregates with ``instance_type`` metadata take only those flavors.

    The metadata is a comma-separated list of flavor names; a host passes
    when the requested flavor's name is in the list of any of its
    aggregates, or when none of its aggregates has the key (nova's).
    """

    def filter_all(self, cycle, rows):
        name = cycle.spec.instance_type.get("name")

        def takes_flavor(values) -> bool:
            return not values or any(
                name in [part.strip() for part in value.split(",")]
                for value in values)

        return filters.by_aggregates(cycle, rows, "type_filter.instance_types",
                                     _instance_types, takes_flavor)


def _instance_types(aggs) -> frozenset[str]:
    """The ``instance_type`` values of a set of aggregates."""
    return frozenset(aggregate_metadata.values_for_key(aggs, "instance_type"))
