"""Reading the metadata of a host's aggregates (nova's filters.utils).

Filters and weighers that let aggregates override a global option (the
Aggregate* filters, per-aggregate weight multipliers) all resolve a key the
same way: collect the values of the host's aggregates and, for numbers,
take the smallest; a value that is not a number falls back to the option.

``metadata(aggregates)`` is nova's ``aggregate_metadata_get_by_host``: every
key of the host's aggregates with the set of its values, each value split
at commas and stripped (``"a, b"`` gives ``{"a", "b"}``).

``per_row(table, rows, value_of)`` evaluates a function of a host that
depends on the host only through its aggregates (and options) once per
distinct set of aggregates rather than once per host, so that the
Aggregate* filters and per-aggregate weight multipliers cost a few vector
operations at 100,000 hosts. Which rows share which set of aggregates is
worked out when the table's aggregates change (and for new rows as they
appear), and cached.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any, Callable, Iterable

import numpy as np

from nova_sched.scheduler.host_state import AggregateInfo, HostState, HostTable

LOG = logging.getLogger(__name__)


def values_for_key(aggregates: Iterable[AggregateInfo], key: str) -> set[str]:
    """Every value of ``key`` among the aggregates."""
    return {agg.metadata[key] for agg in aggregates if key in agg.metadata}


def min_number(values: set[str], default, cast: Callable = float, what: str = ""):
    """The smallest of ``values`` as a number; ``default`` when none or invalid."""
    if not values:
        return default
    try:
        return min(cast(v) for v in values)
    except (TypeError, ValueError) as err:
        LOG.warning("Could not decode %s from aggregate metadata %s: %s; using "
                    "the configured %s", what or "a value", sorted(values), err,
                    default)
        return default


def host_value(host_state, key: str, default, cast: Callable = float):
    """The option ``default`` unless the host's aggregates set ``key``.

    nova's rule for per-aggregate overrides: the smallest of the aggregates'
    values, the option when none is set or one is not a number. Without a
    host (a vectorised caller asking for the global value) it is the option.
    """
    if host_state is None:
        return default
    return min_number(values_for_key(host_state.aggregates, key), default, cast, key)


# Above this many distinct sets of aggregates, evaluate only the sets that
# occur among the requested rows.
_EVALUATE_ALL_UP_TO = 64


def metadata(aggregates: Iterable[AggregateInfo]) -> dict[str, set[str]]:
    """key -> every comma-separated value the aggregates give it (nova's)."""
    merged: dict[str, set[str]] = {}
    for agg in aggregates:
        for key, value in agg.metadata.items():
            merged.setdefault(key, set()).update(
                part.strip() for part in str(value).split(",")
            )
    return merged


class _Groups:
    """Rows of one table grouped by the set of aggregates of their host."""

    def __init__(self, table: HostTable):
        self.aggregates = table.aggregates  # identity marks the version
        self.size = 0
        self.codes = np.zeros(0, dtype=np.int64)
        # A representative row per code; code 0 is "in no aggregate".
        self.rep_rows: list[int | None] = [None]
        self._code_of: dict[tuple[int, ...], int] = {(): 0}
        self.extend(table)

    def _code(self, aggs: list[AggregateInfo], row: int) -> int:
        # A host's list follows the table's order of aggregates.
        key = tuple(map(id, aggs))
        code = self._code_of.get(key)
        if code is None:
            code = self._code_of[key] = len(self.rep_rows)
            self.rep_rows.append(row)
        elif self.rep_rows[code] is None:
            self.rep_rows[code] = row
        return code

    def extend(self, table: HostTable) -> None:
        """Take in the rows added to the table since the last look."""
        start, by_host, states = self.size, table.aggregates_by_host, table.states
        codes = [self._code(by_host.get(states[row].host, []), row)
                 for row in range(start, table.size)]
        self.codes = np.concatenate([self.codes, np.array(codes, dtype=np.int64)])
        self.size = table.size


_cache: "weakref.WeakKeyDictionary[HostTable, _Groups]" = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def _groups(table: HostTable) -> _Groups:
    with _cache_lock:
        groups = _cache.get(table)
        if groups is None or groups.aggregates is not table.aggregates:
            groups = _cache[table] = _Groups(table)
        elif groups.size != table.size:
            groups.extend(table)
        return groups


def per_row(
    table: HostTable, rows: np.ndarray, value_of: Callable[[HostState], Any]
):
    """``value_of(host_state)`` for each of ``rows``.

    ``value_of`` must depend on the host only through its aggregates: it
    is asked once for one host of each distinct set of aggregates. Returns
    the value itself when it is the same for every row (the usual case of
    no aggregate carrying the filter's key), an array over ``rows``
    otherwise.
    """
    rows = np.asarray(rows, dtype=np.int64)
    if not len(rows):
        return np.zeros(0)
    groups = _groups(table)
    states = table.states
    if len(groups.rep_rows) == 1:
        return value_of(states[int(rows[0])])
    row_codes = groups.codes[rows]
    if len(groups.rep_rows) <= _EVALUATE_ALL_UP_TO:
        wanted = range(len(groups.rep_rows))
    else:
        wanted = np.unique(row_codes).tolist()
    values: dict[int, Any] = {}
    for code in wanted:
        rep = groups.rep_rows[code]
        if rep is not None:
            values[code] = value_of(states[rep])
    distinct = set(values.values())
    if len(distinct) == 1:
        return distinct.pop()
    lut = np.array([values.get(code, next(iter(values.values())))
                    for code in range(len(groups.rep_rows))])
    return lut[row_codes]


def mask(
    table: HostTable, rows: np.ndarray, passes: Callable[[HostState], bool]
) -> np.ndarray:
    """``per_row`` of a predicate, as a boolean mask over ``rows``."""
    result = per_row(table, rows, lambda state: bool(passes(state)))
    if np.ndim(result) == 0:
        return np.full(len(rows), bool(result), dtype=bool)
    return np.asarray(result, dtype=bool)
