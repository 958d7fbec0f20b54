"""The batch types one iteration passes along, each built from the one before:

    TokenBatch     token ids and masks: queries left-padded, responses right-padded
    SampledBatch   + what the sampler (ours or vLLM's) recorded per token   <- sampling
    Rollout        + the policy's and the reference's per-token log-probs (and the sampler's
                   kept beside them)                                        <- SampledBatch, scored
    MiniBatch      rows of a Rollout + their advantages and returns, padding trimmed
    Reply          (cory.types) a Rollout as text and numbers, what an agent sends back
    Episode        (cory.multi.episode) every role's prompts and Replies for one batch of queries

Per-token tensors are ``[B, R]`` (R: response length).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch


@dataclass
class TokenBatch:
    """Queries are left-padded, responses right-padded; ``response_mask`` covers the tokens up
    to and including EOS."""

    query_ids: torch.Tensor
    query_mask: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor

    @property
    def size(self) -> int:
        return self.query_ids.shape[0]


@dataclass
class SampledBatch(TokenBatch):
    """A sampled batch, with the log-prob and value the sampler recorded at each token
    (values are zero when nothing computed them, as on vLLM)."""

    logprobs: torch.Tensor
    values: torch.Tensor
    hit_length_limit: torch.Tensor  # [B] bool: stopped by the budget, not by EOS


@dataclass
class Rollout(TokenBatch):
    """One agent's rollout of one iteration: a sampled batch with the policy's log-probs and
    values and the reference's log-probs, each masked to the response."""

    logprobs: torch.Tensor
    values: torch.Tensor
    ref_logprobs: torch.Tensor
    kl_tokens: torch.Tensor  # the configured KL estimator at each token (for the penalty)
    sampler_logprobs: torch.Tensor  # what the sampler recorded (vLLM's own on that engine)
    truncated: torch.Tensor | None = None  # [B] bool: stopped by the length limit (None: not recorded)

    @classmethod
    def of(cls, sampled: SampledBatch, logprobs: torch.Tensor, values: torch.Tensor, ref_logprobs: torch.Tensor,
           kl_tokens: torch.Tensor) -> Rollout:
        return cls(sampled.query_ids, sampled.query_mask, sampled.response_ids, sampled.response_mask,
                   logprobs, values, ref_logprobs, kl_tokens, sampled.logprobs.to(logprobs.device),
                   sampled.hit_length_limit.to(logprobs.device))

    def without_truncated(self) -> Rollout:
        """The rollout with the responses that hit the length limit masked out (TRL's
        ``mask_truncated_completions``): they take no part in a loss or its normaliser."""
        if self.truncated is None:
            return self
        return replace(self, response_mask=self.response_mask * (~self.truncated.bool())[:, None])

    @classmethod
    def concat(cls, rollouts: list[Rollout]) -> Rollout:
        """One rollout of several turns' rows: queries left-padded and responses right-padded
        to the widest (padding is masked, id 0, every per-token number 0)."""
        if len(rollouts) == 1:
            return rollouts[0]
        query_width = max(r.query_ids.shape[1] for r in rollouts)
        response_width = max(r.response_ids.shape[1] for r in rollouts)

        def joined(name: str, width: int, left: bool) -> torch.Tensor:
            parts = []
            for rollout in rollouts:
                tensor = getattr(rollout, name)
                missing = width - tensor.shape[1]
                parts.append(torch.nn.functional.pad(tensor, (missing, 0) if left else (0, missing)))
            return torch.cat(parts)

        flags = [rollout.truncated for rollout in rollouts]
        per_token = {field.name: joined(field.name, query_width if field.name.startswith("query") else response_width,
                                        field.name.startswith("query"))
                     for field in fields(cls) if field.name != "truncated"}
        known = [flag for flag in flags if flag is not None]
        return cls(**per_token, truncated=torch.cat(known) if len(known) == len(flags) else None)

    def kl_sum(self) -> torch.Tensor:
        """``sum_t (log p - log p_ref)`` per sequence: the KL the paper reports."""
        return ((self.logprobs - self.ref_logprobs) * self.response_mask).sum(-1)

    def last_values(self) -> torch.Tensor:
        """The value estimate at each response's last token."""
        last = (self.response_mask.sum(-1).long() - 1).clamp(min=0)
        return self.values[torch.arange(self.size, device=self.values.device), last]


def trim_padding(query_ids: torch.Tensor, query_mask: torch.Tensor, response_mask: torch.Tensor
                 ) -> tuple[slice, slice]:
    """Column slices that drop query columns padded in every row and response columns
    after the longest response."""
    query_start = int((query_mask.sum(0) > 0).int().argmax()) if query_mask.any() else 0
    response_end = max(int(response_mask.sum(-1).max()), 1)
    return slice(query_start, query_ids.shape[1]), slice(0, response_end)


@dataclass
class MiniBatch(TokenBatch):
    """Rows of a rollout plus their advantages and returns, with padding trimmed."""

    old_logprobs: torch.Tensor
    old_values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    sampler_logprobs: torch.Tensor
    ref_logprobs: torch.Tensor

    @classmethod
    def take(cls, rollout: Rollout, rows: torch.Tensor, advantages: torch.Tensor,
             returns: torch.Tensor, trim: bool = True) -> MiniBatch:
        batch = cls(rollout.query_ids[rows], rollout.query_mask[rows], rollout.response_ids[rows],
                    rollout.response_mask[rows], rollout.logprobs[rows], rollout.values[rows],
                    advantages[rows], returns[rows], rollout.sampler_logprobs[rows], rollout.ref_logprobs[rows])
        if not trim:
            return batch
        query_cols, response_cols = trim_padding(batch.query_ids, batch.query_mask, batch.response_mask)
        trimmed = {}
        for field in fields(cls):
            tensor = getattr(batch, field.name)
            cols = query_cols if field.name.startswith("query") else response_cols
            trimmed[field.name] = tensor[:, cols]
        return replace(batch, **trimmed)
