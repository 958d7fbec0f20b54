"""REINFORCE-family advantages: moving-average baseline and group (RLOO / GRPO) baselines."""

from __future__ import annotations

import torch


class MovingAverageBaseline:
    """Exponential moving average of sequence returns: ``b = decay * b + (1 - decay) * mean(G)``."""

    def __init__(self, decay: float) -> None:
        self.decay = float(decay)
        self.value = 0.0
        self.initialised = False

    def update(self, returns: torch.Tensor) -> None:
        batch_mean = returns.detach().double().mean().item()
        if not self.initialised:
            self.value, self.initialised = batch_mean, True
        else:
            self.value = self.decay * self.value + (1.0 - self.decay) * batch_mean

    def state_dict(self) -> dict[str, float | bool]:
        return {"value": self.value, "initialised": self.initialised}

    def load_state_dict(self, state: dict[str, float | bool]) -> None:
        self.value, self.initialised = float(state["value"]), bool(state["initialised"])


def group_advantages(
    rewards: torch.Tensor, group_size: int, kind: str = "rloo", eps: float = 1e-6
) -> torch.Tensor:
    """Sequence-level advantages from a baseline built out of each prompt's group of samples.

    ``rewards`` is ``[n_groups * group_size]`` with the samples of one prompt adjacent.
    ``rloo``: reward minus the mean of the group's *other* samples (Ahmadian et al., 2024).
    ``grpo``: reward minus the group mean, divided by the group std (Shao et al., 2024).
    """
    if group_size < 2:
        raise ValueError("a group baseline needs group_size >= 2")
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    grouped = rewards.view(-1, group_size)
    if kind == "rloo":
        others_mean = (grouped.sum(-1, keepdim=True) - grouped) / (group_size - 1)
        advantages = grouped - others_mean
    elif kind == "grpo":
        advantages = (grouped - grouped.mean(-1, keepdim=True)) / (grouped.std(-1, keepdim=True) + eps)
    else:
        raise ValueError(f"unknown group baseline {kind!r}; choose 'rloo' or 'grpo'")
    return advantages.flatten()
