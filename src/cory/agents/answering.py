"""How an agent answers a request: prompts encoded, responses sampled chunk by chunk (by our
sampler or vLLM's), each chunk scored against the KL anchor, and the reply put in text.

``Answerer.answer`` returns the ``Reply`` the trainer reads, the ``Rollout`` the agent may
keep for its update, and the largest gap between the engine's log-probs and the policy's
(None without an engine).
"""

from __future__ import annotations

import time

import torch
from transformers import PreTrainedTokenizerBase

from cory.agents.engine_sampling import logprob_gap, sample_on_engine
from cory.agents.learner import LearnerState
from cory.agents.prompts import PromptEncoder
from cory.agents.sampling import length_budgets, sampling_settings, scoring_filters
from cory.agents.settings import AgentSettings
from cory.algorithms.kl import kl_per_token
from cory.batches import Rollout, SampledBatch
from cory.distributed.sharding import Shards
from cory.engines.vllm_engine import VLLMEngine
from cory.errors import CoryError
from cory.models.generation import Decoder, StopStrings, sample
from cory.models.policy import Policy, PolicyOutput, score_sequences
from cory.models.reference import Reference
from cory.seeding import derive_seed, generator
from cory.types import GenerateRequest, Reply


class Answerer:
    """Answers requests with one agent's policy (``index``: its place in the seed streams)."""

    def __init__(self, index: int, settings: AgentSettings, policy: Policy, tokenizer: PreTrainedTokenizerBase,
                 prompts: PromptEncoder, reference: Reference, learner: LearnerState, stop_ids: list[int],
                 stop_strings: StopStrings, engine: VLLMEngine | None, shards: Shards | None,
                 adapter: str | None, device: torch.device) -> None:
        self.index, self.name = index, f"agent{index}"
        self.settings, self.policy, self.tokenizer, self.prompts = settings, policy, tokenizer, prompts
        self.reference, self.learner = reference, learner
        self.stop_ids, self.stop_strings = stop_ids, stop_strings
        self.engine, self.shards, self.adapter, self.device = engine, shards, adapter, device
        self.decoder = Decoder(compiled=settings.generation.compile, device=device)

    def answer(self, request: GenerateRequest) -> tuple[Reply, Rollout, float | None]:
        """The reply to ``request``, its rollout, and the engine's worst log-prob gap."""
        settings = self.settings
        started = time.perf_counter()
        if request.prompt_ids is None:
            encoded = self.prompts.encode(request.prompts, self.device)
        else:
            encoded = self.prompts.padded(request.prompt_ids, [f"of {len(ids)} ids" for ids in request.prompt_ids],
                                          self.device)
        rows = request.rows
        budgets = self._token_budgets(rows, request)
        # Created on the model's device: torch.multinomial needs its generator there.
        sampler = generator("sample", settings.seed, request.step, self.index, request.random_stream,
                            device=self.device)
        per_call = settings.generation.rows_per_call or rows
        parts: list[Rollout] = []
        hit_limit: list[bool] = []
        gaps: list[float] = []
        seconds = {"generate": 0.0, "reference": 0.0}
        for first in range(0, rows, per_call):
            chunk = slice(first, first + per_call)
            generated = self._sample_rows(request, encoded.ids[chunk], encoded.mask[chunk],
                                          budgets[chunk] if budgets is not None else None, sampler, first)
            sampled_at = time.perf_counter()
            seconds["generate"] += sampled_at - started
            rollout, gap = self._score_rows(request, generated)
            parts.append(rollout)
            hit_limit += generated.hit_length_limit.tolist()
            if gap is not None:
                gaps.append(gap)
            started = time.perf_counter()
            seconds["reference"] += started - sampled_at
        rollout = Rollout.concat(parts)
        lengths = rollout.response_mask.sum(-1).tolist()
        response_ids = [ids[:n] for ids, n in zip(rollout.response_ids.tolist(), lengths)]
        texts = self.tokenizer.batch_decode(response_ids, skip_special_tokens=settings.generation.skip_special_tokens)
        seconds["reference"] += time.perf_counter() - started
        reply = Reply(
            texts=[self.stop_strings.cut(text) for text in texts],
            values=rollout.last_values().tolist(),
            kl=rollout.kl_sum().tolist(),
            lengths=lengths,
            hit_length_limit=hit_limit,
            prompts_truncated=encoded.truncated,
            prompt_length=encoded.mask.sum(-1).float().mean().item(),
            seconds=seconds,
            response_ids=response_ids,
        )
        return reply, rollout, max(gaps, default=None)

    def _token_budgets(self, count: int, request: GenerateRequest) -> torch.Tensor | None:
        gen = self.settings.generation
        if request.budgets is None:
            return length_budgets(gen, self.settings.seed, self.index, count, request.step, request.random_stream,
                                  cycle=self.settings.length_cycle)
        if len(request.budgets) != count or not all(1 <= b <= gen.max_new_tokens for b in request.budgets):
            raise CoryError(f"{self.name}: budgets must give each of the {count} prompts a token budget "
                            f"between 1 and generation.max_new_tokens ({gen.max_new_tokens})")
        return torch.tensor(request.budgets)

    def _sample_rows(self, request: GenerateRequest, query_ids: torch.Tensor, query_mask: torch.Tensor,
                     budgets: torch.Tensor | None, sampler: torch.Generator, first: int) -> SampledBatch:
        """Responses to some rows of a request (``first``: the index of the first of them)."""
        settings = self.settings
        how = sampling_settings(settings.generation, request.greedy)
        if self.engine is not None:
            rows = range(first, first + query_ids.shape[0])
            seeds = [derive_seed("sample", settings.seed, request.step, self.index, request.random_stream, row)
                     & 0x7FFFFFFF for row in rows]  # one request seed per row, drawn like our sampler's
            limits = budgets.tolist() if budgets is not None else [how.max_new_tokens] * len(rows)
            return sample_on_engine(self.engine, self.policy.lm, self.shards, query_ids, query_mask, how,
                                    self.stop_ids, self.tokenizer.pad_token_id, seeds, limits,
                                    self.stop_strings.strings, self.adapter)
        with_values = settings.fast.scores_from_generation and settings.uses_values
        return sample(self.policy.lm, query_ids, query_mask, how, self.stop_ids, self.tokenizer.pad_token_id,
                      generator=sampler, value_head=self.policy.value_head if with_values else None,
                      max_new_per_row=budgets, stop_strings=self.stop_strings, decoder=self.decoder,
                      share_prompts=settings.fast.shared_prompts)

    def _score_rows(self, request: GenerateRequest, generated: SampledBatch) -> tuple[Rollout, float | None]:
        """The rollout of sampled rows: the reference's log-probs and the KL, and the policy's
        log-probs and values where sampling did not record them; with them the gap between
        the engine's log-probs and the policy's (None without an engine)."""
        settings, gen = self.settings, self.settings.generation
        query_ids, query_mask = generated.query_ids, generated.query_mask
        response_ids, response_mask = generated.response_ids, generated.response_mask
        mask = response_mask.float()
        reference = self._score_reference(query_ids, query_mask, response_ids, response_mask)
        logprobs, values, policy_logits, gap = generated.logprobs, generated.values, None, None
        if not settings.fast.scores_from_generation:
            top_k, top_p = scoring_filters(gen)
            with torch.inference_mode():
                out = self.policy(query_ids, query_mask, response_ids, response_mask,
                                  with_entropy=False, temperature=gen.temperature,
                                  head_on_response_only=settings.fast.head_on_response_only,
                                  with_values=settings.uses_values, top_k=top_k, top_p=top_p,
                                  share_prompts=settings.fast.shared_prompts)
            logprobs, values, policy_logits = out.logprobs * mask, out.values * mask, out.logits
            if self.engine is not None:
                gap = logprob_gap(generated.logprobs, logprobs, mask, sampling_settings(gen, request.greedy))
        ref_logprobs = reference.logprobs * mask
        kl_tokens = kl_per_token(
            logprobs, ref_logprobs, settings.ppo.kl_penalty,
            policy_logits.log_softmax(-1) if policy_logits is not None else None,
            reference.logits.float().log_softmax(-1) if policy_logits is not None else None,
        ) * mask
        return Rollout.of(generated, logprobs, values, ref_logprobs, kl_tokens), gap

    def _score_reference(self, query_ids: torch.Tensor, query_mask: torch.Tensor,
                         response_ids: torch.Tensor, response_mask: torch.Tensor) -> PolicyOutput:
        """The KL anchor: the frozen reference, or (Elastic Reset option) the policy's EMA."""
        temperature, shared = self.settings.generation.temperature, self.settings.fast.shared_prompts
        if self.learner.elastic is not None and self.settings.elastic_reset.kl_reference == "ema":
            with self.learner.elastic.ema_weights(), torch.inference_mode():
                return score_sequences(self.policy.lm, query_ids, query_mask, response_ids,
                                       response_mask, temperature=temperature, share_prompts=shared)
        return self.reference.score(query_ids, query_mask, response_ids, response_mask,
                                    temperature=temperature, share_prompts=shared)
