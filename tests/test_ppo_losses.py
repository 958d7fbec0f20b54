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


def test_truncated_importance_sampling_weighs_each_tokens_loss_by_the_capped_ratio():
    """generation.vllm.correction: tis, by hand: the policy gave the two sampled tokens
    log-probs log 0.5 and log 0.2, the sampler log 0.25 and log 0.4; C = 1.5."""
    from cory.agents.settings import objective_of
    from cory.batches import MiniBatch
    from cory.config.schema import AlgorithmConfig, PPOConfig
    from cory.algorithms.objective import minibatch_loss
    from cory.models.policy import PolicyOutput

    old = torch.log(torch.tensor([[0.5, 0.2]]))
    sampler = torch.log(torch.tensor([[0.25, 0.4]]))
    ones = torch.ones(1, 2)
    batch = MiniBatch(torch.zeros(1, 1, dtype=torch.long), torch.ones(1, 1, dtype=torch.long),
                      torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 2, dtype=torch.long),
                      old, torch.zeros(1, 2), ones, ones, sampler, old)
    out = PolicyOutput(logprobs=old.clone(), values=torch.zeros(1, 2), entropy=None, logits=None)  # ratio 1
    objective = objective_of(AlgorithmConfig(name="ppo"), PPOConfig(vf_coef=0.0), tis_cap=1.5)
    loss, stats = minibatch_loss(objective, out, batch)
    # weights min(0.5 / 0.25, 1.5) = 1.5 and min(0.2 / 0.4, 1.5) = 0.5; per-token loss -A * 1 = -1
    assert stats["policy_loss"].item() == pytest.approx(-(1.5 + 0.5) / 2)
    assert stats["tis_weight"].item() == pytest.approx(1.0)
    assert stats["tis_truncated"].item() == pytest.approx(0.5)
    plain, plain_stats = minibatch_loss(objective_of(AlgorithmConfig(name="ppo"), PPOConfig(vf_coef=0.0)), out, batch)
    assert plain_stats["policy_loss"].item() == pytest.approx(-1.0) and "tis_weight" not in plain_stats


def test_the_mismatch_kl_is_the_k3_estimator_on_the_sampled_tokens():
    from cory.agents.engine_sampling import mismatch_kl

    sampler = torch.log(torch.tensor([[0.5, 0.25, 0.9]]))
    policy = torch.log(torch.tensor([[0.25, 0.25, 0.1]]))
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # the third token is padding
    # l = log 0.5, 0: k3 = (0.5 - 1 - log 0.5) + 0, over two tokens
    assert mismatch_kl(sampler, policy, mask) == pytest.approx((0.5 - 1 - math.log(0.5)) / 2)
    assert mismatch_kl(sampler, sampler, mask) == 0.0
