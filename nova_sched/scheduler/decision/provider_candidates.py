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
import functools
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
        self._last_asked: _Asked | None = None

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
        asked = self._asked(table, rows)
        search = candidates.search(self.model, question.requests, roots=asked.roots)
        cycle.placement = search
        if search.refused is not None:
            gone = np.ones(len(rows), dtype=bool)
            return rows[:0], [(f"{PLACEMENT_PREFIX}{search.refused}", rows, gone, len(rows))]
        keep = asked.keep(search)
        removals = []
        if not keep.all():
            for why, roots in search.removed_roots():
                # Which rows, only when asked (explain): counting is enough
                # for a reason and the metrics.
                removals.append((f"{PLACEMENT_PREFIX}{why}", rows,
                                 functools.partial(asked.mask_of, roots), len(roots)))
            unexplained = int((~keep).sum()) - sum(count for *_, count in removals)
            if unexplained > 0:
                # Nodes without a resource provider Placement knows.
                removals.append((f"{PLACEMENT_PREFIX}no resource provider", rows,
                                 functools.partial(_unexplained, keep, list(removals)),
                                 unexplained))
        return rows[keep], removals

    def _asked(self, table, rows: np.ndarray) -> "_Asked":
        """The rows' providers, kept while the table's rows and their uuids
        stay as they are (most decisions ask about every live row)."""
        asked = self._last_asked
        if asked is None or not asked.still(table, rows):
            asked = self._last_asked = _Asked(table, rows)
        return asked

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


class _Asked:
    """Host table rows as the candidate search asks about them: their
    providers' uuids and, per index of the model, their positions in it."""

    def __init__(self, table, rows: np.ndarray):
        self.table, self.rows = table, rows
        self.stamp = (table.size, table.uuids_changed)
        uuids = [table.states[r].uuid for r in rows.tolist()]
        self.position = {u: i for i, u in enumerate(uuids) if u}
        self.roots = [u for u in uuids if u]
        self._uuids = uuids
        self._index = None
        self._at: np.ndarray | None = None

    def still(self, table, rows: np.ndarray) -> bool:
        return (table is self.table and (table.size, table.uuids_changed) == self.stamp
                and (rows is self.rows or np.array_equal(rows, self.rows)))

    def mask_of(self, roots: list[str]) -> np.ndarray:
        """The rows of these providers, as a mask over the rows asked."""
        gone = np.zeros(len(self.rows), dtype=bool)
        gone[[self.position[u] for u in roots if u in self.position]] = True
        return gone

    def keep(self, search) -> np.ndarray:
        """Which rows have a candidate (a host of the search)."""
        mask = search.host_mask()
        index = search.contexts[0].index
        if index is not self._index:
            self._index = index
            self._at = np.fromiter((index.pos.get(u, -1) if u else -1 for u in self._uuids),
                                   dtype=np.int64, count=len(self._uuids))
        at = self._at
        return np.where(at >= 0, mask[np.maximum(at, 0)], False)


def _unexplained(keep: np.ndarray, explained: list) -> np.ndarray:
    """Rows without a candidate that no constraint accounts for."""
    left = ~keep
    for _, _, mask, _ in explained:
        left &= ~mask()
    return left
