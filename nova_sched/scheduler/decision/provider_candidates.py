"""A decision's Placement step: the hosts Placement would offer, asked of its model.

nova-scheduler asks Placement ``GET /allocation_candidates`` before any
filter runs and keeps only the hosts whose compute node provider takes
part in a candidate; the claim is then one of that host's candidates. This
step does the same without leaving the process: the request becomes the
resource request nova builds (``placement_model.request_builder``) after
nova's request filters (``placement_model.request_filters``), and the
host source's copy of Placement's tables answers it
(``placement_model.candidates.search``).

It runs when the host source offers a ``provider_model`` (nova's cells
with ``[placement_database] connection``); other sources judge capacity
by their filters alone, as before. Preparing (building the question) runs
before the host table's lock; narrowing (the search, over the live rows)
under it, like the filters. What it removed is reported per constraint in
Placement's terms, so a NoValidHost says which trait, class or aggregate
ruled the hosts out.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

import numpy as np

from nova_sched import exception
from nova_sched.scheduler.filters import PLACEMENT_PREFIX
from nova_sched.scheduler.placement_model import candidates, request_builder, request_filters

if TYPE_CHECKING:
    from nova_sched.scheduler.decision.cycle_state import CycleState
    from nova_sched.scheduler.placement_model.providers import ProviderModel
    from nova_sched.scheduler.placement_model.resource_request import ResourceRequest

LOG = logging.getLogger(__name__)

@dataclasses.dataclass
class Question:
    """What one decision asks Placement's model: nova's resource requests
    (two with nova's PCPU fallback), or why nova would not ask at all."""

    requests: list["ResourceRequest"]
    refused: str | None = None


class ProviderCandidates:
    """The step, for the host manager's source (no-op without a provider model)."""

    def __init__(self, host_manager):
        self.host_manager = host_manager

    @property
    def model(self) -> "ProviderModel | None":
        return getattr(self.host_manager.source, "provider_model", None)

    def prepare(self, cycle: "CycleState") -> Question | None:
        """nova's resource request for the cycle's request (outside the lock)."""
        spec = cycle.spec
        if self.model is None or spec.is_rebuild:
            # A rebuild moves nothing: nova asks Placement nothing for it.
            return None
        try:
            requests = request_builder.build(spec, node_uuids=self._node_uuids)
            requests = request_filters.run(spec, requests, self._filter_context())
        except exception.NoValidHost as err:
            # nova's own refusals (ResourceRequestRefused, a request filter's
            # RequestFilterFailed): no host is asked.
            return Question([], refused=err.reason)
        return Question(requests)

    def narrow(self, cycle: "CycleState", rows: np.ndarray
               ) -> tuple[np.ndarray, list]:
        """The rows with a candidate, and per constraint what it removed
        (``FilterResult.removals`` entries). Called under the table's lock."""
        question: Question | None = cycle.prepared(self)
        if question is None:
            return rows, []
        table = cycle.table
        if question.refused is not None:
            cycle.placement = None
            gone = np.ones(len(rows), dtype=bool)
            return rows[:0], [(f"{PLACEMENT_PREFIX}{question.refused}", rows, gone, len(rows))]
        uuids = [table.states[r].uuid for r in rows.tolist()]
        search = candidates.search(self.model, question.requests,
                                   roots=[u for u in uuids if u])
        cycle.placement = search
        if search.refused is not None:
            gone = np.ones(len(rows), dtype=bool)
            return rows[:0], [(f"{PLACEMENT_PREFIX}{search.refused}", rows, gone, len(rows))]
        hosts = search.hosts()
        keep = np.fromiter((u in hosts for u in uuids), dtype=bool, count=len(uuids))
        removals = []
        if not keep.all():
            position = {u: i for i, u in enumerate(uuids) if u}
            for why, roots in search.removed_roots():
                gone = np.zeros(len(rows), dtype=bool)
                gone[[position[u] for u in roots if u in position]] = True
                removals.append((f"{PLACEMENT_PREFIX}{why}", rows, gone, int(gone.sum())))
            unexplained = ~keep
            for _, _, gone, _ in removals:
                unexplained &= ~gone
            if unexplained.any():
                # Nodes without a resource provider Placement knows.
                removals.append((f"{PLACEMENT_PREFIX}no resource provider", rows,
                                 unexplained, int(unexplained.sum())))
        return rows[keep], removals

    def _node_uuids(self, host: str | None, node: str | None) -> list[str]:
        """The providers of a requested destination's nodes (nova's ``in_tree``)."""
        table = self.host_manager.table
        rows = (table.host_rows.get(host, ()) if host is not None
                else range(table.size))
        return [table.states[r].uuid for r in rows
                if table.states[r].uuid
                and (node is None or table.states[r].nodename == node)]

    def _filter_context(self) -> request_filters.RequestFilterContext:
        source = self.host_manager.source
        return request_filters.RequestFilterContext(
            aggregates=list(self.host_manager.table.aggregates),
            min_compute_version=source.min_compute_version())
