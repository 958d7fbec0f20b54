"""Suite statistics on hand-made numbers: intervals, paired differences, matched levels."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cory.experiments.stats import (Interval, bootstrap_mean, common_levels, holm, kl_at_reward, reward_at_kl,
                                    sign_flip_p, smallest_one_sided_p, t_interval)
from cory.multi.summary import distinct_n


def test_bootstrap_interval_matches_a_hand_resampling():
    values = [1.0, 2.0, 4.0]
    got = bootstrap_mean(values, level=0.9, resamples=2000, seed=3)
    rng = np.random.default_rng(3)
    means = np.array(values)[rng.integers(0, 3, size=(2000, 3))].mean(1)
    assert got.mean == pytest.approx(7 / 3)
    assert (got.low, got.high) == pytest.approx(tuple(np.quantile(means, [0.05, 0.95])))
    assert 1.0 <= got.low < got.mean < got.high <= 4.0 and got.n == 3


def test_interval_edge_cases():
    assert math.isnan(bootstrap_mean([]).mean)
    single = bootstrap_mean([2.0, math.nan])  # non-finite values are dropped
    assert single.mean == 2.0 and math.isnan(single.low) and single.n == 1
    assert bootstrap_mean([0.5, 0.5, 0.5]) == Interval(0.5, 0.5, 0.5, 3)
    assert str(Interval(0.1, -0.3, 0.5, 5)) == "0.100 [-0.300, 0.500]"


def test_t_interval_by_hand():
    # [1, 2, 3, 6]: mean 3, sample sd sqrt(14/3); t(0.975, 3) = 3.182446305
    got = t_interval([1.0, 2.0, 3.0, 6.0, math.nan])
    half = 3.182446305284263 * math.sqrt(14 / 3) / 2
    assert got.n == 4 and got.mean == pytest.approx(3.0)
    assert (got.low, got.high) == pytest.approx((3.0 - half, 3.0 + half))
    # 90 %: t(0.95, 3) = 2.353363435
    assert t_interval([1.0, 2.0, 3.0, 6.0], level=0.9).high == pytest.approx(3.0 + 2.353363435 * math.sqrt(14 / 3) / 2)
    assert math.isnan(t_interval([1.0]).low) and t_interval([]).n == 0
    # the t-interval is wider than the percentile bootstrap with few seeds
    values = [0.2, 0.5, 0.9]
    assert t_interval(values).low < bootstrap_mean(values).low


def test_one_sided_sign_flip_by_hand():
    # [4, 1, -1]: means over the 8 assignments 4/3, 2, 2/3, 4/3, -4/3, -2/3, -2, -4/3;
    # observed 4/3 -> 'greater': 4/3, 2, 4/3 = 3 of 8; 'less': all but 2 = 6 of 8
    assert sign_flip_p([4.0, 1.0, -1.0], "greater") == pytest.approx(3 / 8)
    assert sign_flip_p([4.0, 1.0, -1.0], "less") == pytest.approx(7 / 8)
    assert sign_flip_p([0.5] * 5, "greater") == pytest.approx(1 / 32) == smallest_one_sided_p(5)
    assert sign_flip_p([-0.5] * 5, "greater") == 1.0
    with pytest.raises(ValueError, match="alternative"):
        sign_flip_p([1.0], "bigger")


def test_sign_flip_p_by_hand():
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


def test_holm_by_hand():
    # sorted 0.01, 0.02, 0.04, 0.30 -> x4, x3, x2, x1 = 0.04, 0.06, 0.08, 0.30, in input order
    assert holm([0.04, 0.30, 0.01, 0.02]) == pytest.approx([0.08, 0.30, 0.04, 0.06])
    # non-decreasing in rank order: 0.2 x 3 = 0.6, then 0.21 x 2 = 0.42 is raised to 0.6
    assert holm([0.2, 0.21, 0.9]) == pytest.approx([0.6, 0.6, 0.9])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    adjusted = holm([0.01, math.nan, 0.03])  # nan is no test: the family has two
    assert adjusted[0] == pytest.approx(0.02) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.03)
    assert holm([]) == []


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
