"""Host weighers: the base class, the handler that normalises and sums.

A weigher returns raw numbers for what it measures; the handler scales each
weigher's numbers to [0, 1] over the candidate hosts, multiplies by the
weigher's multiplier and adds them up. As in nova, a weigher's ``minval``
and ``maxval``, when set, bound its raw numbers (a host with negative free
RAM weighs as 0 free RAM) and are the ends of the range it is scaled
over. Hosts are then ordered by total weight, highest first, keeping the
filter order on ties.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler import aggregate_metadata, loadables
from nova_sched.scheduler.cycle_state import CycleState
from nova_sched.scheduler.host_state import HostState
from nova_sched.scheduler.request import RequestSpec


class BaseHostWeigher:
    """Base class of weighers: override ``_weigh_object`` (or, for
    column-wise weighers, ``weigh_all``).

    As with filters, a custom weigher returns one host's raw number from
    ``_weigh_object(host_state, spec)``; a built-in returns all candidates'
    from ``weigh_all(cycle, rows)``; a subclass overriding ``_weigh_object``
    is asked host by host.

    ``multiplier_option`` names the option (in ``multiplier_group``)
    holding the weigher's multiplier; the host aggregates' metadata key
    ``metadata_key`` (by default the option's name) overrides it for their
    hosts, the smallest value winning, as in nova. ``multiplier_sign``
    flips the result for weighers that measure something bad.
    """

    minval: float | None = None
    maxval: float | None = None
    multiplier_option: str | None = None
    multiplier_group: str = "filter_scheduler"
    metadata_key: str | None = None
    multiplier_sign: float = 1.0
    # Set per class: whether the handler asks _weigh_object host by host.
    per_host = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.per_host = loadables.overrides_first(cls, BaseHostWeigher, "_weigh_object",
                                                 "weigh_all")

    @classmethod
    def name(cls) -> str:
        return cls.__name__

    def _configured_multiplier(self) -> float:
        if self.multiplier_option is None:
            return 1.0
        return float(getattr(getattr(CONF, self.multiplier_group),
                             self.multiplier_option))

    @property
    def _metadata_key(self) -> str | None:
        return self.metadata_key or self.multiplier_option

    def weight_multiplier(self, host_state: HostState | None = None) -> float:
        """The multiplier for ``host_state`` (the option without a host)."""
        default = self._configured_multiplier()
        if self.multiplier_option is None:
            return self.multiplier_sign * default
        return self.multiplier_sign * aggregate_metadata.host_value(
            host_state, self._metadata_key, default)

    def prepare(self, cycle: CycleState) -> Any:
        """Work out, once per decision, what weighing a host needs
        (``cycle.prepared(self)``); see BaseHostFilter.prepare."""
        return None

    def _weigh_object(self, host_state: HostState, spec: RequestSpec) -> float:
        """One host's raw weight (nova's API).

        For a column-wise weigher: its ``weigh_all`` over this one host.
        """
        if type(self).weigh_all is BaseHostWeigher.weigh_all:
            raise NotImplementedError(
                f"{self.name()} overrides neither _weigh_object nor weigh_all")
        return float(CycleState.ask_one(self.weigh_all, host_state, spec))

    def weigh_all(self, cycle: CycleState, rows: np.ndarray) -> np.ndarray:
        """Raw weights of ``rows`` (column-wise)."""
        raise NotImplementedError(
            f"{self.name()} overrides neither _weigh_object nor weigh_all")

    def weigh_rows(self, cycle: CycleState, rows: np.ndarray) -> np.ndarray:
        """What the handler calls: ``_weigh_object`` host by host when the
        class overrides it, else ``weigh_all``."""
        if self.per_host:
            return cycle.ask_each(self._weigh_object, rows, np.float64)
        return np.asarray(self.weigh_all(cycle, rows), dtype=np.float64)

    def multipliers(self, cycle: CycleState, rows: np.ndarray) -> np.ndarray | float:
        """The multiplier for each of ``rows`` (a scalar when uniform)."""
        if self.multiplier_option is None:
            return self.weight_multiplier()
        return self.multiplier_sign * np.asarray(cycle.aggregate_number(
            rows, self._metadata_key, self._configured_multiplier()),
            dtype=np.float64)


def normalize(
    weights: np.ndarray, minval: float | None = None, maxval: float | None = None
) -> np.ndarray:
    """Scale to [0, 1]: 0 at minval (or the smallest weight), 1 at maxval
    (or the largest); weights beyond minval/maxval are clamped to them first
    (nova's BaseWeigher.weigh_objects then normalize). All equal: zeros.
    """
    weights = np.asarray(weights, dtype=np.float64)
    if not len(weights):
        return weights
    if minval is not None or maxval is not None:
        weights = np.clip(weights, minval, maxval)
    lo = float(weights.min()) if minval is None else float(minval)
    hi = float(weights.max()) if maxval is None else float(maxval)
    if lo == hi:
        return np.zeros(len(weights), dtype=np.float64)
    return (weights - lo) / (hi - lo)


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
    def weigh(weighers: list[BaseHostWeigher], cycle: CycleState,
              rows: np.ndarray) -> WeighResult:
        """Candidates ordered by total weight, best first.

        nova's rule: a single candidate is not weighed at all; it weighs
        0.0 (and no weigher is asked, so none can fail the request).
        """
        totals = np.zeros(len(rows), dtype=np.float64)
        contributions: dict[str, np.ndarray] = {
            weigher.name(): totals for weigher in weighers}
        if len(rows) > 1:
            for weigher in weighers:
                raw = weigher.weigh_rows(cycle, rows)
                share = weigher.multipliers(cycle, rows) * normalize(
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
