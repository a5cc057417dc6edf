"""AllHostsFilter: a filter that keeps every host."""

from __future__ import annotations

import numpy as np

from nova_sched.scheduler import filters


class AllHostsFilter(filters.BaseHostFilter):
    """Pass every host (nova's no-op filter)."""

    def filter_all(self, cycle, rows):
        return np.ones(len(rows), dtype=bool)
