"""AggregateInstanceExtraSpecsFilter: the flavor's extra specs against aggregate metadata."""

from __future__ import annotations

import logging

import numpy as np

from nova_sched.scheduler import aggregate_metadata, filters
from nova_sched.scheduler.filters import extra_specs_ops

LOG = logging.getLogger(__name__)

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

    # The flavor and the aggregates do not change within a request.
    run_filter_once_per_request = True

    def __init__(self):
        # (spec, its extra_specs dict, parsed requirements) of the last request.
        self._parsed: tuple = (None, None, ())

    def _requirements(self, spec) -> tuple:
        cached_spec, cached_specs, reqs = self._parsed
        if cached_spec is spec and cached_specs is spec.extra_specs:
            return reqs
        parsed = []
        for key, req in spec.extra_specs.items():
            scope = str(key).split(":", 1)
            if len(scope) > 1:
                if scope[0] != _SCOPE:
                    continue
                del scope[0]
            parsed.append((scope[0], req, extra_specs_ops.matcher(req)))
        reqs = tuple(parsed)
        self._parsed = (spec, spec.extra_specs, reqs)
        return reqs

    def _satisfies(self, host_state, reqs) -> bool:
        metadata = aggregate_metadata.metadata(host_state.aggregates)
        for key, req, check in reqs:
            values = metadata.get(key)
            if not values:
                LOG.debug("%s fails flavor extra spec %s: not in its aggregates",
                          host_state, key)
                return False
            if not any(check(value) for value in values):
                LOG.debug("%s fails flavor extra spec %s: %s do not match %r",
                          host_state, key, sorted(values), req)
                return False
        return True

    def host_passes(self, host_state, spec) -> bool:
        reqs = self._requirements(spec)
        return not reqs or self._satisfies(host_state, reqs)

    def filter_all(self, table, rows, spec):
        reqs = self._requirements(spec)
        if not reqs:
            return np.ones(len(rows), dtype=bool)
        return aggregate_metadata.mask(table, rows, lambda state: self._satisfies(state, reqs))
