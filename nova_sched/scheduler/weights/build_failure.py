"""BuildFailureWeigher: by the builds a host failed recently.

Compute nodes report ``stats['failed_builds']``, the builds that failed
since their last successful one (a success resets it to 0). As in nova the
weigher measures the failures and applies ``build_failure_weight_multiplier``
negated, so with the default of 1000000.0 a host that failed builds sinks
below every host that did not, whatever the other weighers say. A host
aggregate's ``build_failure_weight_multiplier`` metadata overrides the
option for its hosts (the smallest value winning), and is negated the same
way; 0 disables the weigher.
"""

from __future__ import annotations

import numpy as np

from nova_sched.scheduler import aggregate_metadata, weights


def failed_builds(host_state) -> int:
    """``stats['failed_builds']`` as a count; 0 when absent or not a number."""
    stats = host_state.stats
    count = stats.get("failed_builds") if isinstance(stats, dict) else None
    if count.__class__ is not int:
        try:
            count = int(count or 0)
        except (TypeError, ValueError, OverflowError):
            return 0
    return count if count > 0 else 0


class BuildFailureWeigher(weights.BaseHostWeigher):
    multiplier_option = "build_failure_weight_multiplier"

    def _configured_multiplier(self) -> float:
        return -super()._configured_multiplier()

    def weight_multiplier(self, host_state=None) -> float:
        """The option, or the host's aggregates' smallest value, negated."""
        default = self._configured_multiplier()
        if host_state is None:
            return default
        key = self._metadata_key
        values = aggregate_metadata.values_for_key(host_state.aggregates, key)
        return -aggregate_metadata.min_number(values, -default, float, key)

    def _weigh_object(self, host_state, spec) -> float:
        return failed_builds(host_state)

    def weigh_all(self, table, rows, spec):
        states = table.states
        return np.fromiter((failed_builds(states[r]) for r in rows.tolist()),
                           dtype=np.float64, count=len(rows))
