"""What one decision knows: kube-scheduler's CycleState, for nova's filters.

A decision is made for one instance of one request. Before any host is
asked, every filter and weigher gets to ``prepare`` what it needs from the
request (a compiled JSON query, PCI and NUMA requests, where the instances
a hint names are, ...); the results live here, with the request's server
group context and the resource figures, and are dropped when the decision
ends. Nothing about a request is kept in module globals or in plugin
objects, so concurrent decisions and consecutive requests cannot see each
other's state.
"""

from __future__ import annotations

import contextvars
import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np

from nova_sched.scheduler.cloud import aggregate_metadata
from nova_sched.scheduler.cloud import resources as cloud_resources
from nova_sched.scheduler.cloud.resources import ResourceView

if TYPE_CHECKING:
    from nova_sched.scheduler.cloud.host_state import HostTable
    from nova_sched.scheduler.wire.request import RequestSpec
    from nova_sched.scheduler.decision.server_groups import GroupContext

# The decision asking a plugin host by host right now (custom plugins get
# only nova's (host_state, spec)); a context variable, so that concurrent
# decisions in other threads never see it.
_ASKING: contextvars.ContextVar["CycleState | None"] = contextvars.ContextVar(
    "nova_sched_asking_cycle", default=None)


@dataclasses.dataclass
class CycleState:
    """The request, the instance and what was prepared for this decision.

    ``table`` is the host table the decision reads (set while the decision
    holds the table's lock); ``group`` the request's server group with
    where its members are, or None.
    """

    spec: "RequestSpec"
    instance_uuid: str | None = None
    group: "GroupContext | None" = None
    table: "HostTable | None" = None
    # uuid -> host of instances (the host source's): where the instances a
    # request's hints name are.
    hosts_of: Callable[[Iterable[str]], dict[str, str]] | None = None
    # Placement's answer for this decision (placement_model.candidates.Search),
    # when the host source keeps Placement's model.
    placement: Any = None
    # Fresh for every decision, even one copied with dataclasses.replace.
    _prepared: dict = dataclasses.field(default_factory=dict, init=False, repr=False)
    _resources: ResourceView | None = dataclasses.field(default=None, init=False,
                                                        repr=False)

    # -- what plugins prepared ----------------------------------------------
    def prepare(self, plugins) -> None:
        """Run every plugin's ``prepare`` once, before any host is asked."""
        for plugin in plugins:
            self._prepared[plugin] = plugin.prepare(self)

    def prepared(self, plugin) -> Any:
        """What ``plugin.prepare`` returned for this decision.

        A plugin asked outside a full decision (a test, ``host_passes`` of
        a built-in) is prepared on first use.
        """
        try:
            return self._prepared[plugin]
        except KeyError:
            value = self._prepared[plugin] = plugin.prepare(self)
            return value

    # -- nova's per-host plugin API, both ways -------------------------------
    def ask_each(self, per_host: Callable[[Any, Any], Any], rows: np.ndarray,
                 dtype) -> np.ndarray:
        """``per_host(host_state, spec)`` for each row (a custom plugin).

        While it runs, a custom plugin that calls a built-in parent's
        ``host_passes`` or ``_weigh_object`` reaches this decision (its
        server group, what the parent prepared) through ``ask_one``.
        """
        states, spec = self.table.states, self.spec
        token = _ASKING.set(self)
        try:
            with cloud_resources.asking(self.table, lambda: self.resources):
                return np.fromiter((per_host(states[r], spec) for r in rows),
                                   dtype=dtype, count=len(rows))
        finally:
            _ASKING.reset(token)

    @staticmethod
    def ask_one(column: Callable[["CycleState", np.ndarray], np.ndarray],
                host_state, spec: "RequestSpec") -> Any:
        """A column-wise method (``filter_all``, ``weigh_all``) for one host.

        Within ``ask_each`` about the same request and table, that decision
        is used; otherwise a new one for this request.
        """
        table = host_state._table
        cycle = _ASKING.get()
        if cycle is None or cycle.spec is not spec or cycle.table is not table:
            cycle = CycleState(spec=spec, table=table)
        return column(cycle, np.array([host_state._row]))[0]

    def allocation_candidate(self, row: int):
        """The allocation candidate a claim on ``row`` takes (None: no
        Placement model): the first of the node's, as nova-scheduler takes
        the first of a host's."""
        if self.placement is None:
            return None
        found = self.placement.candidates_of(self.table.states[row].uuid)
        return found[0] if found else None

    # -- host figures ---------------------------------------------------------
    @property
    def resources(self) -> ResourceView:
        """Each node's effective ratios, limits and free amounts."""
        if self._resources is None or self._resources.table is not self.table:
            self._resources = ResourceView(self.table)
        return self._resources

    def aggregate_number(self, rows: np.ndarray, key: str, default,
                         cast: Callable = float) -> np.ndarray | float:
        """Per row, nova's per-aggregate override of an option (``default``).

        The option itself (a scalar) when no aggregate sets ``key``.
        """
        if not aggregate_metadata.uses_key(self.table, key):
            return default
        return aggregate_metadata.per_row(
            self.table, rows,
            lambda aggs: aggregate_metadata.number(aggs, key, default, cast),
            name=("aggregate_number", key, default, cast))
