"""Suite statistics on hand-made numbers: intervals, paired differences, matched levels."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cory.evaluation import distinct_n
from cory.stats import (Interval, bootstrap_mean, common_levels, kl_at_reward, paired_difference,
                        reward_at_kl)


def test_bootstrap_interval_matches_a_hand_resampling():
    values = [1.0, 2.0, 4.0]
    got = bootstrap_mean(values, level=0.9, resamples=2000, seed=3)
    rng = np.random.default_rng(3)
    means = np.array(values)[rng.integers(0, 3, size=(2000, 3))].mean(1)
    assert got.mean == pytest.approx(7 / 3)
    assert (got.low, got.high) == pytest.approx(tuple(np.quantile(means, [0.05, 0.95])))
    assert 1.0 <= got.low < got.mean < got.high <= 4.0 and got.n == 3


def test_interval_edge_cases_and_verdicts():
    assert math.isnan(bootstrap_mean([]).mean)
    single = bootstrap_mean([2.0, math.nan])  # non-finite values are dropped
    assert single.mean == 2.0 and math.isnan(single.low) and single.verdict() == "not shown (too few seeds)"
    assert bootstrap_mean([0.5, 0.5, 0.5]) == Interval(0.5, 0.5, 0.5, 3)
    assert Interval(1.0, 0.2, 1.8, 5).verdict() == "shown: higher"
    assert Interval(-1.0, -1.8, -0.2, 5).verdict() == "shown: lower"
    assert Interval(0.1, -0.3, 0.5, 5).verdict() == "not shown"
    assert str(Interval(0.1, -0.3, 0.5, 5)) == "0.100 [-0.300, 0.500]"
    # two seeds: the bootstrap interval is just their range, so no verdict
    assert Interval(1.0, 0.5, 1.5, 2).verdict() == "not shown (too few seeds)"


def test_sign_flip_p_by_hand():
    from cory.stats import sign_flip_p

    # 3 positive differences: of the 8 sign assignments only all-plus and all-minus have
    # |mean| >= 2, so p = 2/8.
    assert sign_flip_p([1.0, 2.0, 3.0]) == pytest.approx(0.25)
    assert sign_flip_p([1.0, -1.0]) == 1.0  # every assignment is as extreme as mean 0
    assert sign_flip_p([0.5] * 5) == pytest.approx(2 / 32)  # the floor with 5 seeds
    # [3, -1]: |mean| over (+,+) 1, (+,-) 2, (-,+) 2, (-,-) 1 -> 4 of 4 are >= 1
    assert sign_flip_p([3.0, -1.0]) == 1.0
    # [4, 1, 1]: observed 2; |means| 2, 4/3, 4/3, 2/3 (and mirrored) -> 2 of 8
    assert sign_flip_p([4.0, 1.0, 1.0]) == pytest.approx(0.25)
    # [4, 1, -1]: observed 4/3; |means| 4/3, 2, 2/3, 4/3 (and mirrored) -> 6 of 8
    assert sign_flip_p([4.0, 1.0, -1.0]) == pytest.approx(0.75)
    assert math.isnan(sign_flip_p([]))
    sampled = sign_flip_p([1.0] * 12 + [-0.5] * 8 + [0.2])  # 21 values: sampled, not exact
    assert 0.0 < sampled < 0.2


def test_paired_difference_uses_only_common_seeds_and_pairs_them():
    a = {0: 1.0, 1: 2.0, 2: 3.0, 7: 100.0}
    b = {0: 0.5, 1: 1.5, 2: 2.5}
    difference = paired_difference(a, b)
    assert difference.n == 3 and difference.mean == pytest.approx(0.5)
    assert difference.low == pytest.approx(0.5) and difference.high == pytest.approx(0.5)  # no spread
    assert difference.verdict() == "shown: higher"
    # The same numbers unpaired would overlap; pairing removes the shared seed effect.
    assert bootstrap_mean(list(b.values())).high > bootstrap_mean([1.0, 2.0, 3.0]).low


def test_kl_at_reward_interpolates_the_first_crossing():
    trajectory = [(0.0, -0.2), (2.0, 0.2), (6.0, 0.6), (8.0, 0.1), (10.0, 0.9)]
    assert kl_at_reward(trajectory, 0.0) == pytest.approx(1.0)  # half-way from -0.2 to 0.2
    assert kl_at_reward(trajectory, 0.4) == pytest.approx(4.0)
    assert kl_at_reward(trajectory, 0.8) == pytest.approx(8.0 + 2.0 * 0.7 / 0.8)  # after the dip
    assert kl_at_reward(trajectory, -0.5) == 0.0  # reached from the start
    assert math.isnan(kl_at_reward(trajectory, 1.5))  # never reached


def test_reward_at_kl_interpolates_the_first_crossing():
    trajectory = [(0.0, -0.2), (2.0, 0.2), (6.0, 0.6)]
    assert reward_at_kl(trajectory, 1.0) == pytest.approx(0.0)
    assert reward_at_kl(trajectory, 5.0) == pytest.approx(0.5)
    assert math.isnan(reward_at_kl(trajectory, 7.0))


def test_common_levels_are_reached_by_every_trajectory():
    slow = [(0.0, -0.1), (1.0, 0.1), (2.0, 0.3)]
    fast = [(0.0, -0.2), (3.0, 0.5), (9.0, 0.9)]
    rewards = common_levels([slow, fast], 1, (0.25, 0.5, 0.75))
    assert rewards == pytest.approx([0.0, 0.1, 0.2])  # between -0.1 (highest start) and 0.3 (lowest max)
    kls = common_levels([slow, fast], 0, (0.5,))
    assert kls == pytest.approx([1.0])
    for level in rewards:
        assert not math.isnan(kl_at_reward(slow, level)) and not math.isnan(kl_at_reward(fast, level))
    assert common_levels([slow, [(0.0, -0.5), (1.0, -0.3)]], 1, (0.5,)) == []  # one never improves


def test_distinct_n_by_hand():
    assert distinct_n(["a b a", "b a"], 1) == pytest.approx(2 / 5)
    assert distinct_n(["a b a", "b a"], 2) == pytest.approx(2 / 3)  # (a b), (b a), (b a)
    assert distinct_n(["", "x"], 2) == 0.0
