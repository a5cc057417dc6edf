"""Judging alike hosts once: the one helper for "evaluate per kind of host".

Fleets are made of few kinds of node: hosts in the same aggregates, of the
same hardware model, with the same address prefix. A filter whose verdict
depends on a host only through such a key asks ``judge_rows`` to work it
out once per distinct key among the candidate rows and spreads the answer
to the others, which keeps a decision over 100,000 nodes to a few dozen
evaluations instead of 100,000.

When the keys are codes into a short list of values (the kind codes the
host table keeps, ``scheduler.cloud.host_kinds``, or its aggregate-set codes),
``judge_kinds`` judges each value instead of a row of each kind: with few
values it does not even need to find which of them the rows use.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable

import numpy as np


def judge_rows(rows: np.ndarray, keys: np.ndarray | Callable[[int], Hashable],
               judge_row: Callable[[int], Any], dtype=bool) -> np.ndarray:
    """``judge_row(row)`` for one row of each group of alike rows, spread.

    ``keys`` says which rows are alike: an integer array aligned with
    ``rows`` (codes such as the table's ``agg_code``), or a function of a
    row returning a hashable key. Returns an array aligned with ``rows``.
    """
    rows = np.asarray(rows, dtype=np.int64)
    if not len(rows):
        return np.zeros(0, dtype=dtype)
    if callable(keys):
        return _judge_by_function(rows, keys, judge_row, dtype)
    keys = np.asarray(keys)
    low, high = int(keys.min()), int(keys.max())
    if low == high:
        return np.full(len(rows), judge_row(int(rows[0])), dtype=dtype)
    if low >= 0 and high < 4 * len(rows) + 64:
        # Small codes: a lookup table, linear in the rows (np.unique sorts).
        first = np.full(high + 1, -1, dtype=np.int64)
        first[keys[::-1]] = np.arange(len(keys) - 1, -1, -1)
        present = np.flatnonzero(first >= 0)
        lut = np.zeros(high + 1, dtype=dtype)
        lut[present] = [judge_row(int(rows[first[code]])) for code in present]
        return lut.take(keys)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    verdicts = np.asarray([judge_row(int(rows[i])) for i in first], dtype=dtype)
    return verdicts[inverse]


_UNSEEN = object()


def _judge_by_function(rows, key_of, judge_row, dtype) -> np.ndarray:
    seen: dict[Hashable, Any] = {}
    verdicts = []
    for row in rows.tolist():
        key = key_of(row)
        verdict = seen.get(key, _UNSEEN)
        if verdict is _UNSEEN:
            verdict = seen[key] = judge_row(row)
        verdicts.append(verdict)
    return np.array(verdicts, dtype=dtype)


def judge_kinds(rows: np.ndarray, codes: np.ndarray, values: list,
                judge_value: Callable[[Any], Any], dtype=bool) -> np.ndarray:
    """``judge_value(values[code])`` for each of ``rows``, once per value.

    ``codes`` is aligned with ``rows`` and indexes ``values``. With fewer
    values than a quarter of the rows, every value is judged and the
    verdicts picked by code; otherwise only the values the rows use.
    """
    codes = np.asarray(codes)
    if len(values) * 4 <= len(codes):
        verdicts = np.array([judge_value(value) for value in values], dtype=dtype)
        return verdicts.take(codes)
    return judge_rows(np.arange(len(codes)), codes,
                      lambda i: judge_value(values[int(codes[i])]), dtype)
