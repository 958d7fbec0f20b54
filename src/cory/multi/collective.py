"""Collective rewards: ``R_i = r_i + lambda * sum_{j != i} r_j``.

lambda = 1 is CORY's cooperative game, 0 independent learners, -1 a zero-sum game.
"""

from __future__ import annotations

import torch


def normalise_rewards(task_rewards: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """z-score each agent's row of ``[n_agents, batch]`` rewards over the batch."""
    mean = task_rewards.mean(-1, keepdim=True)
    std = task_rewards.std(-1, keepdim=True, unbiased=False)
    return (task_rewards - mean) / (std + eps)


def collective_rewards(task_rewards: torch.Tensor, lam: float, normalize: bool = False) -> torch.Tensor:
    """Mix ``[n_agents, batch]`` task rewards into each agent's training reward."""
    rewards = normalise_rewards(task_rewards) if normalize else task_rewards
    others = rewards.sum(0, keepdim=True) - rewards
    return rewards + lam * others
