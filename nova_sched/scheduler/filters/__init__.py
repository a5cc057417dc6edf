"""Host filters: the base class, the handler that runs them, the catalogue.

A filter is a small class with one ``host_passes(host_state, spec)``. Built-in
filters also implement ``filter_all`` over the host table's columns so that a
decision over many thousand nodes costs a few vector operations; custom
filters that only implement ``host_passes`` work unchanged.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from nova_sched import exception
from nova_sched.scheduler import loadables
from nova_sched.scheduler.host_state import HostState, HostTable
from nova_sched.scheduler.request import RequestSpec

LOG = logging.getLogger(__name__)


class BaseHostFilter:
    """Base class of host filters: override ``host_passes``."""

    # nova's flag for filters whose answer cannot change between the
    # instances of one request. nova narrows each instance's hosts to the
    # previous one's survivors, so skipping such filters later is safe
    # there; here every instance starts from all live hosts, so every filter
    # runs every time and the flag is informational.
    run_filter_once_per_request = False

    @classmethod
    def name(cls) -> str:
        return cls.__name__

    def host_passes(self, host_state: HostState, spec: RequestSpec) -> bool:
        """True when the host can take the instance."""
        raise NotImplementedError

    def filter_all(
        self, table: HostTable, rows: np.ndarray, spec: RequestSpec
    ) -> np.ndarray:
        """A boolean mask over ``rows``: which of them pass.

        The default asks ``host_passes`` host by host; built-in filters
        override it with column arithmetic.
        """
        states = table.states
        return np.fromiter(
            (self.host_passes(states[r], spec) for r in rows),
            dtype=bool,
            count=len(rows),
        )

    def limits(self, host_state: HostState) -> dict:
        """Limits this filter enforced, sent to the compute node (nova's)."""
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
    def run(
        filters: list[BaseHostFilter],
        table: HostTable,
        rows: np.ndarray,
        spec: RequestSpec,
    ) -> FilterResult:
        removed: list[tuple[str, np.ndarray]] = []
        considered = len(rows)
        for flt in filters:
            if not len(rows):
                break
            mask = np.asarray(flt.filter_all(table, rows, spec), dtype=bool)
            dropped = rows[~mask]
            removed.append((flt.name(), dropped))
            rows = rows[mask]
            if len(dropped) and LOG.isEnabledFor(logging.DEBUG):
                LOG.debug("%s removed %d hosts, %d left", flt.name(), len(dropped), len(rows))
        return FilterResult(rows=rows, removed=removed, considered=considered)


def all_filters() -> list[type]:
    """Every filter class shipped with nova-sched (the default of available_filters)."""
    return loadables.subclasses_in_package(__name__, BaseHostFilter)
