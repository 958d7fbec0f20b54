"""Token-level PPO: KL-shaped rewards and the clipped policy and value losses."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cory.algorithms.masked import masked_mean, masked_var


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of the last valid token of each right-padded row (0 for an empty row)."""
    return (mask.sum(-1).long() - 1).clamp(min=0)


def shape_rewards(
    scores: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, kl_coef: float
) -> torch.Tensor:
    """Per-token rewards: ``-kl_coef * kl`` at every token, plus the score at the last one."""
    rewards = -kl_coef * kl * mask
    last = last_token_index(mask)
    rewards[torch.arange(rewards.shape[0], device=rewards.device), last] += scores.to(rewards.dtype)
    return rewards * mask


@dataclass
class PolicyLoss:
    """The clipped surrogate loss and the statistics PPO logs about it."""

    loss: torch.Tensor
    clip_fraction: torch.Tensor
    approx_kl: torch.Tensor
    ratio_mean: torch.Tensor
    per_token: torch.Tensor  # the weighted surrogate at each token (``loss`` is its masked mean)


def clipped_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cliprange: float,
    weights: torch.Tensor | None = None,
    cliprange_high: float | None = None,
    sequence_ratio: bool = False,
    delta: float | None = None,
) -> PolicyLoss:
    """``mean(w * max(-A * r, -A * clip(r, 1 - eps, 1 + eps_high)))`` with ``r = p / p_old``
    per token, ``w`` the (detached) importance weights of a rollout correction (1 without) and
    ``eps_high`` the upper clip (clip-higher; ``cliprange`` without). With ``sequence_ratio``
    (GSPO) every token of a row takes the row's ratio ``exp(mean_t (log p - log p_old))``.
    With ``delta`` (two-sided clipping) the unclipped term reads ``min(r, delta)``, so a token
    of negative advantage cannot push its loss up without bound.

    ``approx_kl`` is ``0.5 * mean((log p - log p_old)^2)``, as in TRL.
    """
    log_ratio = logprobs - old_logprobs
    if sequence_ratio:
        per_row = (log_ratio * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)
        log_ratio = per_row.expand_as(log_ratio)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * (ratio if delta is None else ratio.clamp(max=delta))
    high = cliprange if cliprange_high is None else cliprange_high
    clipped = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + high)
    per_token = torch.maximum(unclipped, clipped)
    if weights is not None:
        per_token = per_token * weights
    loss = masked_mean(per_token, mask)
    with torch.no_grad():
        clip_fraction = masked_mean((clipped > unclipped).float(), mask)
        approx_kl = 0.5 * masked_mean(log_ratio.square(), mask)
        ratio_mean = masked_mean(ratio, mask)
    return PolicyLoss(loss, clip_fraction, approx_kl, ratio_mean, per_token)


@dataclass
class ValueLoss:
    """The clipped value loss and the fraction of tokens where clipping was active."""

    loss: torch.Tensor
    clip_fraction: torch.Tensor


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    cliprange_value: float,
) -> ValueLoss:
    """``0.5 * mean(max((V - G)^2, (clip(V, V_old +- eps) - G)^2))`` over valid tokens."""
    clipped_values = old_values + torch.clamp(values - old_values, -cliprange_value, cliprange_value)
    unclipped = (values - returns).square()
    clipped = (clipped_values - returns).square()
    loss = 0.5 * masked_mean(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        clip_fraction = masked_mean((clipped > unclipped).float(), mask)
    return ValueLoss(loss, clip_fraction)


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """``1 - Var(G - V) / Var(G)`` over the valid tokens: how much of the return V explains."""
    var_returns = masked_var(returns, mask)
    if var_returns.item() == 0:
        return float("nan")
    return (1.0 - masked_var(returns - values, mask) / var_returns).item()
