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

from nova_sched.scheduler import aggregate_metadata, weights


class BuildFailureWeigher(weights.BaseHostWeigher):
    multiplier_option = "build_failure_weight_multiplier"

    def _configured_multiplier(self) -> float:
        return -super()._configured_multiplier()

    def weight_multiplier(self, host_state=None) -> float:
        """The option, or the host's aggregates' smallest value, negated."""
        return -aggregate_metadata.host_value(
            host_state, self._metadata_key, -self._configured_multiplier())

    def _weigh_object(self, host_state, spec) -> float:
        return host_state.failed_builds

    def weigh_all(self, table, rows, spec):
        return table.col("failed_builds")[rows]
