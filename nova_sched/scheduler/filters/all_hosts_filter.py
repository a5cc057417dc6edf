"""AllHostsFilter: a filter that keeps every host."""

from __future__ import annotations

import numpy as np

from nova_sched.scheduler import filters


class AllHostsFilter(filters.BaseHostFilter):
    """Pass every host (nova's no-op filter)."""

    run_filter_once_per_request = True

    def host_passes(self, host_state, spec) -> bool:
        return True

    def filter_all(self, table, rows, spec):
        return np.ones(len(rows), dtype=bool)
