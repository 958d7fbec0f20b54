"""An agent's optimiser and learning-rate schedule, built from the ``ppo:`` section."""

from __future__ import annotations

import math
from typing import Callable

import torch

from cory.config.schema import PPOConfig


def lr_lambda(kind: str, warmup: int, total: int) -> Callable[[int], float]:
    """Multiplier of the base learning rate after ``step`` scheduler steps."""
    def multiplier(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        if kind == "linear":
            return 1.0 - progress
        if kind == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0
    return multiplier


def build_optimizer(params: list[torch.nn.Parameter], ppo: PPOConfig, fused: bool) -> torch.optim.AdamW:
    """AdamW as TRL's PPO; ``fused``: one fused kernel, else the per-parameter loop."""
    return torch.optim.AdamW(params, lr=ppo.learning_rate, eps=ppo.adam_eps, weight_decay=ppo.weight_decay,
                             fused=True if fused else None, foreach=None if fused else False)


def build_scheduler(optimizer: torch.optim.Optimizer, ppo: PPOConfig,
                    total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """One scheduler step per iteration over a run of ``total_steps`` iterations."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_lambda(ppo.lr_scheduler, ppo.warmup_steps, total_steps))
