"""REINFORCE-family baselines: a moving average of returns, and group (RLOO / GRPO) baselines."""

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


def _groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """``rewards`` (``[n_groups * group_size]``, a prompt's samples adjacent) as ``[n_groups, group_size]``."""
    if group_size < 2:
        raise ValueError("a group baseline needs group_size >= 2")
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    return rewards.view(-1, group_size)


def leave_one_out_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """RLOO (Ahmadian et al., 2024): each sequence reward minus the mean of its prompt's
    *other* samples. ``rewards`` is ``[n_groups * group_size]``, a prompt's samples adjacent."""
    grouped = _groups(rewards, group_size)
    others_mean = (grouped.sum(-1, keepdim=True) - grouped) / (group_size - 1)
    return (grouped - others_mean).flatten()


def group_normalised_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6,
                                scale: str = "group") -> torch.Tensor:
    """GRPO (Shao et al., 2024): each sequence reward minus its group's mean, over the std of
    its group (``scale`` "group"), of the whole batch ("batch") or not scaled ("none", Dr. GRPO)."""
    grouped = _groups(rewards, group_size)
    centred = grouped - grouped.mean(-1, keepdim=True)
    if scale == "none":
        return centred.flatten()
    spread = grouped.std(-1, keepdim=True) if scale == "group" else rewards.std()
    return (centred / (spread + eps)).flatten()
