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


def logprob_gap(sampled: torch.Tensor, recomputed: torch.Tensor, mask: torch.Tensor,
                how: SamplingSettings) -> float | None:
    """Largest |engine - policy| log-prob over response tokens. vLLM reports log-probs
    before temperature, so the comparison holds at temperature 1 only (else None)."""
    if how.temperature != 1.0 or not bool(mask.any()):
        return None
    return float(((sampled.to(recomputed.device) - recomputed).abs() * mask).max())
