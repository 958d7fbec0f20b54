"""From per-token losses to one optimiser step's loss: TRL's loss types, each with the
normaliser it documents, and the estimators of a KL loss term.

An optimiser step is ``ppo.gradient_accumulation_steps`` mini-batches, on one rank or, for a
sharded agent, split over ranks. Its size is counted before its first micro-batch runs, so each
micro-batch's part is already divided by the whole step's normaliser and the parts add up to
the same gradient whatever the split (tests/test_loss_types.py):

| loss type | a step's loss |
|---|---|
| ``grpo`` | mean over its sequences of each sequence's token mean |
| ``bnpo`` | sum over this rank's tokens / this rank's tokens (ranks then averaged) |
| ``dr_grpo`` | sum over tokens / (sequences × ``generation.max_new_tokens``) |
| ``dapo`` | sum over tokens / tokens of every rank |

So a 1,000-token answer weighs 100 times a 10-token one under ``bnpo``, ``dapo`` and
``dr_grpo`` (per token alike), and the same under ``grpo`` (per sequence alike).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo"]
KLLossEstimator = Literal["k1", "k2", "k3"]


@dataclass(frozen=True)
class StepSize:
    """What one optimiser step holds: response tokens and sequences on this rank, and on
    every rank together (the same numbers without sharding)."""

    tokens: float
    sequences: float
    all_tokens: float
    all_sequences: float


def step_part(per_token: torch.Tensor, mask: torch.Tensor, loss_type: LossType, step: StepSize,
              max_new_tokens: int) -> torch.Tensor:
    """This micro-batch's part of its step's loss under ``loss_type``: the parts of a step's
    micro-batches sum to the step's loss (over ranks too, but for ``bnpo``, which is averaged)."""
    if loss_type == "grpo":
        per_sequence = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        return per_sequence.sum() / max(step.all_sequences, 1.0)
    total = (per_token * mask).sum()
    if loss_type == "bnpo":
        return total / max(step.tokens, 1.0)
    if loss_type == "dr_grpo":
        return total / (max(step.all_sequences, 1.0) * max_new_tokens)
    if loss_type == "dapo":
        return total / max(step.all_tokens, 1.0)
    raise ValueError(f"unknown loss type {loss_type!r}")


def kl_loss_term(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: KLLossEstimator) -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from sampled tokens, with
    ``d = log p - log p_ref``: k1 = d, k2 = d² / 2, k3 = exp(-d) + d - 1 (non-negative, low
    variance; TRL's GRPO and verl's ``low_var_kl``)."""
    d = logprobs - ref_logprobs
    if estimator == "k1":
        return d
    if estimator == "k2":
        return 0.5 * d.square()
    if estimator == "k3":
        return torch.exp(-d) + d - 1.0
    raise ValueError(f"unknown KL estimator {estimator!r}")
