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
from typing import Any

import numpy as np

from nova_sched import exception
from nova_sched.scheduler import loadables
from nova_sched.scheduler.cycle_state import CycleState
from nova_sched.scheduler.host_state import HostState
from nova_sched.scheduler.request import RequestSpec

LOG = logging.getLogger(__name__)


class BaseHostFilter:
    """Base class of host filters: override ``host_passes`` (or, for
    column-wise filters, ``prepare`` and ``filter_all``)."""

    # Set per class: whether the handler asks host_passes host by host.
    per_host = False

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


@dataclasses.dataclass
class FilterResult:
    """What a filtering pass kept and, per filter in order, what it removed."""

    rows: np.ndarray
    removed: list[tuple[str, np.ndarray]]
    considered: int

    def removed_counts(self) -> list[tuple[str, int]]:
        return [(name, len(rows)) for name, rows in self.removed if len(rows)]

    def reason(self) -> str:
        """The kube-style summary used in NoValidHost faults."""
        parts = ", ".join(f"{n} removed {c}" for n, c in self.removed_counts())
        text = f"{len(self.rows)}/{self.considered} hosts available"
        return f"{text}: {parts}" if parts else text


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
        """Each filter in order over the rows the previous ones kept."""
        removed: list[tuple[str, np.ndarray]] = []
        considered = len(rows)
        for flt in filters:
            if not len(rows):
                break
            mask = flt.filter_rows(cycle, rows)
            dropped = rows[~mask]
            removed.append((flt.name(), dropped))
            rows = rows[mask]
            if len(dropped) and LOG.isEnabledFor(logging.DEBUG):
                LOG.debug("%s removed %d hosts, %d left", flt.name(), len(dropped),
                          len(rows))
        return FilterResult(rows=rows, removed=removed, considered=considered)


def all_filters() -> list[type]:
    """Every filter class shipped with nova-sched (the default of available_filters)."""
    return loadables.subclasses_in_package(__name__, BaseHostFilter)
