"""Reward shaping and the clipped policy / value losses against hand-computed values."""

import math

import pytest
import torch

from cory.algorithms.ppo import clipped_policy_loss, clipped_value_loss, explained_variance, shape_rewards


def test_shape_rewards_adds_score_at_last_valid_token():
    kl = torch.tensor([[0.1, 0.2, 0.3]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    rewards = shape_rewards(torch.tensor([1.0]), kl, mask, kl_coef=0.5)
    assert rewards[0].tolist() == pytest.approx([-0.05, 0.9, 0.0])


def test_policy_loss_clips_in_the_direction_of_the_advantage():
    new = torch.tensor([[math.log(1.5), math.log(0.5)]])
    old = torch.zeros(1, 2)
    mask = torch.ones(1, 2)
    positive = clipped_policy_loss(new, old, torch.ones(1, 2), mask, cliprange=0.2)
    # ratios 1.5, 0.5 -> max(-1.5, -1.2) = -1.2 and max(-0.5, -0.8) = -0.5
    assert positive.loss.item() == pytest.approx(-0.85)
    assert positive.clip_fraction.item() == pytest.approx(0.5)
    negative = clipped_policy_loss(new, old, -torch.ones(1, 2), mask, cliprange=0.2)
    assert negative.loss.item() == pytest.approx(1.15)
    assert negative.clip_fraction.item() == pytest.approx(0.5)
    expected_kl = 0.5 * (math.log(1.5) ** 2 + math.log(0.5) ** 2) / 2
    assert positive.approx_kl.item() == pytest.approx(expected_kl, rel=1e-6)


def test_policy_loss_respects_the_mask():
    new = torch.tensor([[0.0, 5.0]])
    loss = clipped_policy_loss(new, torch.zeros(1, 2), torch.ones(1, 2), torch.tensor([[1.0, 0.0]]), 0.2)
    assert loss.loss.item() == pytest.approx(-1.0)


def test_infinite_cliprange_is_plain_importance_weighted_pg():
    new = torch.tensor([[math.log(3.0)]])
    loss = clipped_policy_loss(new, torch.zeros(1, 1), torch.tensor([[2.0]]), torch.ones(1, 1), float("inf"))
    assert loss.loss.item() == pytest.approx(-6.0)


def test_value_loss_takes_the_pessimistic_branch():
    values = torch.tensor([[1.0, 2.0]])
    old = torch.tensor([[0.5, 0.5]])
    returns = torch.tensor([[1.2, 0.0]])
    loss = clipped_value_loss(values, old, returns, torch.ones(1, 2), cliprange_value=0.2)
    # clipped values 0.7, 0.7: squares max(0.04, 0.25) = 0.25 and max(4, 0.49) = 4
    assert loss.loss.item() == pytest.approx(0.5 * (0.25 + 4.0) / 2)
    assert loss.clip_fraction.item() == pytest.approx(0.5)


def test_explained_variance():
    returns = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    mask = torch.ones(1, 4)
    assert explained_variance(returns, returns, mask) == pytest.approx(1.0)
    assert explained_variance(torch.zeros(1, 4), returns, mask) == pytest.approx(0.0)
