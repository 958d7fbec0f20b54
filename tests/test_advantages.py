"""GAE, discounted returns and whitening against hand-computed values."""

import math

import pytest
import torch

from cory.algorithms.advantages import discounted_returns, gae
from cory.algorithms.masked import masked_mean, masked_var, masked_whiten


def test_gae_matches_hand_computation():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7]])
    mask = torch.ones(1, 3)
    advantages, returns = gae(rewards, values, mask, gamma=1.0, lam=0.95, whiten=False)
    # t=2: 1 - 0.7 = 0.3; t=1: 0.1 + 0.95 * 0.3 = 0.385; t=0: 0.1 + 0.95 * 0.385 = 0.46575
    assert advantages[0].tolist() == pytest.approx([0.46575, 0.385, 0.3])
    assert returns[0].tolist() == pytest.approx([0.96575, 0.985, 1.0])


def test_gae_ignores_padding_after_the_last_token():
    rewards = torch.tensor([[0.2, 1.0, 5.0]])
    values = torch.tensor([[0.5, 0.4, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    advantages, returns = gae(rewards, values, mask, gamma=0.9, lam=0.5, whiten=False)
    # t=1: 1.0 - 0.4 = 0.6; t=0: 0.2 + 0.9 * 0.4 - 0.5 + 0.45 * 0.6 = 0.33
    assert advantages[0].tolist() == pytest.approx([0.33, 0.6, 0.0])
    assert returns[0].tolist() == pytest.approx([0.83, 1.0, 0.0])


def test_gae_whitens_over_valid_tokens_only():
    rewards = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    values = torch.zeros(2, 2)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    advantages, _ = gae(rewards, values, mask, gamma=1.0, lam=1.0, whiten=True)
    valid = advantages[mask.bool()]
    assert valid.mean().item() == pytest.approx(0.0, abs=1e-6)
    assert valid.var(unbiased=True).item() == pytest.approx(1.0, rel=1e-4)
    assert advantages[1, 1].item() == 0.0


def test_discounted_returns():
    rewards = torch.tensor([[1.0, 0.0, 2.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    returns = discounted_returns(rewards, mask, gamma=0.5)
    assert returns[0].tolist() == pytest.approx([1.5, 1.0, 2.0, 0.0])


def test_masked_moments_and_whitening():
    values = torch.tensor([1.0, 2.0, 3.0, 4.0, 100.0])
    mask = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0])
    assert masked_mean(values, mask).item() == pytest.approx(2.5)
    assert masked_var(values, mask).item() == pytest.approx(5.0 / 3.0)
    assert masked_var(values, mask, unbiased=False).item() == pytest.approx(1.25)
    whitened = masked_whiten(values, mask)
    expected = [(v - 2.5) / math.sqrt(5.0 / 3.0) for v in (1.0, 2.0, 3.0, 4.0)]
    assert whitened[:4].tolist() == pytest.approx(expected, rel=1e-5)
    unshifted = masked_whiten(values, mask, shift_mean=False)
    assert unshifted[:4].tolist() == pytest.approx([e + 2.5 for e in expected], rel=1e-5)
