"""AggregateInstanceExtraSpecsFilter: the flavor's extra specs against aggregate metadata."""

from __future__ import annotations

from nova_sched.scheduler import filters
from nova_sched.scheduler.cloud import aggregate_metadata
from nova_sched.scheduler.filters import extra_specs_ops

_SCOPE = "aggregate_instance_extra_specs"


class AggregateInstanceExtraSpecsFilter(filters.BaseHostFilter):
    """Hosts whose aggregates' metadata satisfies the flavor's extra specs (nova's).

    A key scoped ``aggregate_instance_extra_specs:`` or unscoped (no colon)
    is looked up in the metadata of the host's aggregates; keys of any
    other scope (``capabilities:``, ``hw:``...) are skipped. The key must be
    present, and at least one of its values (every aggregate's, each split
    at commas) must match the spec under extra_specs_ops. A flavor without
    extra specs passes every host.
    """

    def prepare(self, cycle) -> tuple:
        """The flavor's requirements: (metadata key, spec, compiled matcher)."""
        parsed = []
        for key, req in cycle.spec.extra_specs.items():
            scope = str(key).split(":", 1)
            if len(scope) > 1:
                if scope[0] != _SCOPE:
                    continue
                del scope[0]
            parsed.append((scope[0], req, extra_specs_ops.matcher(req)))
        return tuple(parsed)

    def filter_all(self, cycle, rows):
        reqs = cycle.prepared(self)
        if not reqs:
            return filters.everyone(rows)

        def satisfies(metadata) -> bool:
            return all(any(check(value) for value in metadata.get(key, ()))
                       for key, _, check in reqs)

        return filters.by_aggregates(cycle, rows, filters.MERGED_METADATA,
                                     aggregate_metadata.metadata, satisfies)
