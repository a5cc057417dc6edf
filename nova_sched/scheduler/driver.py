"""The driver interface: a decision over the host table, and loading by name.

A driver decides; it does not claim, record or cast (the scheduling cycle
does, ``scheduler.decision.cycle``). ``decide(cycle)`` prepares the driver's
plugins for the decision, then, holding the host table's lock, filters and
weighs the live nodes and returns a ``Decision``: the candidates in the
order they should be tried, with the diagnosis of what each filter removed.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler.decision import loadables
from nova_sched.scheduler.decision.cycle_state import CycleState
from nova_sched.scheduler.filters import FilterResult
from nova_sched.scheduler.weights import Ranking, WeighResult

DRIVER_ALIASES = {
    "filter_scheduler": "nova_sched.scheduler.filter_scheduler.FilterScheduler",
    "chance_scheduler": "nova_sched.scheduler.chance.ChanceScheduler",
    # Havana's dotted names, so an old nova.conf keeps working.
    "nova.scheduler.filter_scheduler.FilterScheduler":
        "nova_sched.scheduler.filter_scheduler.FilterScheduler",
    "nova.scheduler.chance.ChanceScheduler":
        "nova_sched.scheduler.chance.ChanceScheduler",
}


@dataclasses.dataclass
class Selection:
    """A node chosen for an instance, with what the compute node must know.

    ``ratios`` are the allocation ratios the decision judged the node by;
    the claim is guarded with them.
    """

    host: str
    nodename: str
    node_id: int
    limits: dict
    weight: float = 0.0
    ratios: dict = dataclasses.field(default_factory=dict)
    # What today's nova's Selection object carries besides.
    node_uuid: str | None = None
    availability_zone: str | None = None
    cell_uuid: str | None = None
    # What a caller would send to claim this node itself (Placement's
    # allocation_request), when the claim store can say.
    allocation_request: dict | None = None
    # The Placement allocation candidate the node is claimed with
    # (placement_model.candidates.AllocationCandidate), when the decision
    # asked Placement's model.
    candidate: object | None = None

    def to_dict(self) -> dict:
        return {"host": self.host, "nodename": self.nodename, "limits": self.limits}


@dataclasses.dataclass
class Decision:
    """Candidates of one decision in the order to try them, and why others lost.

    ``order`` is a sequence of table rows (a ``weights.Ranking``, or an
    array for drivers that shuffle): the first is the choice, the rest the
    fallbacks when a claim is lost and the alternates returned to callers.
    With candidate sampling, ``weighed`` holds the sampled hosts only.
    """

    cycle: CycleState
    filtered: FilterResult
    weighed: WeighResult
    order: Sequence
    driver: "Scheduler"

    def reason(self) -> str:
        return self.filtered.reason()

    def selection(self, position: int) -> Selection:
        """The candidate at ``position`` of the order, ready to claim."""
        row = int(self.order[position])
        if isinstance(self.order, Ranking):
            weight = self.order.weight(position)
        else:
            where = np.flatnonzero(self.weighed.candidates == row)
            weight = float(self.weighed.weights[where[0]]) if len(where) else 0.0
        return self.driver.selection(self.cycle, row, weight)

    def alternates(self, count: int) -> list[Selection]:
        """Up to ``count`` candidates after the choice, of the choice's cell
        only: conductor reschedules a build within the cell it was sent to
        and skips alternates of another (nova's scheduler keeps them out)."""
        if count <= 0 or len(self.order) < 2:
            return []
        codes = self.cycle.table.col("cell_code")
        cell = codes[int(self.order[0])]
        picked: list[Selection] = []
        for position in range(1, len(self.order)):
            if codes[int(self.order[position])] == cell:
                picked.append(self.selection(position))
                if len(picked) == count:
                    break
        return picked

    def summary(self) -> dict:
        """``explain``'s answer: survivors in weighed order, removals per filter
        and, when only a sample of the survivors was weighed, the others."""
        states = self.cycle.table.states
        contributions = self.weighed.contributions
        totals = self.weighed.totals
        hosts = [{
            "host": states[row].host,
            "nodename": states[row].nodename,
            "weight": float(totals[i]),
            "weights": {name: float(share[i]) for name, share
                        in contributions.items()},
        } for i, row in enumerate(self.weighed.rows.tolist())]
        removed = {name: [[states[r].host, states[r].nodename] for r in rows.tolist()]
                   for name, rows in self.filtered.removed}
        summary = {"hosts": hosts, "removed": removed, "reason": self.reason()}
        feasible = self.filtered.rows
        if len(self.weighed.candidates) < len(feasible):
            left_out = feasible[~np.isin(feasible, self.weighed.candidates)]
            summary["sampling"] = {
                "feasible": len(feasible),
                "weighed": len(self.weighed.candidates),
                "not_weighed": [[states[r].host, states[r].nodename]
                                for r in left_out.tolist()],
            }
        return summary


class Scheduler:
    """Base class of scheduler drivers: ``decide`` over the host table."""

    def __init__(self, host_manager):
        self.host_manager = host_manager

    def decide(self, cycle: CycleState) -> Decision:
        """Filter and weigh the live nodes for the cycle's instance."""
        raise NotImplementedError

    def limits(self, cycle: CycleState, row: int) -> dict:
        """nova's ``limits`` for the compute node chosen at ``row``."""
        return {}

    def selection(self, cycle: CycleState, row: int, weight: float = 0.0
                  ) -> Selection:
        """The node at ``row`` of ``cycle.table``, ready to claim and cast."""
        state = cycle.table.states[row]
        zones = state.availability_zones
        return Selection(host=state.host, nodename=state.nodename,
                         node_id=state.node_id, limits=self.limits(cycle, row),
                         weight=weight, ratios=cycle.resources.ratios_at(row),
                         node_uuid=state.uuid, cell_uuid=state.cell_uuid,
                         candidate=cycle.allocation_candidate(row),
                         availability_zone=(min(zones) if zones
                                            else CONF.default_availability_zone))


def load_driver(name: str, host_manager) -> Scheduler:
    """The driver named by ``[scheduler] driver``; ConfigurationError if unknown."""
    path = DRIVER_ALIASES.get(name, name)
    if "." not in path:
        raise exception.ConfigurationError(
            f"unknown scheduler driver {name!r}; use filter_scheduler, "
            "chance_scheduler or a dotted class path"
        )
    cls = loadables.import_object(path)
    if not (isinstance(cls, type) and issubclass(cls, Scheduler)):
        raise exception.ConfigurationError(f"{name} is not a scheduler driver class")
    return cls(host_manager)
