"""Host filters: the base class, the handler that runs them, the catalogue.

There is one way to write a filter, chosen by what it overrides:

* a custom filter overrides ``host_passes(host_state, spec)`` (nova's API);
  the base class asks it host by host;
* a built-in filter overrides ``filter_all(cycle, rows)``, which judges all
  candidate rows at once from the host table's columns and from what its
  ``prepare(cycle)`` worked out once for the decision.

A subclass that overrides ``host_passes`` is asked host by host even when
its parent judges column-wise, so overriding nova's method always takes
effect. ``host_passes`` of a column-wise filter judges a single host with
the same code, so both spellings always agree.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

import numpy as np

from nova_sched import exception
from nova_sched.scheduler.cloud import alike_hosts
from nova_sched.scheduler.decision import loadables
from nova_sched.scheduler.decision.cycle_state import CycleState
from nova_sched.scheduler.cloud.host_state import HostState
from nova_sched.scheduler.wire.request import RequestSpec

LOG = logging.getLogger(__name__)


class BaseHostFilter:
    """Base class of host filters: override ``host_passes`` (or, for
    column-wise filters, ``prepare`` and ``filter_all``)."""

    # Set per class: whether the handler asks host_passes host by host.
    per_host = False
    # Whether Placement's allocation candidates judge what this filter
    # judges (capacity): where the decision asks Placement's model the
    # filter does not run, as nova dropped RamFilter, CoreFilter and
    # DiskFilter once Placement judged capacity; a node's three columns
    # would misjudge a PCPU, Ironic or shared-disk request.
    judged_by_placement = False
    # Whether the filter judges a rebuild (nova's RUN_ON_REBUILD): a rebuild
    # asks whether the instance's own host still takes its new image, so
    # only the filters of image and isolation policy run; the rest would
    # judge usage the instance already holds there.
    run_on_rebuild = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.per_host = loadables.overrides_first(cls, BaseHostFilter, "host_passes",
                                                 "filter_all")

    @classmethod
    def name(cls) -> str:
        return cls.__name__

    def prepare(self, cycle: CycleState) -> Any:
        """Work out, once per decision, what judging a host needs.

        Runs before any host is asked and outside the host table's lock, so
        it may read the database; it may raise InvalidRequestSpec for a
        request this filter cannot make sense of. The result is
        ``cycle.prepared(self)``.
        """
        return None

    def host_passes(self, host_state: HostState, spec: RequestSpec) -> bool:
        """True when the host can take the instance (nova's API).

        For a column-wise filter: its ``filter_all`` over this one host.
        """
        if type(self).filter_all is BaseHostFilter.filter_all:
            raise NotImplementedError(
                f"{self.name()} overrides neither host_passes nor filter_all")
        return bool(CycleState.ask_one(self.filter_all, host_state, spec))

    def filter_all(self, cycle: CycleState, rows: np.ndarray) -> np.ndarray:
        """A boolean mask over ``rows``: which of them pass (column-wise)."""
        raise NotImplementedError(
            f"{self.name()} overrides neither host_passes nor filter_all")

    def filter_rows(self, cycle: CycleState, rows: np.ndarray) -> np.ndarray:
        """What the handler calls: ``host_passes`` host by host when the
        class overrides it, else ``filter_all``."""
        if self.per_host:
            return cycle.ask_each(self.host_passes, rows, bool)
        return np.asarray(self.filter_all(cycle, rows), dtype=bool)

    def limits(self, cycle: CycleState, row: int) -> dict:
        """Limits this filter enforced on ``row``, sent to the compute node."""
        return {}


# Removals named so are the Placement step's, one per constraint
# (decision.provider_candidates).
PLACEMENT_PREFIX = "Placement: "


@dataclasses.dataclass
class FilterResult:
    """What a filtering pass kept and, per filter in order, what it removed."""

    rows: np.ndarray
    considered: int
    # Per filter: (name, the rows it was asked about, a mask of those it
    # removed, how many): the removed rows are only made when asked for
    # (explain, debugging). No mask when it removed none; a callable making
    # it where working it out costs more than counting (Placement's
    # constraints).
    removals: list[tuple[str, np.ndarray, np.ndarray | Callable[[], np.ndarray] | None,
                         int]] = dataclasses.field(default_factory=list)

    @property
    def removed(self) -> list[tuple[str, np.ndarray]]:
        """(filter name, rows it removed), in the order the filters ran."""
        return [(name, asked[mask() if callable(mask) else mask] if count else asked[:0])
                for name, asked, mask, count in self.removals]

    def removed_counts(self) -> list[tuple[str, int]]:
        return [(name, count) for name, _, _, count in self.removals if count]

    def reason(self) -> str:
        """The kube-style summary used in NoValidHost faults.

        Placement's constraints (removals named ``Placement: <why>``) read
        as Placement's own words: ``Placement: 9200 lack trait CUSTOM_SSD,
        700 have no PCPU capacity for 8``.
        """
        parts: list[str] = []
        in_placement = False
        for name, count in self.removed_counts():
            why = name.removeprefix(PLACEMENT_PREFIX)
            if why == name:
                parts.append(f"{name} removed {count}")
                in_placement = False
            elif in_placement:
                parts[-1] += f", {count} {why}"
            else:
                parts.append(f"{PLACEMENT_PREFIX}{count} {why}")
                in_placement = True
        text = f"{len(self.rows)}/{self.considered} hosts available"
        return f"{text}: {', '.join(parts)}" if parts else text


class HostFilterHandler:
    """Loads filter classes by name and runs them in order."""

    def __init__(self, available_paths: list[str]):
        classes = loadables.classes_from_paths(available_paths, BaseHostFilter)
        self.available = {cls.__name__: cls for cls in classes}

    def get_filters(self, names: list[str]) -> list[BaseHostFilter]:
        """Instances of the named filters; ConfigurationError on an unknown one."""
        unknown = [n for n in names if n not in self.available]
        if unknown:
            raise exception.ConfigurationError(
                "unknown filter(s) in [filter_scheduler] enabled_filters: "
                + ", ".join(unknown)
                + "; available: "
                + ", ".join(sorted(self.available))
            )
        return [self.available[n]() for n in names]

    @staticmethod
    def run(filters: list[BaseHostFilter], cycle: CycleState,
            rows: np.ndarray) -> FilterResult:
        """Each filter in order over the rows the previous ones kept.

        Column-wise filters judge a row the same whatever other rows they
        are asked with, so removed rows are dropped from the arrays only
        when that saves work (half of them are gone) or before a filter
        asked host by host, which must see survivors only.
        """
        removals: list[tuple[str, np.ndarray, np.ndarray | None, int]] = []
        considered = len(rows)
        alive: np.ndarray | None = None  # mask over rows; None: all alive
        left = len(rows)
        for flt in filters:
            if not left:
                break
            if alive is not None and (flt.per_host or 2 * left < len(rows)):
                rows, alive = rows[alive], None
            mask = flt.filter_rows(cycle, rows)
            if not mask.strides[0] and mask[0]:
                # everyone(): a filter with nothing to judge for this request
                removals.append((flt.name(), rows, None, 0))
                continue
            kept = mask if alive is None else alive & mask
            count = left - int(np.count_nonzero(kept))
            fails = None
            if count:
                fails = ~mask if alive is None else alive & ~mask
                alive, left = kept, left - count
                if LOG.isEnabledFor(logging.DEBUG):
                    LOG.debug("%s removed %d hosts, %d left", flt.name(), count, left)
            removals.append((flt.name(), rows, fails, count))
        if alive is not None:
            rows = rows[alive]
        return FilterResult(rows=rows, considered=considered, removals=removals)


# by_aggregates' summary: aggregate_metadata.metadata, nova's merged metadata.
MERGED_METADATA = "aggregate_metadata.merged"


def by_aggregates(cycle: CycleState, rows: np.ndarray, summary: str,
                  summarise, passes) -> np.ndarray:
    """``passes(summarise(host's aggregates))`` for each of ``rows``.

    ``summarise`` reads what a filter needs of a set of aggregates (their
    merged metadata, the values of one key); the host table keeps it per
    set of aggregates under the name ``summary`` until the aggregates
    change. ``passes`` judges it for this request, once per set.
    """
    table = cycle.table
    summaries = table.kinds.per_aggregate_set(summary, summarise)
    return alike_hosts.judge_kinds(rows, table.values_of("agg_code", rows), summaries,
                                   passes)


def everyone(rows: np.ndarray) -> np.ndarray:
    """The mask of a filter with nothing to judge for this request: every
    row passes. A read-only view of one value, so that nothing is made
    for it and the handler need not count it (about five filters a
    request of a plain boot, each an array the size of the fleet)."""
    # The ndarray constructor over a one-element read-only buffer: what
    # np.broadcast_to makes, at a third of its cost.
    return np.ndarray(rows.shape, dtype=bool, buffer=_ONE_TRUE, strides=(0,))


_ONE_TRUE = np.ones(1, dtype=bool)
_ONE_TRUE.flags.writeable = False


def among(table, rows: np.ndarray, members) -> np.ndarray:
    """Which of ``rows`` are among the table rows ``members`` (a mask).

    Linear in the rows whatever the number of members (``np.isin``
    compares every row with every member when they are few).
    """
    chosen = np.zeros(table.size, dtype=bool)
    chosen[np.asarray(list(members), dtype=np.int64)] = True
    return table.pick(chosen, rows)


def all_filters() -> list[type]:
    """Every filter class shipped with nova-sched (the default of available_filters)."""
    return loadables.subclasses_in_package(__name__, BaseHostFilter)
