"""KL estimators and KL controllers against hand-computed values."""

import math

import pytest
import torch

from cory.algorithms.kl import AdaptiveKLController, FixedKLController, kl_per_token


def test_sample_estimators():
    logp = torch.tensor([-1.0, -2.0])
    ref = torch.tensor([-1.5, -1.0])
    assert kl_per_token(logp, ref, "kl").tolist() == pytest.approx([0.5, -1.0])
    assert kl_per_token(logp, ref, "abs").tolist() == pytest.approx([0.5, 1.0])
    assert kl_per_token(logp, ref, "mse").tolist() == pytest.approx([0.125, 0.5])


def test_full_kl_over_the_vocabulary():
    p = torch.tensor([[[0.5, 0.5]]]).log()
    q = torch.tensor([[[0.9, 0.1]]]).log()
    expected = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    value = kl_per_token(None, None, "full", full_logprobs=p, full_ref_logprobs=q)
    assert value.item() == pytest.approx(expected, rel=1e-6)


def test_full_kl_needs_distributions():
    with pytest.raises(ValueError, match="full"):
        kl_per_token(torch.zeros(1), torch.zeros(1), "full")


def test_adaptive_controller_update():
    controller = AdaptiveKLController(0.2, target=6.0, horizon=10000)
    controller.update(current_kl=12.0, n_steps=256)  # error clipped to +0.2
    assert controller.value == pytest.approx(0.2 * (1 + 0.2 * 256 / 10000))
    controller = AdaptiveKLController(0.2, target=6.0, horizon=10000)
    controller.update(current_kl=6.6, n_steps=16)  # error 0.1
    assert controller.value == pytest.approx(0.2 * (1 + 0.1 * 16 / 10000))
    controller.update(current_kl=0.0, n_steps=100)  # error clipped to -0.2
    assert controller.value == pytest.approx(0.2 * (1 + 0.1 * 16 / 10000) * (1 - 0.2 * 100 / 10000))


def test_fixed_controller_and_state_round_trip():
    fixed = FixedKLController(0.05)
    fixed.update(100.0, 10)
    assert fixed.value == 0.05
    adaptive = AdaptiveKLController(0.2, 6.0, 100)
    adaptive.update(9.0, 8)
    restored = AdaptiveKLController(1.0, 6.0, 100)
    restored.load_state_dict(adaptive.state_dict())
    assert restored.value == adaptive.value
