"""AvailabilityZoneFilter: the zone a request asks for, from aggregates."""

from __future__ import annotations

import numpy as np

from nova_sched.conf import CONF
from nova_sched.scheduler import filters


class AvailabilityZoneFilter(filters.BaseHostFilter):
    """Keep hosts in the requested availability zone.

    A host's zone comes from the ``availability_zone`` metadata of its
    aggregates; a host in no zoned aggregate is in
    ``[DEFAULT] default_availability_zone``. A request without a zone
    passes everywhere.
    """

    run_filter_once_per_request = True

    @staticmethod
    def _in_zone(zones: frozenset[str], wanted: str) -> bool:
        if zones:
            return wanted in zones
        return wanted == CONF.default_availability_zone

    def host_passes(self, host_state, spec) -> bool:
        if not spec.availability_zone:
            return True
        return self._in_zone(host_state.availability_zones, spec.availability_zone)

    def filter_all(self, table, rows, spec):
        wanted = spec.availability_zone
        if not wanted:
            return np.ones(len(rows), dtype=bool)
        codes = table.az_codes_matching(lambda zones: self._in_zone(zones, wanted))
        return np.isin(table.col("az_code")[rows], codes)
