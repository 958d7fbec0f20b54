"""An agent's rollouts drawn on its vLLM engine (``generation.engine: vllm``), and how far
the engine's log-probs stray from the policy's."""

from __future__ import annotations

import torch
from torch import nn

from cory.batches import SampledBatch
from cory.distributed.sharding import Shards, full
from cory.engines.vllm_engine import VLLMEngine, to_sampled_batch
from cory.models.generation import SamplingSettings


def sample_on_engine(engine: VLLMEngine, lm: nn.Module, shards: Shards | None, query_ids: torch.Tensor,
                     query_mask: torch.Tensor, how: SamplingSettings, stop_ids: list[int], pad_id: int,
                     seeds: list[int], limits: list[int], stop_strings: list[str],
                     adapter: str | None) -> SampledBatch:
    """One answer per row, each with its seed and token budget. A sharded agent's ranks all
    take part in gathering the whole weights the engine needs (at its start and after each
    update); rank 0's engine answers, and every rank builds the same rollout from its answers."""
    if shards is None:
        return engine.sample(query_ids, query_mask, how, stop_ids, pad_id, seeds, limits, stop_strings,
                             adapter=adapter)
    weights = None
    if not engine.current:
        weights = {name: full(value).detach().cpu() for name, value in lm.state_dict().items()}
        engine.current = not shards.writes  # rank 0's engine clears it once pushed
    answers = (engine.answer(query_ids, query_mask, how, stop_ids, seeds, limits, stop_strings,
                             adapter=adapter, weights=weights)
               if shards.writes else None)
    return to_sampled_batch(shards.from_first(answers), query_ids, query_mask, pad_id)


def comparable(how: SamplingSettings) -> bool:
    """Whether the engine's token log-probs mean what the policy's do: both are the model's
    distribution at the temperature, so no filter may reshape the engine's (top-k, top-p, the
    repetition penalty, EOS suppressed by min_new_tokens) and the draw is not greedy."""
    return (not how.greedy and how.top_k == 0 and how.top_p == 1.0 and how.repetition_penalty == 1.0
            and how.min_new_tokens == 0)


def logprob_gap(sampled: torch.Tensor, recomputed: torch.Tensor, mask: torch.Tensor,
                how: SamplingSettings) -> float | None:
    """Largest |engine - policy| log-prob over response tokens (None where they are not
    ``comparable``)."""
    if not comparable(how) or not bool(mask.any()):
        return None
    return float(((sampled.to(recomputed.device) - recomputed).abs() * mask).max())


def mismatch_kl(sampled: torch.Tensor, recomputed: torch.Tensor, mask: torch.Tensor) -> float:
    """The k3 estimate of KL(sampler || policy) on the sampled tokens: the token mean of
    ``exp(l) - 1 - l`` with ``l = log p_policy - log p_sampler`` (0 when they agree)."""
    log_ratio = (recomputed - sampled.to(recomputed.device)) * mask
    k3 = torch.expm1(log_ratio) - log_ratio
    return float((k3 * mask).sum() / mask.sum().clamp(min=1))
