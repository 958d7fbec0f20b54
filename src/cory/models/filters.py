"""Sampling filters on logits, shared by the sampler and the scorer: temperature, top-k and
top-p (nucleus). With ``generation.logprobs: sampler`` a response's log-probs are those of the
distribution it was drawn from, the filtered one renormalised, and the scorer recomputes them
through the same filter."""

from __future__ import annotations

import torch


def filter_logits(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """``[..., vocab]`` logits at ``temperature``, the tokens outside the top ``top_k`` (0: off)
    and outside the smallest set holding ``top_p`` of the mass (1: off) set to -inf."""
    logits = logits / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token once the mass before it already reaches top_p; the first always stays.
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def filtered_keeping(logits: torch.Tensor, tokens: torch.Tensor, temperature: float, top_k: int,
                     top_p: float) -> torch.Tensor:
    """``filter_logits`` with each position's own ``tokens`` always kept (a token the sampler
    drew stays scoreable after the policy moved, when the filter alone might drop it)."""
    filtered = filter_logits(logits, temperature, top_k, top_p)
    own = (logits / temperature).gather(-1, tokens.unsqueeze(-1))
    return filtered.scatter(-1, tokens.unsqueeze(-1), own)
