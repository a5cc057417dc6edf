"""AvailabilityZoneFilter: the zone a request asks for, from aggregates."""

from __future__ import annotations

from nova_sched.conf import CONF
from nova_sched.scheduler import filters
from nova_sched.scheduler.cloud import aggregate_metadata


class AvailabilityZoneFilter(filters.BaseHostFilter):
    """Keep hosts in the requested availability zone.

    A host's zone comes from the ``availability_zone`` metadata of its
    aggregates; a host in no zoned aggregate is in
    ``[DEFAULT] default_availability_zone``. A request without a zone
    passes everywhere.
    """

    def filter_all(self, cycle, rows):
        wanted = cycle.spec.availability_zone
        if not wanted:
            return filters.everyone(rows)
        default = CONF.default_availability_zone

        def in_zone(zones) -> bool:
            return wanted in zones if zones else wanted == default

        return filters.by_aggregates(cycle, rows, "availability_zone_filter.zones",
                                     _zones, in_zone)


def _zones(aggs) -> frozenset[str]:
    """The zones a set of aggregates puts its hosts in."""
    return frozenset(aggregate_metadata.values_for_key(aggs, "availability_zone"))
