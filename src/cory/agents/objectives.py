"""What each algorithm optimises: its advantages and returns, and its mini-batch loss.

``ppo``            GAE advantages, clipped policy loss + clipped value loss.
``reinforce_clip`` the CORY authors' REINFORCE: PPO-clip on returns used as advantages, no value
                   loss; ``algorithm.returns: trl_gae`` computes them exactly as their fork
                   (GAE returns of a value head that is never trained), not whitened.
``reinforce``      classic REINFORCE: returns minus a moving-average baseline, no clipping.
``rloo`` / ``grpo`` sequence-level group baselines (several samples per prompt), PPO-clip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from cory.algorithms.advantages import discounted_returns, gae
from cory.algorithms.masked import masked_mean, masked_whiten
from cory.algorithms.ppo import clipped_policy_loss, clipped_value_loss, shape_rewards
from cory.algorithms.registry import ALGORITHMS, algorithm_named
from cory.algorithms.reinforce import MovingAverageBaseline, group_advantages
from cory.config import AlgorithmConfig, PPOConfig
from cory.models.policy import PolicyOutput
from cory.rollout import MiniBatch, Rollout

def returns_need_values(algorithm: AlgorithmConfig) -> bool:
    """Whether the returns read the value head although the algorithm never trains it."""
    return algorithm.name == "reinforce_clip" and algorithm.returns == "trl_gae"


@dataclass
class Targets:
    """Per-token advantages and returns of a whole rollout, plus the shaped rewards."""

    advantages: torch.Tensor
    returns: torch.Tensor
    rewards: torch.Tensor


def _group_targets(algorithm: AlgorithmConfig, ppo: PPOConfig, rollout: Rollout, rewards: torch.Tensor,
                   baseline: MovingAverageBaseline | None) -> Targets:
    mask = rollout.response_mask.float()
    advantage = group_advantages(rewards.sum(-1), algorithm.group_size, kind=algorithm.name)
    advantages = advantage[:, None] * mask
    return Targets(advantages, advantages.clone(), rewards)


def _ppo_targets(algorithm: AlgorithmConfig, ppo: PPOConfig, rollout: Rollout, rewards: torch.Tensor,
                 baseline: MovingAverageBaseline | None) -> Targets:
    advantages, returns = gae(rewards, rollout.values, rollout.response_mask.float(), ppo.gamma, ppo.lam,
                              whiten=ppo.whiten_advantages)
    return Targets(advantages, returns, rewards)


def _reinforce_clip_targets(algorithm: AlgorithmConfig, ppo: PPOConfig, rollout: Rollout, rewards: torch.Tensor,
                            baseline: MovingAverageBaseline | None) -> Targets:
    mask = rollout.response_mask.float()
    if algorithm.returns == "trl_gae":
        _, returns = gae(rewards, rollout.values, mask, ppo.gamma, ppo.lam, whiten=False)
    else:
        returns = discounted_returns(rewards, mask, ppo.gamma)
    advantages = masked_whiten(returns, mask) * mask if algorithm.whiten_returns else returns
    return Targets(advantages, returns, rewards)


def _reinforce_targets(algorithm: AlgorithmConfig, ppo: PPOConfig, rollout: Rollout, rewards: torch.Tensor,
                       baseline: MovingAverageBaseline | None) -> Targets:
    assert baseline is not None, f"{algorithm.name} needs a moving-average baseline"
    mask = rollout.response_mask.float()
    returns = discounted_returns(rewards, mask, ppo.gamma)
    sequence_return = returns[:, 0]
    level = baseline.value if baseline.initialised else sequence_return.mean().item()
    baseline.update(sequence_return)
    return Targets((returns - level) * mask, returns, rewards)


# Each algorithm of the registry (cory.algorithms.registry) and how it turns rewards into targets.
TARGETS: dict[str, Callable[..., Targets]] = {
    "ppo": _ppo_targets, "reinforce_clip": _reinforce_clip_targets, "reinforce": _reinforce_targets,
    "rloo": _group_targets, "grpo": _group_targets,
}
assert set(TARGETS) == set(ALGORITHMS), "every registered algorithm needs its targets"


def compute_targets(
    algorithm: AlgorithmConfig,
    ppo: PPOConfig,
    rollout: Rollout,
    scores: torch.Tensor,
    kl_coef: float,
    baseline: MovingAverageBaseline | None,
) -> Targets:
    """Advantages and returns for ``algorithm`` from (transformed) scores and the KL."""
    mask = rollout.response_mask.float()
    rewards = shape_rewards(scores, rollout.kl_tokens, mask, kl_coef)
    if ppo.whiten_rewards and not algorithm_named(algorithm.name).grouped:
        rewards = masked_whiten(rewards, mask, shift_mean=False) * mask
    return TARGETS[algorithm.name](algorithm, ppo, rollout, rewards, baseline)


def minibatch_loss(
    algorithm: AlgorithmConfig, ppo: PPOConfig, out: PolicyOutput, batch: MiniBatch,
    over_ranks: Callable[[torch.Tensor], torch.Tensor] = lambda value: value,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss to minimise on one mini-batch and the statistics to log about it.
    ``over_ranks`` turns a token mean of this rank's rows into the whole mini-batch's (a
    sharded agent's ranks each hold some rows); the ratio guard decides on that."""
    mask = batch.response_mask.float()
    spec = algorithm_named(algorithm.name)
    cliprange = ppo.cliprange if spec.clipped else float("inf")
    policy = clipped_policy_loss(out.logprobs, batch.old_logprobs, batch.advantages, mask, cliprange)
    stats = {
        "policy_loss": policy.loss.detach(),
        "clip_fraction": policy.clip_fraction,
        "approx_kl": policy.approx_kl,
        "ratio": policy.ratio_mean,
    }
    loss = policy.loss
    if spec.value_loss:
        value = clipped_value_loss(out.values, batch.old_values, batch.returns, mask, ppo.cliprange_value)
        loss = loss + ppo.vf_coef * value.loss
        stats["value_loss"] = value.loss.detach()
        stats["value_clip_fraction"] = value.clip_fraction
    guarded = ppo.ratio_threshold is not None and over_ranks(policy.ratio_mean).item() > ppo.ratio_threshold
    if guarded:  # TRL zeroes the losses; the optimiser still steps on its momentum
        loss = loss * 0.0
    stats["ratio_guarded"] = torch.tensor(float(guarded), device=loss.device)
    if out.entropy is not None:
        stats["entropy"] = masked_mean(out.entropy, mask)
    return loss, stats
