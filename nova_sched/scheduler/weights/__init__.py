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

import math
from typing import Any

import numpy as np

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler.cloud import aggregate_metadata
from nova_sched.scheduler.decision import loadables
from nova_sched.scheduler.decision.cycle_state import CycleState
from nova_sched.scheduler.cloud.host_state import HostState
from nova_sched.scheduler.wire.request import RequestSpec


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
    # A column-wise weigher of whole numbers (counts, MB) sets this: it
    # weighs 0.0 everywhere with a multiplier of 0, so it is not asked then.
    whole_numbers = False
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
        # By subscription: an attribute oslo.config does not have as such
        # costs the AttributeError its __getattr__ falls back from, for
        # each weigher on every decision; through the group's kept handle
        # (see nova_sched.conf).
        return float(_group(self.multiplier_group)[self.multiplier_option])

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
        return float(CycleState.ask_one(self._weigh_all_rows, host_state, spec))

    def _weigh_all_rows(self, cycle: CycleState, rows: np.ndarray) -> np.ndarray:
        # weigh_all's answer as one number per row.
        return np.broadcast_to(self.weigh_all(cycle, rows), (len(rows),))

    def weigh_all(self, cycle: CycleState, rows: np.ndarray) -> np.ndarray:
        """Raw weights of ``rows`` (column-wise)."""
        raise NotImplementedError(
            f"{self.name()} overrides neither _weigh_object nor weigh_all")

    def weigh_rows(self, cycle: CycleState, rows: np.ndarray) -> np.ndarray:
        """Raw weights of ``rows``: ``_weigh_object`` host by host when the
        class overrides it, else ``weigh_all``."""
        raw = self._raw_weights(cycle, rows)
        if _ndim(raw) == 0:
            return np.full(len(rows), raw, dtype=np.float64)
        return np.asarray(raw, dtype=np.float64)

    def _raw_weights(self, cycle: CycleState, rows: np.ndarray):
        """What the handler weighs: an array over ``rows``, or one number
        for all of them (a built-in's ``weigh_all`` may answer either)."""
        if self.per_host:
            return cycle.ask_each(self._weigh_object, rows, np.float64)
        return self.weigh_all(cycle, rows)

    def multipliers(self, cycle: CycleState, rows: np.ndarray) -> np.ndarray | float:
        """The multiplier for each of ``rows`` (a scalar when uniform)."""
        if self.multiplier_option is None:
            return self.weight_multiplier()
        value = cycle.aggregate_number(rows, self._metadata_key,
                                       self._configured_multiplier())
        if _ndim(value) == 0:
            # No aggregate sets it: a plain float, not a 0-d array whose
            # every comparison and product in the handler is a NumPy call.
            return self.multiplier_sign * float(value)
        return self.multiplier_sign * np.asarray(value, dtype=np.float64)


_GROUPS: dict[str, Any] = {}


def _group(name: str):
    """``CONF[name]``, kept once found (the weighers' groups)."""
    handle = _GROUPS.get(name)
    if handle is None:
        handle = _GROUPS[name] = CONF[name]
    return handle


def _ndim(value) -> int:
    """``np.ndim(value)``; a Python float (most multipliers and one-number
    weights) without NumPy's, which asks it for ``.ndim`` and builds the
    AttributeError."""
    if type(value) is float:
        return 0
    return np.ndim(value)


def normalize(
    weights: np.ndarray, minval: float | None = None, maxval: float | None = None
) -> np.ndarray:
    """Scale to [0, 1]: 0 at minval (or the smallest weight), 1 at maxval
    (or the largest); weights beyond minval/maxval are clamped to them first
    (nova's BaseWeigher.weigh_objects then normalize). All equal: zeros.

    ``weights`` may be one number standing for every host's weight: the
    answer is then that one number, scaled the same way.
    """
    if _ndim(weights) == 0:
        return _normalize_one(weights, minval, maxval)
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


def _finite(raw) -> bool:
    """Whether raw weights are known finite without looking at each."""
    if _ndim(raw) == 0:
        return math.isfinite(raw)
    return np.asarray(raw).dtype.kind in "biu"


def _normalize_one(value, minval: float | None, maxval: float | None) -> float:
    """``normalize`` of every host weighing ``value``, as one number."""
    value = float(value)
    if math.isfinite(value):
        if minval is None and maxval is None:
            return 0.0  # all equal
        if maxval is None and math.isfinite(value - float(minval)):
            # Clamped at minval, then scaled from minval to the weight itself.
            return 0.0 if max(value, float(minval)) == float(minval) else 1.0
    return float(normalize(np.array([value]), minval, maxval)[0])


def _share(multiplier, raw, minval: float | None, maxval: float | None):
    """``multiplier * normalize(raw, minval, maxval)``, with the same numbers,
    in fewer passes over the candidates: one number when the weights are
    all equal, no clipping when none is beyond minval/maxval, no subtraction
    of 0 and no multiplication by 1 or -1."""
    if _ndim(raw) == 0:
        return multiplier * _normalize_one(raw, minval, maxval)
    weights = np.asarray(raw)
    low, high = weights.min(), weights.max()
    bounded = minval is not None or maxval is not None
    if bounded and (math.isnan(low) or math.isnan(high)
                    or (minval is not None and low < minval)
                    or (maxval is not None and high > maxval)):
        if weights.dtype.kind in "iu" and maxval is None and float(minval) == int(minval):
            weights = np.maximum(weights, int(minval))  # whole numbers stay exact
        else:
            weights = np.clip(weights.astype(np.float64), minval, maxval)
        low, high = weights.min(), weights.max()
    lo = float(low) if minval is None else float(minval)
    hi = float(high) if maxval is None else float(maxval)
    if lo == hi:
        return multiplier * 0.0
    if lo != 0.0:
        weights = np.subtract(weights, lo, dtype=np.float64)
    if _ndim(multiplier) == 0 and multiplier in (1.0, -1.0):
        # x / -d is exactly -(x / d): the sign folds into the division.
        return np.divide(weights, multiplier * (hi - lo), dtype=np.float64)
    return multiplier * np.divide(weights, hi - lo, dtype=np.float64)


class WeighResult:
    """The weighed candidates with their totals and each weigher's share.

    ``candidates`` and ``weights`` are in the order the filters left them;
    ``rows``, ``totals`` and ``contributions`` in weighed order, best first
    (sorted when first read: a decision only needs its first few candidates,
    ``ranking()``, and explain the whole order).
    """

    def __init__(self, candidates: np.ndarray, weights: np.ndarray,
                 shares: dict[str, Any], ranked: bool):
        self.candidates = candidates
        self.weights = weights
        # weigher name -> its share per candidate (or one number for all).
        self.shares = shares
        # False when no weigher told the candidates apart: the filter order.
        self.ranked = ranked
        self._order: np.ndarray | None = None

    def order(self) -> np.ndarray:
        """Positions of the candidates, best first (ties in filter order)."""
        if self._order is None:
            self._order = (np.argsort(-self.weights, kind="stable") if self.ranked
                           else np.arange(len(self.candidates)))
        return self._order

    @property
    def rows(self) -> np.ndarray:
        return self.candidates.take(self.order())

    @property
    def totals(self) -> np.ndarray:
        return self.weights.take(self.order())

    @property
    def contributions(self) -> dict[str, np.ndarray]:
        size = len(self.candidates)
        return {name: np.broadcast_to(share, (size,))[self.order()]
                for name, share in self.shares.items()}

    def ranking(self) -> "Ranking":
        """The candidates best first, sorted only as far as they are read."""
        return Ranking(self.candidates, self.weights, self.ranked)


class Ranking:
    """Weighed candidates best first, as a sequence of table rows.

    ``ranking[0]`` is the best candidate; reading further sorts further.
    Finding the first few of 100,000 candidates is a partition, not a sort;
    the order is exactly a stable sort's (ties keep the filter order).
    """

    # Candidates put in order on the first read.
    _FIRST = 16

    def __init__(self, candidates: np.ndarray, weights: np.ndarray,
                 ranked: bool = True, front: int = 0):
        self._candidates = candidates
        self._weights = weights
        self._ranked = ranked
        self._front = front
        self._best = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._candidates)

    def __getitem__(self, position: int):
        return self._candidates[self._position(position)]

    def weight(self, position: int) -> float:
        """The total weight of the candidate at ``position``."""
        return float(self._weights[self._position(position)])

    def moved_to_front(self, position: int) -> "Ranking":
        """The same ranking with the candidate at ``position`` tried first
        (``host_subset_size``'s random pick)."""
        moved = Ranking(self._candidates, self._weights, self._ranked, position)
        moved._best = self._best
        return moved

    def copy(self) -> np.ndarray:
        """The whole order, as an array of rows."""
        order = self._candidates.take(self._sorted(len(self)))
        if self._front:
            order = np.concatenate((order[self._front:self._front + 1],
                                    order[:self._front], order[self._front + 1:]))
        return order

    def _position(self, position: int) -> int:
        if not -len(self) <= position < len(self):
            raise IndexError(position)
        position %= len(self)
        if self._front:
            if position == 0:
                position = self._front
            elif position <= self._front:
                position -= 1
        return int(self._sorted(position + 1)[position])

    def _sorted(self, count: int) -> np.ndarray:
        """Positions of the best ``count`` candidates (at least), in order."""
        if len(self._best) >= count:
            return self._best
        size = len(self._candidates)
        if not self._ranked:
            self._best = np.arange(size)
            return self._best
        if count == 1 and not len(self._best):
            # The best alone (a decision whose first candidate's claim
            # holds reads no further): argmax's first maximum is a stable
            # sort's first candidate, in one pass instead of a partition.
            best = int(np.argmax(self._weights))
            if not math.isnan(self._weights[best]):  # NaN: sorted last
                self._best = np.array([best])
                return self._best
        want = max(count, 2 * len(self._best), self._FIRST)
        if 8 * want >= size:
            self._best = np.argsort(-self._weights, kind="stable")
            return self._best
        weights = self._weights
        # The want-th largest weight; every candidate at least as heavy, in
        # filter order, then stably by weight: a stable sort's first ones.
        kth = np.partition(weights, size - want)[size - want]
        heavy = np.flatnonzero(weights >= kth)
        if len(heavy) < want:  # NaN weights (sorted last): sort them all
            self._best = np.argsort(-weights, kind="stable")
            return self._best
        self._best = heavy[np.argsort(-weights[heavy], kind="stable")][:want]
        return self._best


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
        """Candidates with their total weights (see WeighResult).

        nova's rule: a single candidate is not weighed at all; it weighs
        0.0 (and no weigher is asked, so none can fail the request).
        """
        totals = np.zeros(len(rows), dtype=np.float64)
        shares: dict[str, Any] = {weigher.name(): 0.0 for weigher in weighers}
        ranked = False
        if len(rows) > 1:
            for weigher in weighers:
                multiplier = weigher.multipliers(cycle, rows)
                off = (_ndim(multiplier) == 0 and multiplier == 0
                       and math.copysign(1.0, multiplier) > 0)
                if off and weigher.whole_numbers and not weigher.per_host:
                    continue  # 0.0 everywhere whatever it would say
                raw = weigher._raw_weights(cycle, rows)
                if off and _finite(raw):
                    continue  # weighs 0.0 everywhere: nothing to add
                share = _share(multiplier, raw, weigher.minval, weigher.maxval)
                shares[weigher.name()] = share
                if _ndim(share) == 0:
                    if share == 0:
                        continue
                else:
                    ranked = True
                totals += share
        return WeighResult(rows, totals, shares, ranked)


def column_weights(cycle: CycleState, name: str, rows: np.ndarray):
    """A host table column's values of ``rows`` as raw weights; one number
    when every row of the table has the same (a fleet of one hypervisor
    version, no failed builds), which spares reading the rows."""
    column = cycle.table.col(name)
    if len(column) and column.min() == column.max():
        return column[0].item()
    return cycle.table.pick(column, rows)


def all_weighers() -> list[type]:
    """Every weigher class shipped with nova-sched (the default weight_classes)."""
    return loadables.subclasses_in_package(__name__, BaseHostWeigher)
