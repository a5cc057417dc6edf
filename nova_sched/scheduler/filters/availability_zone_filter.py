"""AvailabilityZoneFilter: the zone a request asks for, from aggregates."""

from __future__ import annotations

import numpy as np

from nova_sched.conf import CONF
from nova_sched.scheduler import aggregate_metadata, filters


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
            return np.ones(len(rows), dtype=bool)
        default = CONF.default_availability_zone

        def in_zone(aggs) -> bool:
            zones = aggregate_metadata.values_for_key(aggs, "availability_zone")
            return wanted in zones if zones else wanted == default

        return aggregate_metadata.mask(cycle.table, rows, in_zone)
