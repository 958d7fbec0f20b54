"""What an algorithm optimises: its advantages and returns, and its mini-batch loss, read
from its registry entry (``cory.algorithms.registry``) and the numbers it is given.

Pure tensor maths: the numbers come in an ``Objective`` (``cory.agents.settings`` builds it
from the ``ppo:`` and ``algorithm:`` sections), tensors in a ``Rollout`` or ``MiniBatch``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

import torch

from cory.algorithms.advantages import discounted_returns, gae
from cory.algorithms.loss_reduction import KLLossEstimator, LossType, StepSize, kl_loss_term, step_part
from cory.algorithms.masked import masked_mean, masked_whiten
from cory.algorithms.ppo import clipped_policy_loss, clipped_value_loss, shape_rewards
from cory.algorithms.registry import Algorithm
from cory.algorithms.reinforce import MovingAverageBaseline, group_normalised_advantages, leave_one_out_advantages
from cory.batches import MiniBatch, Rollout


@dataclass(frozen=True)
class Objective:
    """An algorithm and every number its targets and loss read."""

    algorithm: Algorithm
    gamma: float
    lam: float
    whiten_rewards: bool
    whiten_advantages: bool
    returns: Literal["discounted", "trl_gae"]  # the 'returns' advantage's estimator
    whiten_returns: bool
    group_size: int
    cliprange: float
    cliprange_value: float
    vf_coef: float
    ratio_threshold: float | None
    tis_cap: float | None = None  # truncated importance sampling against the sampler (vLLM)
    loss_type: LossType | None = None  # None: TRL 0.7's token mean per mini-batch
    beta: float = 0.0  # weight of the KL loss term
    kl_estimator: KLLossEstimator = "k3"
    cliprange_high: float | None = None  # clip-higher; None: cliprange
    max_new_tokens: int = 0  # dr_grpo's constant
    scale_rewards: Literal["group", "batch", "none"] = "group"  # grpo's advantage scale
    sequence_ratio: bool = False  # GSPO: one importance ratio per sequence
    delta: float | None = None  # two-sided clipping: the unclipped ratio's cap


@dataclass
class Targets:
    """Per-token advantages and returns of a whole rollout, plus the shaped rewards."""

    advantages: torch.Tensor
    returns: torch.Tensor
    rewards: torch.Tensor


class ScoredTokens(Protocol):
    """A policy forward over a mini-batch (``cory.models.policy.PolicyOutput``)."""

    logprobs: torch.Tensor
    values: torch.Tensor
    entropy: torch.Tensor | None


def compute_targets(objective: Objective, rollout: Rollout, scores: torch.Tensor, kl_coef: float,
                    baseline: MovingAverageBaseline | None) -> Targets:
    """Advantages and returns from (transformed) scores and the KL, by the algorithm's
    ``advantage`` rule. A ``returns_minus_baseline`` algorithm updates its ``baseline``."""
    algorithm, mask = objective.algorithm, rollout.response_mask.float()
    rewards = shape_rewards(scores, rollout.kl_tokens, mask, kl_coef)
    if objective.whiten_rewards and not algorithm.grouped:
        rewards = masked_whiten(rewards, mask, shift_mean=False) * mask
    match algorithm.advantage:
        case "gae":
            advantages, returns = gae(rewards, rollout.values, mask, objective.gamma, objective.lam,
                                      whiten=objective.whiten_advantages)
        case "returns":
            if objective.returns == "trl_gae":
                _, returns = gae(rewards, rollout.values, mask, objective.gamma, objective.lam, whiten=False)
            else:
                returns = discounted_returns(rewards, mask, objective.gamma)
            advantages = masked_whiten(returns, mask) * mask if objective.whiten_returns else returns
        case "returns_minus_baseline":
            if baseline is None:
                raise ValueError(f"{algorithm.name} needs a moving-average baseline")
            returns = discounted_returns(rewards, mask, objective.gamma)
            sequence_return = returns[:, 0]
            level = baseline.value if baseline.initialised else sequence_return.mean().item()
            baseline.update(sequence_return)
            advantages = (returns - level) * mask
        case "leave_one_out":
            advantages = leave_one_out_advantages(rewards.sum(-1), objective.group_size)[:, None] * mask
            returns = advantages.clone()
        case "group_normalised":
            advantages = group_normalised_advantages(rewards.sum(-1), objective.group_size,
                                                     scale=objective.scale_rewards)[:, None] * mask
            returns = advantages.clone()
    return Targets(advantages, returns, rewards)


def minibatch_loss(
    objective: Objective, out: ScoredTokens, batch: MiniBatch,
    over_ranks: Callable[[torch.Tensor], torch.Tensor] = lambda value: value,
    step: StepSize | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss to minimise on one mini-batch and the statistics to log about it.
    ``over_ranks`` turns a token mean of this rank's rows into the whole mini-batch's (a
    sharded agent's ranks each hold some rows); the ratio guard decides on that. With an
    ``objective.loss_type`` the loss is this mini-batch's part of its optimiser ``step``'s
    (``cory.algorithms.loss_reduction``); without, the mini-batch's token mean."""
    mask = batch.response_mask.float()
    algorithm = objective.algorithm
    cliprange = objective.cliprange if algorithm.clipped else float("inf")
    cap, weights = objective.tis_cap, None
    if cap is not None:  # min(p_policy / p_sampler, C) at the rollout's policy
        weights = torch.exp(batch.old_logprobs - batch.sampler_logprobs).clamp(max=cap).detach()
    high = objective.cliprange_high if algorithm.clipped else None
    policy = clipped_policy_loss(out.logprobs, batch.old_logprobs, batch.advantages, mask, cliprange, weights, high,
                                 objective.sequence_ratio, objective.delta if algorithm.clipped else None)
    stats = {
        "policy_loss": policy.loss.detach(),
        "clip_fraction": policy.clip_fraction,
        "approx_kl": policy.approx_kl,
        "ratio": policy.ratio_mean,
    }
    if cap is not None and weights is not None:
        stats["tis_weight"] = masked_mean(weights, mask)
        stats["tis_truncated"] = masked_mean((weights >= cap).float(), mask)
    per_token, loss = policy.per_token, policy.loss
    if objective.beta:
        kl = kl_loss_term(out.logprobs, batch.ref_logprobs, objective.kl_estimator)
        per_token = per_token + objective.beta * kl
        loss = masked_mean(per_token, mask)
        stats["kl_loss"] = masked_mean(kl, mask).detach()
    if objective.loss_type is not None:
        if step is None:
            raise ValueError(f"loss type {objective.loss_type} needs the optimiser step's size")
        loss = step_part(per_token, mask, objective.loss_type, step, objective.max_new_tokens)
    if algorithm.value_loss:
        value = clipped_value_loss(out.values, batch.old_values, batch.returns, mask, objective.cliprange_value)
        loss = loss + objective.vf_coef * value.loss
        stats["value_loss"] = value.loss.detach()
        stats["value_clip_fraction"] = value.clip_fraction
    threshold = objective.ratio_threshold
    guarded = threshold is not None and over_ranks(policy.ratio_mean).item() > threshold
    if guarded:  # TRL zeroes the losses; the optimiser still steps on its momentum
        loss = loss * 0.0
    stats["ratio_guarded"] = torch.tensor(float(guarded), device=loss.device)
    if out.entropy is not None:
        stats["entropy"] = masked_mean(out.entropy, mask)
    return loss, stats
