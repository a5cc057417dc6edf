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

from nova_sched.scheduler import weights


class BuildFailureWeigher(weights.BaseHostWeigher):
    """nova's BuildFailureWeigher: the node's failed builds, weighed negatively."""

    multiplier_option = "build_failure_weight_multiplier"
    whole_numbers = True
    # nova negates the option (or the aggregates' smallest value): failures
    # count against a host while the option stays positive.
    multiplier_sign = -1.0

    def weigh_all(self, cycle, rows):
        return weights.column_weights(cycle, "failed_builds", rows)
