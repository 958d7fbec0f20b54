"""Collective rewards: what each turn trains on, from the task rewards of an episode.

``sum`` credit (CORY's): ``R_i = r_i + lambda * sum_{j != i} r_j`` over the roles of a round;
lambda = 1 is CORY's cooperative game, 0 independent learners, -1 a zero-sum game.

``difference`` credit: a turn earns the others' reward only through what its answer changed,
``R_t = r_t + lambda * sum_{c sees t} (r_c - r_c^{-t})``, where ``r_c^{-t}`` is the reward of
c's agent answering c's prompt without t's answer. In CORY's pair the pioneer trains on
``r_p + lambda * (r_o - r_o^solo)`` and the observer on ``r_o``.

With several rounds, ``turn_discount`` gamma adds the agent's later turns:
``G_(r, i) = R_(r, i) + gamma * G_(r + 1, i)``.
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


def sum_credit(task_rewards: torch.Tensor, n_roles: int, lam: float, normalize: bool = False) -> torch.Tensor:
    """``[turn, batch]`` training rewards: each round's roles mixed as ``collective_rewards``."""
    rounds = task_rewards.view(-1, n_roles, task_rewards.shape[-1])
    return torch.cat([collective_rewards(one_round, lam, normalize) for one_round in rounds])


def difference_credit(task_rewards: torch.Tensor, counterfactual_rewards: dict[tuple[int, int], torch.Tensor],
                      lam: float, normalize: bool = False, eps: float = 1e-8) -> torch.Tensor:
    """``[turn, batch]`` training rewards under difference credit; ``counterfactual_rewards``
    maps each edge ``(source, turn)`` to the rewards of ``turn`` answered without ``source``.
    With ``normalize`` a counterfactual is z-scored with its turn's statistics, so the gain
    stays a difference of the same units."""
    mean = task_rewards.mean(-1, keepdim=True)
    std = task_rewards.std(-1, keepdim=True, unbiased=False) + eps
    rewards = (task_rewards - mean) / std if normalize else task_rewards
    credited = rewards.clone()
    for (source, turn), without in counterfactual_rewards.items():
        baseline = (without - mean[turn]) / std[turn] if normalize else without
        credited[source] += lam * (rewards[turn] - baseline)
    return credited


def discount_turns(rewards: torch.Tensor, n_roles: int, gamma: float) -> torch.Tensor:
    """Add to each turn gamma times the discounted rewards of its role's later turns."""
    if gamma == 0:
        return rewards
    per_round = rewards.view(-1, n_roles, rewards.shape[-1]).clone()
    for round_ in range(per_round.shape[0] - 2, -1, -1):
        per_round[round_] += gamma * per_round[round_ + 1]
    return per_round.view_as(rewards)


def needs_counterfactuals(credit: str) -> bool:
    """Whether credit rule ``credit`` compares a turn with answers given without one of its
    inputs (``difference``) or only with the episode's own answers (``sum``)."""
    return credit == "difference"


def training_rewards(task_rewards: torch.Tensor, counterfactual_rewards: dict[tuple[int, int], torch.Tensor],
                     n_roles: int, credit: str, lam: float, normalize: bool = False,
                     turn_discount: float = 0.0) -> torch.Tensor:
    """``[turn, batch]``: what each turn trains on under ``collective.credit`` (``sum`` or
    ``difference``), ``collective.lambda``, ``normalize`` and ``turn_discount``."""
    if needs_counterfactuals(credit):
        credited = difference_credit(task_rewards, counterfactual_rewards, lam, normalize)
    else:
        credited = sum_credit(task_rewards, n_roles, lam, normalize)
    return discount_turns(credited, n_roles, turn_discount)
