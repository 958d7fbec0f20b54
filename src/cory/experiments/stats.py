"""Statistics for comparing methods over seeds: t and bootstrap confidence intervals, the
exact sign-flip test for differences paired by seed, Holm's correction for a family of tests,
and evaluation trajectories read at a matched reward or a matched KL.

A trajectory is a run's held-out evaluations in time order, as ``(kl, reward)`` points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

Trajectory = list[tuple[float, float]]
@dataclass(frozen=True)
class Interval:
    """A mean over seeds and its confidence interval (``nan`` bounds: one seed)."""

    mean: float
    low: float
    high: float
    n: int

    def __str__(self) -> str:
        if math.isnan(self.mean):
            return "n/a"
        if math.isnan(self.low):
            return f"{self.mean:.3f}"
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"


def bootstrap_mean(values: list[float], level: float = 0.95, resamples: int = 10000, seed: int = 0) -> Interval:
    """The mean of the finite ``values`` and its percentile-bootstrap interval."""
    data = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if data.size == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    if data.size == 1:
        return Interval(float(data[0]), math.nan, math.nan, 1)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(resamples, data.size))].mean(axis=1)
    tail = (1.0 - level) / 2
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return Interval(float(data.mean()), float(low), float(high), int(data.size))


def t_interval(values: list[float], level: float = 0.95) -> Interval:
    """The mean of the finite ``values`` and its Student-t confidence interval (for paired
    differences: the paired t-interval)."""
    data = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if data.size == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    if data.size == 1:
        return Interval(float(data[0]), math.nan, math.nan, 1)
    half = scipy_stats.t.ppf(0.5 + level / 2, data.size - 1) * data.std(ddof=1) / math.sqrt(data.size)
    return Interval(float(data.mean()), float(data.mean() - half), float(data.mean() + half), int(data.size))


def sign_flip_p(differences: list[float], alternative: str = "two-sided", resamples: int = 100000,
                seed: int = 0) -> float:
    """p-value of the sign-flip (paired permutation) test that the differences are symmetric
    around zero: the share of sign assignments whose mean is at least as extreme as the
    observed one -- as far from zero (``two-sided``), as high (``greater``) or as low
    (``less``). Exact up to 16 values (all 2^n assignments), sampled beyond. With n seeds it
    cannot fall below 1 / 2^n one-sided (0.031 for 5) or 2 / 2^n two-sided (0.0625)."""
    data = np.array([d for d in differences if math.isfinite(d)], dtype=float)
    if data.size == 0:
        return math.nan
    if data.size <= 16:
        signs = 1 - 2 * ((np.arange(2 ** data.size)[:, None] >> np.arange(data.size)) & 1)
    else:
        signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(resamples, data.size))
    means, observed = (signs * data).mean(axis=1), data.mean()
    if alternative == "greater":
        return float((means >= observed - 1e-12).mean())
    if alternative == "less":
        return float((means <= observed + 1e-12).mean())
    if alternative != "two-sided":
        raise ValueError(f"alternative must be 'two-sided', 'greater' or 'less', got {alternative!r}")
    return float((np.abs(means) >= abs(observed) - 1e-12).mean())


def smallest_one_sided_p(n: int) -> float:
    """The smallest p-value an exact one-sided sign-flip test over ``n`` values can give."""
    return 2.0 ** -n if n else 1.0


def holm(p_values: list[float]) -> list[float]:
    """Holm-adjusted p-values of a family of tests, in the given order: the i-th smallest of m
    is multiplied by m - i + 1 (i from 1), made non-decreasing in that order and capped at 1.
    An adjusted p at most alpha rejects at family-wise error rate alpha; ``nan`` stays out."""
    finite = sorted((p, i) for i, p in enumerate(p_values) if math.isfinite(p))
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(finite):
        running = max(running, min(1.0, p * (len(finite) - rank)))
        adjusted[i] = running
    return adjusted


def _crossing(points: list[tuple[float, float]], target: float) -> float:
    """``y`` where ``x`` first reaches ``target`` along ``(x, y)`` points in time order,
    linearly interpolated; the first ``y`` if it starts there, ``nan`` if it never does."""
    if not points:
        return math.nan
    if points[0][0] >= target:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 < target <= x1:
            return y0 + (y1 - y0) * (target - x0) / (x1 - x0)
    return math.nan


def kl_at_reward(trajectory: Trajectory, reward: float) -> float:
    """The KL at which the run first reaches ``reward``."""
    return _crossing([(r, kl) for kl, r in trajectory], reward)


def reward_at_kl(trajectory: Trajectory, kl: float) -> float:
    """The reward of the run when its KL first reaches ``kl``."""
    return _crossing(list(trajectory), kl)


def common_levels(trajectories: list[Trajectory], axis: int, fractions: tuple[float, ...]) -> list[float]:
    """Levels of ``axis`` (0: KL, 1: reward) that every trajectory reaches: between the
    highest starting value and the lowest maximum, at ``fractions`` of that range."""
    if not trajectories or any(not t for t in trajectories):
        return []
    low = max(t[0][axis] for t in trajectories)
    high = min(max(point[axis] for point in t) for t in trajectories)
    if not high > low:
        return []
    return [low + (high - low) * f for f in fractions]


def pareto_frontier(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points ``(kl, reward)`` that no other point beats on both axes
    (lower KL and higher reward), sorted by KL."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    frontier, best = [], float("-inf")
    for i in order:
        if points[i][1] > best:
            frontier.append(i)
            best = points[i][1]
    return frontier
