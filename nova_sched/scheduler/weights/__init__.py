"""Host weighers: the base class, the handler that normalises and sums.

A weigher returns raw numbers for what it measures; the handler scales each
weigher's numbers to [0, 1] over the candidate hosts (stretching the range
to include the weigher's ``minval``/``maxval`` when set, as nova does),
multiplies by the weigher's multiplier and adds them up. Hosts are then
ordered by total weight, highest first, keeping the filter order on ties.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from nova_sched import exception
from nova_sched.scheduler import loadables
from nova_sched.scheduler.host_state import HostState, HostTable
from nova_sched.scheduler.request import RequestSpec


class BaseHostWeigher:
    """Base class of weighers: override ``_weigh_object`` and ``weight_multiplier``."""

    minval: float | None = None
    maxval: float | None = None

    @classmethod
    def name(cls) -> str:
        return cls.__name__

    def weight_multiplier(self, host_state: HostState | None = None) -> float:
        return 1.0

    def _weigh_object(self, host_state: HostState, spec: RequestSpec) -> float:
        raise NotImplementedError

    def weigh_all(
        self, table: HostTable, rows: np.ndarray, spec: RequestSpec
    ) -> np.ndarray:
        """Raw weights of ``rows``; built-ins override with column arithmetic."""
        states = table.states
        return np.fromiter(
            (self._weigh_object(states[r], spec) for r in rows),
            dtype=np.float64,
            count=len(rows),
        )

    def multipliers(self, table: HostTable, rows: np.ndarray) -> np.ndarray | float:
        """The multiplier for each of ``rows`` (a scalar when uniform)."""
        return float(self.weight_multiplier())


def normalize(
    weights: np.ndarray, minval: float | None = None, maxval: float | None = None
) -> np.ndarray:
    """Scale to [0, 1] over a range that includes minval/maxval when given."""
    if not len(weights):
        return weights.astype(np.float64)
    lo = float(weights.min()) if minval is None else min(float(minval), float(weights.min()))
    hi = float(weights.max()) if maxval is None else max(float(maxval), float(weights.max()))
    if lo == hi:
        return np.zeros(len(weights), dtype=np.float64)
    return (weights.astype(np.float64) - lo) / (hi - lo)


@dataclasses.dataclass
class WeighResult:
    """Candidate rows in weighed order, with totals and each weigher's share."""

    rows: np.ndarray
    totals: np.ndarray
    contributions: dict[str, np.ndarray]


class HostWeightHandler:
    """Loads weighers by name or dotted path and weighs candidate hosts."""

    def __init__(self):
        self.builtin = {cls.__name__: cls for cls in all_weighers()}

    def get_weighers(self, names: list[str]) -> list[BaseHostWeigher]:
        classes: list[type] = []
        for name in names:
            if name in self.builtin:
                classes.append(self.builtin[name])
            elif "." in name:
                try:
                    classes.extend(loadables.classes_from_paths([name], BaseHostWeigher))
                except exception.ConfigurationError as err:
                    raise exception.ConfigurationError(
                        f"[filter_scheduler] weight_classes: {err.reason}"
                    )
            else:
                raise exception.ConfigurationError(
                    f"unknown weigher {name!r} in [filter_scheduler] "
                    "weight_classes; built-in: " + ", ".join(sorted(self.builtin))
                )
        seen: list[type] = []
        for cls in classes:
            if cls not in seen:
                seen.append(cls)
        return [cls() for cls in seen]

    @staticmethod
    def weigh(
        weighers: list[BaseHostWeigher],
        table: HostTable,
        rows: np.ndarray,
        spec: RequestSpec,
    ) -> WeighResult:
        totals = np.zeros(len(rows), dtype=np.float64)
        contributions: dict[str, np.ndarray] = {}
        if len(rows):
            for weigher in weighers:
                raw = np.asarray(weigher.weigh_all(table, rows, spec), dtype=np.float64)
                share = weigher.multipliers(table, rows) * normalize(
                    raw, weigher.minval, weigher.maxval
                )
                share = np.broadcast_to(share, totals.shape)
                contributions[weigher.name()] = share
                totals = totals + share
        # Stable: equal weights keep the order the filters produced.
        order = np.argsort(-totals, kind="stable")
        return WeighResult(
            rows=rows[order],
            totals=totals[order],
            contributions={k: v[order] for k, v in contributions.items()},
        )


def all_weighers() -> list[type]:
    """Every weigher class shipped with nova-sched (the default weight_classes)."""
    return loadables.subclasses_in_package(__name__, BaseHostWeigher)
