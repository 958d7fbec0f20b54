"""An agent: a policy with a value head, and all the state it learns with.

The agent owns its optimiser and LR schedule, KL controller, score moments, baseline and
Elastic-Reset EMA, and a handle to its (possibly shared) reference. It talks to the
trainer in text and plain numbers only (prompts in; responses, values, statistics out), so
the same object can live in another process (a Ray actor) unchanged. Between
``generate`` and ``update`` it keeps the iteration's rollouts to itself: one, or one per
round when it answers in several (``GenerateRequest.turn``).

Its neighbours: ``prompts`` (chat template, truncation), ``sampling`` (settings and length
budgets), ``engine_sampling`` (rollouts on vLLM), ``minibatch_steps`` (the update's
optimiser steps), ``optimizer``, ``state`` (checkpoint I/O)
and ``export`` (a Hugging Face folder).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from cory.agents.elastic_reset import ElasticReset
from cory.agents.engine_sampling import comparable, logprob_gap, mismatch_kl, sample_on_engine
from cory.agents.export import export_policy
from cory.agents.learner import LearnerState
from cory.agents.minibatch_steps import MinibatchSteps
from cory.agents.optimizer import build_optimizer, build_scheduler
from cory.agents.prompts import PromptEncoder, context_length
from cory.agents.sampling import length_budgets, sampling_settings
from cory.agents.settings import AgentSettings
from cory.agents.state import read_learner_state, write_learner_state
from cory.algorithms.kl import AdaptiveKLController, FixedKLController, kl_per_token
from cory.algorithms.normalize import RunningMoments, transform_scores
from cory.algorithms.objective import compute_targets
from cory.algorithms.ppo import explained_variance
from cory.algorithms.reinforce import MovingAverageBaseline
from cory.batches import Rollout, SampledBatch
from cory.distributed.sharding import Shards, gathered, shard_policy
from cory.engines.vllm_engine import VLLMEngine
from cory.errors import CoryError
from cory.models.generation import Decoder, StopStrings, sample
from cory.models.policy import Policy, PolicyOutput, ValueHead, compile_policy, hidden_size_of, score_sequences
from cory.models.reference import Reference
from cory.seeding import derive_seed, generator
from cory.types import GenerateRequest, Reply, Stats


class Agent:
    """One learner. ``adapter`` names its LoRA adapter when agents share a peft base."""

    def __init__(self, index: int, lm: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                 reference: Reference, stop_ids: list[int], settings: AgentSettings,
                 device: torch.device, adapter: str | None = None, use_chat: bool = False,
                 stop_strings: Sequence[str] = (), engine: VLLMEngine | None = None) -> None:
        self.index = index
        self.name = f"agent{index}"
        self.settings = settings
        self.device = device
        self.tokenizer = tokenizer
        self.reference = reference
        self.stop_ids = stop_ids
        self.adapter = adapter
        self.stop_strings = StopStrings(tokenizer, list(stop_strings))
        self.prompts = PromptEncoder(self.name, tokenizer, use_chat, settings.max_prompt_tokens,
                                     settings.generation.max_new_tokens, context_length(lm))
        value_head = ValueHead(hidden_size_of(lm), generator("value_head", settings.seed, index))
        self.policy = Policy(lm, value_head).to(device)
        # agents.shards: this process holds 1/k of the policy (cory.distributed.sharding).
        self.shards = Shards.of_process_group(settings.shards) if settings.shards > 1 else None
        if self.shards is not None:
            shard_policy(self.policy)
        # The update's scoring forward; generation and the reference stay eager.
        compiled = settings.ppo.compile and self.shards is None
        self.scorer = compile_policy(self.policy, device) if compiled else self.policy
        self.activate()
        self.learner = self._new_learner()
        self.rollouts: list[Rollout] = []  # this iteration's kept turns, in order
        # generation.engine: vllm -- agents with adapters on one peft base share its engine.
        self.engine = engine or (self._engine() if settings.generation.engine == "vllm" else None)
        self.sampler_logprob_gap: float | None = None  # vLLM's log-probs against the policy's
        self.decoder = Decoder(compiled=settings.generation.compile, device=device)

    def _engine(self) -> VLLMEngine:
        gen = self.settings.generation
        longest = gen.vllm.max_model_len or self.prompts.limit + gen.max_new_tokens
        lora = self.settings.lora_rank if self.adapter is not None else 0
        return VLLMEngine(self.name, self.policy.lm, self.tokenizer, gen.vllm, self.settings.seed,
                          longest, self.device, self.settings.threads, lora, self.settings.n_agents)

    # ------------------------------------------------------------------ set-up
    def activate(self) -> None:
        """Make this agent's adapter the active one on a shared peft base."""
        if self.adapter is not None:
            self.policy.lm.set_adapter(self.adapter)

    def _new_learner(self) -> LearnerState:
        settings = self.settings
        trainable = self._trainable_parameters()
        params = list(trainable.values()) + list(self.policy.value_head.parameters())
        optimizer = build_optimizer(params, settings.ppo, settings.fast.fused_adamw and self.shards is None)
        er = settings.elastic_reset
        return LearnerState(
            trainable=trainable, value_head=self.policy.value_head, optimizer=optimizer,
            scheduler=build_scheduler(optimizer, settings.ppo, settings.steps),
            kl_ctl=self._new_kl_controller(), moments=RunningMoments(),
            baseline=(MovingAverageBaseline(settings.algorithm.baseline_decay)
                      if settings.objective.algorithm.moving_baseline else None),
            elastic=ElasticReset(trainable, er.decay, er.reset_freq) if er.enabled else None)

    def _trainable_parameters(self) -> dict[str, torch.nn.Parameter]:
        named = self.policy.lm.named_parameters()
        if self.adapter is None:
            return {name: p for name, p in named}
        marker = f".{self.adapter}."
        params = {name: p for name, p in named if marker in name}
        if not params:
            raise CoryError(f"{self.name}: LoRA adapter '{self.adapter}' has no parameters; "
                            "check agents.lora.target_modules")
        return params

    def _autocast(self) -> torch.autocast:
        """bfloat16 autocast of the forward passes when ``mixed_precision: bf16``."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.settings.bf16_autocast)

    # ------------------------------------------------------------- generation
    def generate(self, request: GenerateRequest) -> Reply:
        """Answer the request's prompts; with ``request.keep`` the rollout is held for the
        next ``update``."""
        self.activate()
        # Evaluation measures the model itself; only training samples may see dropout.
        self.policy.lm.train(self.learner.dropout_active and request.phase == "train")
        whole = gathered(self.policy) if self.shards is not None else contextlib.nullcontext()
        with self._autocast(), whole:
            return self._generate(request)

    def _token_budgets(self, count: int, step: int, phase: str, budgets: list[int] | None) -> torch.Tensor | None:
        gen = self.settings.generation
        if budgets is None:
            return length_budgets(gen, self.settings.seed, self.index, count, step, phase,
                                  cycle=self.settings.length_cycle)
        if len(budgets) != count or not all(1 <= b <= gen.max_new_tokens for b in budgets):
            raise CoryError(f"{self.name}: budgets must give each of the {count} prompts a token budget "
                            f"between 1 and generation.max_new_tokens ({gen.max_new_tokens})")
        return torch.tensor(budgets)

    def _generate(self, request: GenerateRequest) -> Reply:
        settings = self.settings
        step, stream = request.step, request.random_stream
        started = time.perf_counter()
        encoded = self.prompts.encode(request.prompts, self.device)
        rows = len(request.prompts)
        budgets = self._token_budgets(rows, step, stream, request.budgets)
        # Created on the model's device: torch.multinomial needs its generator there.
        sampler = generator("sample", settings.seed, step, self.index, stream, device=self.device)
        per_call = settings.generation.rows_per_call or rows
        parts: list[Rollout] = []
        hit_limit: list[bool] = []
        gaps: list[float | None] = [self.sampler_logprob_gap if request.turn > 0 else None]
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
            gaps.append(gap)
            started = time.perf_counter()
            seconds["reference"] += started - sampled_at
        if self.engine is not None and request.keep:
            self.sampler_logprob_gap = max((g for g in gaps if g is not None), default=None)  # over turns too
        rollout = Rollout.concat(parts)
        if request.keep:
            self._keep(rollout, request.turn)
        lengths = rollout.response_mask.sum(-1).tolist()
        texts = self.tokenizer.batch_decode(
            [ids[:n] for ids, n in zip(rollout.response_ids.tolist(), lengths)],
            skip_special_tokens=settings.generation.skip_special_tokens)
        seconds["reference"] += time.perf_counter() - started
        return Reply(
            texts=[self.stop_strings.cut(text) for text in texts],
            values=rollout.last_values().tolist(),
            kl=rollout.kl_sum().tolist(),
            lengths=lengths,
            hit_length_limit=hit_limit,
            prompts_truncated=encoded.truncated,
            prompt_length=encoded.mask.sum(-1).float().mean().item(),
            seconds=seconds,
        )

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
                      max_new_per_row=budgets, stop_strings=self.stop_strings, decoder=self.decoder)

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
            with torch.inference_mode():
                out = self.policy(query_ids, query_mask, response_ids, response_mask,
                                  with_entropy=False, temperature=gen.temperature,
                                  head_on_response_only=settings.fast.head_on_response_only,
                                  with_values=settings.uses_values)
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

    def _keep(self, rollout: Rollout, turn: int) -> None:
        """Hold ``rollout`` as this iteration's turn ``turn`` (0 starts a new set)."""
        if turn == 0:
            self.rollouts = []
        elif turn != len(self.rollouts):
            raise CoryError(f"{self.name}: asked to keep turn {turn} while holding {len(self.rollouts)} "
                            "turn(s) of this iteration; turns are kept in order from 0")
        self.rollouts.append(rollout)

    def _score_reference(self, query_ids: torch.Tensor, query_mask: torch.Tensor,
                         response_ids: torch.Tensor, response_mask: torch.Tensor) -> PolicyOutput:
        """The KL anchor: the frozen reference, or (Elastic Reset option) the policy's EMA."""
        temperature = self.settings.generation.temperature
        if self.learner.elastic is not None and self.settings.elastic_reset.kl_reference == "ema":
            with self.learner.elastic.ema_weights(), torch.inference_mode():
                return score_sequences(self.policy.lm, query_ids, query_mask, response_ids,
                                       response_mask, temperature=temperature)
        return self.reference.score(query_ids, query_mask, response_ids, response_mask,
                                    temperature=temperature)

    # ----------------------------------------------------------------- update
    def update(self, scores: list[float], step: int) -> Stats:
        """Learn from the held turns as one batch, each response scored by ``scores`` (the
        turns' responses in order)."""
        if not self.rollouts:
            raise CoryError(f"{self.name}: update() called without a rollout; call generate() first")
        self.activate()
        self.learner.dropout_active = self.settings.dropout_as_trl
        self.policy.lm.train(self.learner.dropout_active)
        turn_sizes = [turn.size for turn in self.rollouts]
        rollout, self.rollouts = Rollout.concat(self.rollouts), []
        ppo = self.settings.ppo
        started = time.perf_counter()
        raw = torch.tensor(scores, dtype=torch.float32, device=self.device)
        if raw.numel() != rollout.size:
            raise CoryError(f"{self.name}: got {raw.numel()} scores for {rollout.size} responses")
        stats: Stats = {"kl_coef": self.learner.kl_ctl.value, "lr": float(self.learner.scheduler.get_last_lr()[0]),
                        "update_rows": float(rollout.size), "update_turns": float(len(turn_sizes))}
        if not torch.isfinite(raw).all():
            return self._fault(stats, "non-finite reward")
        scaled = transform_scores(raw, self.learner.moments, ppo.use_score_scaling, ppo.use_score_norm, ppo.score_clip)
        targets = compute_targets(self.settings.objective, rollout, scaled, self.learner.kl_ctl.value,
                                  self.learner.baseline)
        steps = MinibatchSteps(self.index, self.scorer, self.learner, self.settings, self.shards, self.device)
        trained = rollout.without_truncated() if self.settings.algorithm.mask_truncated else rollout
        sums: dict[str, float] = {}
        counts = 0
        skipped = 0
        for epoch in range(ppo.ppo_epochs):
            for group in steps.groups(turn_sizes, step, epoch):
                outcome = steps.take(trained, targets, group)
                if outcome is None:
                    skipped += 1
                    continue
                for key, value in outcome.items():
                    sums[key] = sums.get(key, 0.0) + value
                counts += 1
        if counts == 0:
            return self._fault(stats, "non-finite loss or gradient in every mini-batch")
        kl = rollout.kl_sum().mean().item()
        # As TRL: the controller sees the configured estimator, summed over each response.
        controller_kl = rollout.kl_tokens.sum(-1).mean().item()
        self.learner.kl_ctl.update(controller_kl, rollout.size)
        self.learner.scheduler.step()
        reset = self._elastic_step(step)
        mask = rollout.response_mask.float()
        stats.update({key: value / counts for key, value in sums.items()})
        stats.update({
            "kl": kl,
            "kl_controller_input": controller_kl,
            "score": scaled.mean().item(),
            "return": targets.returns[:, 0].mean().item(),
            **({"explained_variance": explained_variance(rollout.values, targets.returns, mask),
                "value_mean": rollout.last_values().mean().item()} if self.settings.uses_values else {}),
            "response_length": mask.sum(-1).mean().item(),
            "skipped_minibatches": float(skipped),
            "elastic_reset": float(reset),
            "time/update": time.perf_counter() - started,
        })
        if self.engine is not None:
            self.engine.changed(self.adapter)  # pushed before the next rollout
            if self.sampler_logprob_gap is not None:
                stats["sampler_logprob_gap"] = self.sampler_logprob_gap
            if comparable(sampling_settings(self.settings.generation, greedy=False)):
                stats["mismatch_kl"] = mismatch_kl(rollout.sampler_logprobs, rollout.logprobs, mask)
            stats["time/weight_push"] = self.engine.seconds_loading
        return stats

    def _elastic_step(self, step: int) -> bool:
        if self.learner.elastic is None:
            return False
        if self.settings.elastic_reset.ema_every == "iteration":
            self.learner.elastic.update_ema()
        if self.learner.elastic.due(step):
            self.learner.elastic.reset()
            return True
        return False

    def reset_learning_state(self) -> None:
        """What rebuilding a TRL PPO trainer resets (``roles.reset_on_swap``): a fresh Adam
        state, the initial KL coefficient and fresh score moments. Weights, value head, LR
        schedule, baseline and Elastic-Reset EMA are kept."""
        self.learner.optimizer.state.clear()
        self.learner.kl_ctl = self._new_kl_controller()
        self.learner.moments = RunningMoments()
        self.learner.dropout_active = False  # a rebuilt model is loaded in eval mode

    def _new_kl_controller(self) -> FixedKLController:
        ppo = self.settings.ppo
        return (AdaptiveKLController(ppo.init_kl_coef, ppo.target, ppo.horizon)
                if ppo.adap_kl_ctrl else FixedKLController(ppo.init_kl_coef))

    def _fault(self, stats: Stats, reason: str) -> Stats:
        """This iteration's update was skipped; say why (the trainer counts faults)."""
        stats.update({"fault": 1.0, "fault_reason": reason})
        return stats

    # ------------------------------------------------------------ persistence
    def write_state(self, folder: Path) -> dict[str, Any]:
        """Write this agent's tensors into checkpoint folder ``folder``; return its metadata."""
        return write_learner_state(self.learner, folder, self.name, self.shards is None or self.shards.writes)

    def read_state(self, folder: Path, meta: dict[str, Any]) -> None:
        """Restore from checkpoint folder ``folder`` and the metadata ``write_state`` returned."""
        read_learner_state(self.learner, folder, self.name, meta)
        if self.engine is not None:
            self.engine.changed(self.adapter)

    def close(self) -> None:
        """Stop this agent's rollout engine, if it has one."""
        if self.engine is not None:
            self.engine.close()

    def save_pretrained(self, folder: Path) -> None:
        """A Hugging Face folder with the value head: loadable as a model spec."""
        self.activate()
        export_policy(self.policy, self.tokenizer, folder, self.adapter, self.shards)
