"""RetryFilter: skip nodes this instance was already tried on."""

from __future__ import annotations

import numpy as np

from nova_sched.scheduler import filters


class RetryFilter(filters.BaseHostFilter):
    """Remove the [host, node] pairs listed in ``retry['hosts']``."""

    # The retry list grows between instances of one request only in the
    # filter_properties of each instance, so it must run every time.
    run_filter_once_per_request = False

    @staticmethod
    def _tried(spec) -> set[tuple[str, str]]:
        retry = spec.retry
        if not retry:
            return set()
        return {(h, n) for h, n in retry.get("hosts", [])}

    def host_passes(self, host_state, spec) -> bool:
        return (host_state.host, host_state.nodename) not in self._tried(spec)

    def filter_all(self, table, rows, spec):
        tried = self._tried(spec)
        mask = np.ones(len(rows), dtype=bool)
        if not tried:
            return mask
        tried_rows = [table.index[k] for k in tried if k in table.index]
        if tried_rows:
            mask &= ~np.isin(rows, tried_rows)
        return mask
