"""Moving-average and group (RLOO / GRPO) baselines."""

import math

import pytest
import torch

from cory.algorithms.reinforce import MovingAverageBaseline, group_normalised_advantages, leave_one_out_advantages


def test_rloo_subtracts_the_mean_of_the_other_samples():
    advantages = leave_one_out_advantages(torch.tensor([1.0, 2.0, 3.0, 5.0, 6.0, 10.0]), group_size=3)
    # group (1, 2, 3): 1 - 2.5, 2 - 2, 3 - 1.5; group (5, 6, 10): 5 - 8, 6 - 7.5, 10 - 5.5
    assert advantages.tolist() == pytest.approx([-1.5, 0.0, 1.5, -3.0, -1.5, 4.5])


def test_grpo_standardises_within_the_group():
    advantages = group_normalised_advantages(torch.tensor([1.0, 3.0]), group_size=2)
    assert advantages.tolist() == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2)], rel=1e-5)


def test_group_size_must_divide_the_batch():
    with pytest.raises(ValueError, match="groups of 2"):
        leave_one_out_advantages(torch.tensor([1.0, 2.0, 3.0]), group_size=2)


def test_moving_average_baseline():
    baseline = MovingAverageBaseline(decay=0.9)
    baseline.update(torch.tensor([1.0, 3.0]))
    assert baseline.value == pytest.approx(2.0)
    baseline.update(torch.tensor([12.0]))
    assert baseline.value == pytest.approx(0.9 * 2.0 + 0.1 * 12.0)
