"""What an agent's sampler is told each call: the sampling settings and the token budgets."""

from __future__ import annotations

import torch

from cory.config.schema import GenerationConfig
from cory.models.generation import SamplingSettings
from cory.seeding import generator


def sampling_settings(gen: GenerationConfig, greedy: bool) -> SamplingSettings:
    """The ``generation:`` section as the sampler reads it; ``greedy`` for evaluation."""
    return SamplingSettings(gen.max_new_tokens, gen.min_new_tokens, gen.temperature,
                            gen.top_k, gen.top_p, gen.repetition_penalty, greedy=greedy,
                            penalise_padding=gen.penalise_padding, filtered_logprobs=gen.logprobs == "sampler")


def scoring_filters(gen: GenerationConfig) -> tuple[int, float]:
    """``(top_k, top_p)`` the scorer applies to recompute log-probs: the sampler's under
    ``generation.logprobs: sampler``, none (0, 1) under ``model``."""
    return (gen.top_k, gen.top_p) if gen.logprobs == "sampler" else (0, 1.0)


def length_budgets(gen: GenerationConfig, seed: int, agent: int, batch: int, step: int,
                   phase: str, cycle: int | None = None) -> torch.Tensor | None:
    """Token budgets drawn from ``generation.length_sampler`` (None when it is off): one per
    row, seeded per agent, or one per batch, seeded without the agent so that every agent of
    the iteration draws the same budget. With ``cycle`` the per-batch draws of training repeat
    with that period (the CORY authors' reseeding at each role exchange)."""
    if gen.length_sampler is None:
        return None
    low, high = gen.length_sampler
    if gen.length_sampler_per == "batch":
        if cycle is not None and phase.startswith("train"):
            step = step % cycle
        drawn = torch.randint(low, high + 1, (1,), generator=generator("length", seed, step, phase))
        return drawn.expand(batch)
    return torch.randint(low, high + 1, (batch,), generator=generator("length", seed, step, agent, phase))


def stratified_budgets(low: int, high: int, rows: int, seed: int) -> list[int]:
    """``rows`` token budgets in which every length of ``[low, high]`` occurs equally often
    (up to one), in an order fixed by ``seed`` alone: evaluation rows that every run, seed
    and method answers under the same budgets."""
    span = high - low + 1
    lengths = low + torch.arange(rows) % span
    order = torch.randperm(rows, generator=generator("eval lengths", seed))
    return lengths[order].tolist()
