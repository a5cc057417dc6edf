"""Reading the metadata of a host's aggregates (nova's filters.utils).

Filters and weighers that let aggregates override a global option (the
Aggregate* filters, per-aggregate weight multipliers, the resource model's
allocation ratios) all resolve a key the same way: collect the values of
the host's aggregates and, for numbers, take the smallest; a value that is
not a number falls back to the option.

``metadata(aggregates)`` is nova's ``aggregate_metadata_get_by_host``: every
key of the host's aggregates with the set of its values, each value split
at commas and stripped (``"a, b"`` gives ``{"a", "b"}``).

``per_row(table, rows, value_of)`` asks a function of a host's aggregates
once per distinct set of aggregates among ``rows`` (the table groups its
rows by that set), so that aggregate-aware filters and weighers cost a few
vector operations at 100,000 hosts.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable

import numpy as np

from nova_sched.db.aggregates import AggregateInfo
from nova_sched.scheduler.cloud import alike_hosts

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


def number(aggregates: Iterable[AggregateInfo], key: str, default,
           cast: Callable = float):
    """nova's rule for per-aggregate overrides of an option.

    The smallest of the aggregates' values of ``key``; ``default`` (the
    option) when none sets it or one is not a number.
    """
    return min_number(values_for_key(aggregates, key), default, cast, key)


def host_value(host_state, key: str, default, cast: Callable = float):
    """``number`` for one host's aggregates (``default`` without a host)."""
    if host_state is None:
        return default
    return number(host_state.aggregates, key, default, cast)


def metadata(aggregates: Iterable[AggregateInfo]) -> dict[str, set[str]]:
    """key -> every comma-separated value the aggregates give it (nova's)."""
    merged: dict[str, set[str]] = {}
    for agg in aggregates:
        for key, value in agg.metadata.items():
            merged.setdefault(key, set()).update(
                part.strip() for part in str(value).split(",")
            )
    return merged


def per_row(table, rows: np.ndarray | None,
            value_of: Callable[[tuple[AggregateInfo, ...]], Any],
            dtype=np.float64, name: Any = None) -> np.ndarray:
    """``value_of(the host's aggregates)`` for each of ``rows`` (None: every
    row of the table).

    Asked once per set of aggregates (of those among the rows when the
    table has many sets). With a ``name``, ``value_of`` depends on the
    aggregates alone and the table keeps its answers under that name until
    the aggregates change.
    """
    if rows is None:
        rows = np.arange(table.size)
        codes = table.col("agg_code")
    else:
        rows = np.asarray(rows, dtype=np.int64)
        codes = table.values_of("agg_code", rows)
    if name is not None:
        values = table.kinds.per_aggregate_set(name, value_of)
        return np.asarray(values, dtype=dtype).take(codes)
    return alike_hosts.judge_kinds(rows, codes, table.aggregate_sets, value_of,
                                   dtype=dtype)


def mask(table, rows: np.ndarray,
         passes: Callable[[tuple[AggregateInfo, ...]], bool]) -> np.ndarray:
    """``per_row`` of a predicate of the host's aggregates, as a boolean mask."""
    return per_row(table, rows, lambda aggs: bool(passes(aggs)), dtype=bool)


def uses_key(table, key: str) -> bool:
    """Whether any aggregate sets ``key`` (else the option applies everywhere)."""
    return any(key in agg.metadata for agg in table.aggregates)
