"""Weighing in few passes and ordering only as far as read, same numbers.

* the handler's share of a weigher is exactly ``multiplier * normalize(raw)``
  (one number when every host weighs the same);
* a Ranking reads exactly as a stable sort of the totals, best first, ties
  in filter order, however far it is read and with host_subset_size's pick
  moved to the front;
* WeighResult's sorted views agree with the ranking.
"""

from __future__ import annotations

import numpy as np
import pytest

from nova_sched.scheduler import weights
from nova_sched.scheduler.weights import Ranking, WeighResult, normalize


def _random_weights(rng, size):
    kind = rng.integers(0, 5)
    if kind == 0:  # integers with many ties
        return rng.integers(-3, 4, size=size)
    if kind == 1:  # all equal
        return np.full(size, float(rng.choice([0.0, 2.5, -1.0])))
    if kind == 2:  # floats with a few NaN and infinities
        values = rng.normal(size=size) * 1000
        values[rng.random(size) < 0.05] = np.nan
        values[rng.random(size) < 0.02] = np.inf
        return values
    if kind == 3:  # large integers, negative ones
        return rng.integers(-(2 ** 40), 2 ** 40, size=size)
    return np.round(rng.random(size), 1)


@pytest.mark.parametrize("seed", range(20))
def test_share_is_multiplier_times_normalize_exactly(seed):
    rng = np.random.default_rng(seed)
    for _ in range(30):
        size = int(rng.integers(2, 300))
        raw = _random_weights(rng, size)
        minval = rng.choice([None, 0, -1.5, 1])
        maxval = rng.choice([None, None, 2, 1000.0])
        multiplier = rng.choice([1.0, -1.0, 0.0, 2.5, 1e6, -0.0])
        if rng.random() < 0.3:  # per-host multipliers (aggregates)
            multiplier = rng.choice([1.0, 3.0, 0.0], size=size)
        expected = multiplier * normalize(raw, minval, maxval)
        share = np.broadcast_to(weights._share(multiplier, raw, minval, maxval), (size,))
        np.testing.assert_array_equal(share, expected)
        assert np.array_equal(np.signbit(share), np.signbit(expected)) or np.isnan(
            expected).any()
    # One number for everyone: scaled as an array of it would be.
    for value in (0, 5, -2.5, 1e308, float("inf"), float("nan")):
        for minval, maxval in ((None, None), (0, None), (None, 3), (1, 10), (-1e308, None)):
            with np.errstate(invalid="ignore", over="ignore"):
                expected = (2.0 * normalize(np.full(3, float(value)), minval, maxval))[0]
                share = weights._share(2.0, value, minval, maxval)
            assert share == expected or (np.isnan(share) and np.isnan(expected))


@pytest.mark.parametrize("seed", range(20))
def test_a_ranking_reads_as_a_stable_sort(seed):
    rng = np.random.default_rng(seed)
    for _ in range(20):
        size = int(rng.integers(1, 600))
        totals = _random_weights(rng, size).astype(np.float64)
        rows = np.sort(rng.choice(10 * size, size=size, replace=False))
        expected = rows[np.argsort(-totals, kind="stable")]
        ranking = Ranking(rows, totals)
        assert len(ranking) == size
        # Read a little, then further, then all of it.
        for upto in (1, 3, 17, 40, size):
            got = [int(ranking[p]) for p in range(min(upto, size))]
            assert got == expected[:len(got)].tolist()
        assert ranking.copy().tolist() == expected.tolist()
        weights_read = [ranking.weight(p) for p in range(size)]
        np.testing.assert_array_equal(weights_read, -np.sort(-totals, kind="stable"))
        with pytest.raises(IndexError):
            ranking[size]


@pytest.mark.parametrize("seed", range(5))
def test_moving_a_pick_to_the_front_keeps_the_rest_in_order(seed):
    rng = np.random.default_rng(seed)
    totals = rng.integers(0, 50, size=200).astype(np.float64)
    rows = np.arange(200) * 3
    order = rows[np.argsort(-totals, kind="stable")].tolist()
    for pick in (1, 2, 7):
        moved = Ranking(rows, totals).moved_to_front(pick)
        expected = [order[pick]] + order[:pick] + order[pick + 1:]
        assert [int(moved[p]) for p in range(len(moved))] == expected
        assert moved.copy().tolist() == expected
        assert moved.weight(0) == totals[rows.tolist().index(order[pick])]


def test_unranked_candidates_keep_the_filter_order():
    rows = np.array([5, 2, 9])
    ranking = Ranking(rows, np.zeros(3), ranked=False)
    assert [int(ranking[p]) for p in range(3)] == [5, 2, 9]
    result = WeighResult(rows, np.zeros(3), {"W": 0.0}, ranked=False)
    assert result.rows.tolist() == [5, 2, 9]
    assert result.contributions["W"].tolist() == [0.0, 0.0, 0.0]


def test_weigh_result_views_agree_with_its_ranking():
    rng = np.random.default_rng(3)
    rows = np.arange(100)
    totals = rng.integers(0, 5, size=100).astype(np.float64)
    shares = {"A": totals / 2, "B": totals / 2, "C": 0.0}
    result = WeighResult(rows, totals, shares, ranked=True)
    ranking = result.ranking()
    assert result.rows.tolist() == [int(ranking[p]) for p in range(100)]
    assert result.totals.tolist() == [ranking.weight(p) for p in range(100)]
    np.testing.assert_array_equal(result.contributions["A"] + result.contributions["B"],
                                  result.totals)
    assert not result.contributions["C"].any()
