"""Reading the metadata of a host's aggregates (nova's filters.utils).

Filters and weighers that let aggregates override a global option (the
Aggregate* filters, per-aggregate weight multipliers) all resolve a key the
same way: collect the values of the host's aggregates and, for numbers,
take the smallest; a value that is not a number falls back to the option.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

from nova_sched.scheduler.host_state import AggregateInfo

LOG = logging.getLogger(__name__)


def values_for_key(aggregates: Iterable[AggregateInfo], key: str) -> set[str]:
    """Every value of ``key`` among the aggregates."""
    return {agg.metadata[key] for agg in aggregates if key in agg.metadata}


def metadata_by_key(aggregates: Iterable[AggregateInfo]) -> dict[str, set[str]]:
    """key -> the set of values the aggregates give it."""
    merged: dict[str, set[str]] = {}
    for agg in aggregates:
        for key, value in agg.metadata.items():
            merged.setdefault(key, set()).add(value)
    return merged


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
