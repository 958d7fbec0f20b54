"""Batched sampling with a KV cache, left-padded prompts and right-padded responses.

The sampler records, for every sampled token, its log-prob under the policy and the value
of the state before it, so the rollout needs no second policy forward. By default
(``generation.logprobs: model``, as TRL) that log-prob is the LM's distribution at the
sampling temperature, before repetition penalty, top-k / top-p and min-length filtering:
those filters shape how responses are drawn, but the policy PPO trains is the LM itself. With
``logprobs: sampler`` it is the top-k / top-p filtered distribution, renormalised, the one
the token was drawn from. Either way the recorded log-probs are the ones the update
recomputes, or the first PPO ratio would not be 1.

Two decode loops give the same tokens: the default grows a dynamic KV cache and the
attention mask by one column per token; ``Decoder(static=True)`` preallocates the cache and
the mask once per batch (their length rounded up to ``STATIC_BUCKET`` tokens, so that batches
share shapes) and writes each step into them in place, so every decode step has the same
shapes and can be captured (``Decoder(compiled=True)``: ``torch.compile`` with
``mode="reduce-overhead"``, CUDA graphs on a GPU; ``generation.compile``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase, StaticCache

from cory.batches import SampledBatch
from cory.errors import ConfigError, CoryError, NumericFault
from cory.models.filters import filter_logits as filter_by
from cory.models.policy import ValueHead, token_logprobs
from cory.models.shared_prompts import DistinctPrompts


STATIC_BUCKET = 64


def decode_step(lm: PreTrainedModel, token: torch.Tensor, attention: torch.Tensor, position: torch.Tensor,
                cache: Any, hidden: bool) -> Any:
    """One decode step: the next token's logits (and hidden states) given the cache."""
    return lm(input_ids=token, attention_mask=attention, position_ids=position, cache=cache, use_cache=True,
              logits_to_keep=1, output_hidden_states=hidden)


class Decoder:
    """How the decode loop runs its steps: a dynamic cache grown per token (default), or a
    static one written in place, optionally with the step compiled (captured on a GPU)."""

    def __init__(self, static: bool = False, compiled: bool = False, device: torch.device | None = None) -> None:
        self.static = static or compiled
        step: Callable[..., Any] = decode_step
        if compiled:
            if (device is None or device.type == "cpu") and shutil.which(os.environ.get("CXX", "g++")) is None:
                raise ConfigError("generation.compile: torch.compile on CPU needs a C++ compiler; install g++ "
                                  "(or point CXX at one), or set generation.compile=false")
            step = torch.compile(decode_step, mode="reduce-overhead", dynamic=False)
        self.step = step


@dataclass(frozen=True)
class SamplingSettings:
    """How to sample: ``top_k = 0`` and ``top_p = 1`` switch those filters off."""

    max_new_tokens: int = 16
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    greedy: bool = False
    penalise_padding: bool = False  # the prompt's left padding counts as seen by the penalty
    filtered_logprobs: bool = False  # record log-probs of the filtered distribution (logprobs: sampler)


def filter_logits(logits: torch.Tensor, settings: SamplingSettings) -> torch.Tensor:
    """Apply temperature, top-k and top-p (nucleus) filtering to ``[batch, vocab]`` logits."""
    return filter_by(logits, settings.temperature, settings.top_k, settings.top_p)


def penalise_repetition(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """Hugging Face's repetition penalty on ``[batch, vocab]`` logits: where ``seen`` (the
    token occurs in the row's prompt or response so far), a positive logit is divided by
    ``penalty`` and a negative one multiplied by it."""
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)


def seen_tokens(query_ids: torch.Tensor, query_mask: torch.Tensor, vocab: int, with_padding: bool) -> torch.Tensor:
    """``[batch, vocab]`` bool: the tokens each prompt holds, its left padding only if
    ``with_padding`` (as Hugging Face's penalty sees a TRL 0.7 batch)."""
    counted = torch.ones_like(query_mask, dtype=torch.int32) if with_padding else query_mask.int()
    seen = torch.zeros(query_ids.shape[0], vocab, dtype=torch.int32, device=query_ids.device)
    return seen.scatter_add_(1, query_ids, counted) > 0


class StopStrings:
    """Ends a row once its decoded response contains one of ``strings``.

    Only the last few tokens are decoded at each step: a stop string first appears there.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, strings: list[str]) -> None:
        self.tokenizer = tokenizer
        self.strings = [s for s in strings if s]
        self.window = max((len(s) for s in self.strings), default=0) + 2

    def hits(self, tokens: list[torch.Tensor], active: torch.Tensor) -> torch.Tensor:
        """``[batch]`` bool: the active rows whose response now ends in a stop string."""
        recent = torch.stack(tokens[-self.window:], dim=1)
        hit = torch.zeros_like(active)
        for row in torch.nonzero(active).flatten().tolist():
            text = self.tokenizer.decode(recent[row], skip_special_tokens=True)
            hit[row] = any(s in text for s in self.strings)
        return hit

    def cut(self, text: str) -> str:
        """``text`` up to the first stop string."""
        positions = [text.find(s) for s in self.strings if s in text]
        return text[: min(positions)] if positions else text


@dataclass
class Prefilled:
    """The prefill's last-position logits and hidden states, and its cache, one row per prompt row."""

    logits: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None
    cache: Any


def prefill(lm: PreTrainedModel, query_ids: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor,
            hidden: bool, share_prompts: bool) -> Any:
    """The prompts' forward pass into a fresh dynamic cache; with ``share_prompts`` each
    distinct prompt runs once and its cache, logits and hidden states go to every row."""
    distinct = DistinctPrompts.of(query_ids, attention) if share_prompts else None
    if distinct is None:
        return lm(input_ids=query_ids, attention_mask=attention, position_ids=positions, use_cache=True,
                  logits_to_keep=1, output_hidden_states=hidden)
    first, of_row = distinct.first, distinct.of_row
    out = lm(input_ids=query_ids[first], attention_mask=attention[first], position_ids=positions[first],
             use_cache=True, logits_to_keep=1, output_hidden_states=hidden)
    out.cache.batch_select_indices(of_row)
    states = tuple(state[of_row] for state in out.hidden_states) if hidden else None
    return Prefilled(out.logits[of_row], states, out.cache)


@torch.no_grad()
def sample(
    lm: PreTrainedModel,
    query_ids: torch.Tensor,
    query_mask: torch.Tensor,
    settings: SamplingSettings,
    stop_ids: list[int],
    pad_id: int,
    generator: torch.Generator | None = None,
    value_head: ValueHead | None = None,
    max_new_per_row: torch.Tensor | None = None,
    stop_strings: StopStrings | None = None,
    decoder: Decoder | None = None,
    share_prompts: bool = False,
) -> SampledBatch:
    """Sample continuations of a left-padded batch of prompts.

    ``max_new_per_row`` optionally gives each row its own token budget (a length sampler);
    it must not exceed ``settings.max_new_tokens``. A row ends at a stop token, at a stop
    string (the token completing it is kept), or at its budget. ``decoder`` picks the
    decode loop (default: the dynamic cache). With ``share_prompts`` (dynamic cache) rows that
    repeat a prompt prefill it once and share its cache.
    """
    decoder = decoder or Decoder()
    batch = query_ids.shape[0]
    device = query_ids.device
    if generator is not None and generator.device.type != device.type:
        raise CoryError(f"sampling: the random generator is on {generator.device} but the model's "
                        f"tensors are on {device}; create it with device={device.type!r}")
    budget = (
        max_new_per_row.to(device)
        if max_new_per_row is not None
        else torch.full((batch,), settings.max_new_tokens, device=device)
    )
    stop = torch.tensor(stop_ids, dtype=torch.long, device=device)
    width, longest = query_ids.shape[1], int(budget.max())
    positions = (query_mask.long().cumsum(-1) - 1).clamp(min=0)
    next_position = positions[:, -1:] + 1
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    hit_limit = torch.zeros_like(finished)
    nonfinite = torch.zeros_like(finished)
    tokens, masks, logprobs, values = [], [], [], []
    hidden = value_head is not None

    if decoder.static:  # the whole prompt + budget, allocated once; steps write into it
        length = -(-(width + longest) // STATIC_BUCKET) * STATIC_BUCKET
        attention = torch.zeros(batch, length, dtype=query_mask.dtype, device=device)
        attention[:, :width] = query_mask
        cache: Any = StaticCache(config=lm.config, max_cache_len=length)
        out = lm(input_ids=query_ids, attention_mask=attention[:, :width], position_ids=positions, cache=cache,
                 use_cache=True, logits_to_keep=1, output_hidden_states=hidden)
    else:
        attention = query_mask.clone()
        out = prefill(lm, query_ids, attention, positions, hidden, share_prompts)
        cache = out.cache
    penalise = settings.repetition_penalty != 1.0
    if penalise:
        seen = seen_tokens(query_ids, query_mask, out.logits.shape[-1], settings.penalise_padding)
    for step in range(longest):
        logits = out.logits[:, -1].float()
        # Checked once after the loop (no host sync per token); bad rows sample from zeros.
        bad = ~torch.isfinite(logits).all(-1) & ~finished
        nonfinite |= bad
        logits = torch.where(bad[:, None], torch.zeros_like(logits), logits)
        if value_head is not None:
            values.append(value_head(out.hidden_states[-1][:, -1]).float())
        candidates = penalise_repetition(logits, seen, settings.repetition_penalty) if penalise else logits.clone()
        if step < settings.min_new_tokens:
            candidates[:, stop] = float("-inf")
        filtered = None
        if settings.greedy:
            token = candidates.argmax(-1)
        else:
            filtered = filter_logits(candidates, settings)
            token = torch.multinomial(torch.softmax(filtered, dim=-1), 1, generator=generator).squeeze(-1)
        token = torch.where(finished, torch.full_like(token, pad_id), token)
        drawn_from = filtered if settings.filtered_logprobs and filtered is not None else logits / settings.temperature
        # A finished row's padding may lie outside the filter: its (masked) log-prob is 0, not -inf.
        logprobs.append(torch.where(finished, 0.0, token_logprobs(drawn_from, token)))
        tokens.append(token)
        masks.append(~finished)
        if penalise:
            seen[torch.arange(batch, device=device), token] |= ~finished
        is_stop = torch.isin(token, stop)
        if stop_strings is not None and stop_strings.strings:
            is_stop |= stop_strings.hits(tokens, ~finished)
        out_of_budget = step + 1 >= budget
        hit_limit |= ~finished & out_of_budget & ~is_stop
        finished = finished | is_stop | out_of_budget
        if bool(finished.all()):
            break
        if decoder.static:
            attention[:, width + step] = 1
        else:
            attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
        out = decoder.step(lm, token[:, None], attention, next_position, cache, hidden)
        if not decoder.static:
            cache = out.cache
        next_position = next_position + 1

    if bool(nonfinite.any()):
        raise NumericFault("non-finite logits while sampling a response")
    response_mask = torch.stack(masks, dim=1).to(query_mask.dtype)
    zeros = torch.zeros_like(response_mask, dtype=torch.float32)
    return SampledBatch(
        query_ids=query_ids,
        query_mask=query_mask,
        response_ids=torch.stack(tokens, dim=1),
        response_mask=response_mask,
        logprobs=torch.stack(logprobs, dim=1) * response_mask,
        values=torch.stack(values, dim=1) * response_mask if values else zeros,
        hit_length_limit=hit_limit,
    )
