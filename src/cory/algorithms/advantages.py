"""Generalised advantage estimation and discounted returns over response tokens.

Every ``mask`` here is right-padded: ones for the valid tokens of a row, then zeros.
"""

from __future__ import annotations

import torch

from cory.algorithms.masked import masked_whiten


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    lam: float,
    whiten: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(gamma, lam) for ``[batch, tokens]`` rewards and values.

    The episode ends after the last valid token (the value after it is 0). Returns
    ``(advantages, returns)`` with ``returns = advantages + values`` taken before the
    advantages are whitened over the valid tokens (when ``whiten`` is set).
    """
    values = values * mask
    rewards = rewards * mask
    length = rewards.shape[1]
    running = torch.zeros_like(rewards[:, 0])
    advantages = torch.zeros_like(rewards)
    for t in reversed(range(length)):
        next_value = values[:, t + 1] if t + 1 < length else torch.zeros_like(running)
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        running = delta + gamma * lam * running
        advantages[:, t] = running
    returns = (advantages + values) * mask
    if whiten:
        advantages = masked_whiten(advantages, mask)
    return advantages * mask, returns


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """Reward-to-go ``G_t = sum_k gamma^(k-t) r_k`` over the valid tokens of each row."""
    rewards = rewards * mask
    running = torch.zeros_like(rewards[:, 0])
    returns = torch.zeros_like(rewards)
    for t in reversed(range(rewards.shape[1])):
        running = rewards[:, t] + gamma * running
        returns[:, t] = running
    return returns * mask
