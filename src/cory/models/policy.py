"""A causal LM with a scalar value head: log-probs, values and entropy from one forward."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import PreTrainedModel

from cory.errors import ConfigError
from cory.models.filters import filtered_keeping
from cory.models.shared_prompts import DistinctPrompts

VALUE_HEAD_FILE = "value_head.safetensors"


def position_ids_for(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding: 0 at each row's first real token."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``log softmax(logits)[token]`` without materialising the whole log-softmax."""
    logits = logits.float()
    picked = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the categorical distribution at each position."""
    logits = logits.float()
    log_z = torch.logsumexp(logits, dim=-1)
    return log_z - (torch.softmax(logits, dim=-1) * logits).sum(-1)


@dataclass
class PolicyOutput:
    """Per response token: log-prob of the token, value of the state before it, entropy."""

    logprobs: torch.Tensor
    values: torch.Tensor
    entropy: torch.Tensor | None
    logits: torch.Tensor


class ValueHead(nn.Module):
    """Linear map from the last hidden state to a scalar value estimate."""

    def __init__(self, hidden_size: int, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.summary = nn.Linear(hidden_size, 1)
        with torch.no_grad():
            self.summary.weight.normal_(0.0, 1.0 / (hidden_size + 1) ** 0.5, generator=generator)
            self.summary.bias.zero_()

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.summary(hidden.to(self.summary.weight.dtype)).squeeze(-1)


def hidden_size_of(model: PreTrainedModel) -> int:
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return int(getattr(config, "hidden_size", None) or config.n_embd)


class Policy(nn.Module):
    """``lm`` (any Hugging Face causal LM, possibly wrapped by peft) plus a value head."""

    def __init__(self, lm: PreTrainedModel, value_head: ValueHead) -> None:
        super().__init__()
        self.lm = lm
        self.value_head = value_head

    def forward(
        self,
        query_ids: torch.Tensor,
        query_mask: torch.Tensor,
        response_ids: torch.Tensor,
        response_mask: torch.Tensor,
        with_entropy: bool = True,
        temperature: float = 1.0,
        head_on_response_only: bool = True,
        with_values: bool = True,
        top_k: int = 0,
        top_p: float = 1.0,
        share_prompts: bool = False,
    ) -> PolicyOutput:
        """Score a left-padded query followed by a right-padded response in one pass."""
        return score_sequences(self.lm, query_ids, query_mask, response_ids, response_mask,
                               value_head=self.value_head if with_values else None,
                               with_entropy=with_entropy, temperature=temperature,
                               head_on_response_only=head_on_response_only, top_k=top_k, top_p=top_p,
                               share_prompts=share_prompts)

    def save_value_head(self, folder: Path) -> None:
        save_file({k: v.detach().cpu().contiguous() for k, v in self.value_head.state_dict().items()},
                  str(Path(folder) / VALUE_HEAD_FILE))

    def load_value_head(self, folder: Path) -> bool:
        """Load a saved value head from ``folder`` if it has one; return whether it did."""
        path = Path(folder) / VALUE_HEAD_FILE
        if not path.exists():
            return False
        self.value_head.load_state_dict(load_file(str(path)))
        return True


def compile_policy(policy: Policy, device: torch.device) -> nn.Module:
    """``torch.compile`` of ``policy`` with dynamic shapes (mini-batches vary in length)."""
    if device.type == "cpu" and shutil.which(os.environ.get("CXX", "g++")) is None:
        raise ConfigError("ppo.compile: torch.compile on CPU needs a C++ compiler; install g++ "
                          "(or point CXX at one), or set ppo.compile=false")
    return cast(nn.Module, torch.compile(policy, dynamic=True))


def score_sequences(
    lm: PreTrainedModel,
    query_ids: torch.Tensor,
    query_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    value_head: ValueHead | None = None,
    with_entropy: bool = False,
    temperature: float = 1.0,
    head_on_response_only: bool = True,
    top_k: int = 0,
    top_p: float = 1.0,
    share_prompts: bool = False,
) -> PolicyOutput:
    """Log-probs (and optionally values and entropy) of the response tokens under ``lm`` at
    ``temperature``; with ``top_k`` or ``top_p`` the log-probs are the filtered distribution's,
    renormalised, each response token kept in it (``generation.logprobs: sampler``). Entropy
    and the returned logits stay the model's at the temperature.

    With ``head_on_response_only`` only the ``R + 1`` last positions go through the LM head
    (``logits_to_keep``), which matters for large vocabularies. With ``share_prompts`` rows
    that repeat a prompt run it once (``shared_prompts``).
    """
    n_response = response_ids.shape[1]
    attention_mask = torch.cat([query_mask, response_mask], dim=1)
    distinct = DistinctPrompts.of(query_ids, query_mask) if share_prompts else None
    if distinct is not None:
        logits, hidden = _scored_with_shared_prompts(lm, query_ids, query_mask, response_ids, attention_mask,
                                                     distinct, value_head is not None)
    else:
        out = lm(
            input_ids=torch.cat([query_ids, response_ids], dim=1),
            attention_mask=attention_mask,
            position_ids=position_ids_for(attention_mask),
            logits_to_keep=n_response + 1 if head_on_response_only else 0,
            output_hidden_states=value_head is not None,
            use_cache=False,
        )
        logits = out.logits[:, -(n_response + 1):-1]
        hidden = out.hidden_states[-1][:, -(n_response + 1):-1] if value_head is not None else None
    if temperature != 1.0:
        logits = logits / temperature
    if top_k or top_p < 1.0:
        logprobs = token_logprobs(filtered_keeping(logits, response_ids, 1.0, top_k, top_p), response_ids)
    else:
        logprobs = token_logprobs(logits, response_ids)
    values = torch.zeros_like(logprobs)
    if value_head is not None and hidden is not None:
        values = value_head(hidden).float()
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = entropy_from_logits(logits.detach())
    return PolicyOutput(logprobs, values, entropy, logits)


def _scored_with_shared_prompts(lm: PreTrainedModel, query_ids: torch.Tensor, query_mask: torch.Tensor,
                                response_ids: torch.Tensor, attention_mask: torch.Tensor, distinct: DistinctPrompts,
                                with_hidden: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The logits (and last hidden states) that predict each response token: the distinct
    prompts in one pass whose cache is gathered to every row, then the responses on it."""
    positions = position_ids_for(attention_mask)
    width = query_ids.shape[1]
    prompt = lm(input_ids=query_ids[distinct.first], attention_mask=query_mask[distinct.first],
                position_ids=positions[distinct.first, :width], use_cache=True, logits_to_keep=1,
                output_hidden_states=with_hidden)
    cache = prompt.cache
    cache.batch_select_indices(distinct.of_row)
    out = lm(input_ids=response_ids, attention_mask=attention_mask, position_ids=positions[:, width:], cache=cache,
             use_cache=True, output_hidden_states=with_hidden)
    logits = torch.cat([prompt.logits[distinct.of_row][:, -1:], out.logits[:, :-1]], dim=1)
    if not with_hidden:
        return logits, None
    hidden = torch.cat([prompt.hidden_states[-1][distinct.of_row][:, -1:], out.hidden_states[-1][:, :-1]], dim=1)
    return logits, hidden
