"""An agent: a policy with a value head, and all the state it learns with.

The agent owns its optimiser and LR schedule, KL controller, score moments, baseline and
Elastic-Reset EMA, and a handle to its (possibly shared) reference. It talks to the
trainer in text and plain numbers only (prompts in; responses, values, statistics out), so
the same object can live in another process (a Ray actor) unchanged. Between
``generate`` and ``update`` it keeps the iteration's rollouts to itself: one per round it
answers in (``GenerateRequest.round``).

Its neighbours: ``answering`` (sampling and scoring a request's answers), ``held_turns``
(the rollouts kept for the update), ``prompts`` (chat template, truncation), ``sampling``
(settings and length budgets), ``minibatch_steps`` (the update's optimiser steps),
``optimizer``, ``state`` (checkpoint I/O) and ``export`` (a Hugging Face folder).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from cory.agents.answering import Answerer
from cory.agents.elastic_reset import ElasticReset
from cory.agents.engine_sampling import comparable, mismatch_kl
from cory.agents.export import export_policy
from cory.agents.held_turns import HeldTurns
from cory.agents.learner import LearnerState
from cory.agents.minibatch_steps import MinibatchSteps
from cory.agents.optimizer import build_optimizer, build_scheduler
from cory.agents.prompts import PromptEncoder, context_length
from cory.agents.sampling import sampling_settings
from cory.agents.settings import AgentSettings
from cory.agents.state import read_learner_state, write_learner_state
from cory.algorithms.kl import AdaptiveKLController, FixedKLController
from cory.algorithms.normalize import RunningMoments, transform_scores
from cory.algorithms.objective import compute_targets
from cory.algorithms.ppo import explained_variance
from cory.algorithms.reinforce import MovingAverageBaseline
from cory.distributed.sharding import Shards, gathered, shard_policy
from cory.engines.vllm_engine import VLLMEngine
from cory.errors import CoryError
from cory.models.generation import StopStrings
from cory.models.policy import Policy, ValueHead, compile_policy, hidden_size_of
from cory.models.reference import Reference
from cory.seeding import generator
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
        # generation.engine: vllm -- agents with adapters on one peft base share its engine.
        self.engine = engine or (self._engine() if settings.generation.engine == "vllm" else None)
        self.answerer = Answerer(index, settings, self.policy, tokenizer, self.prompts, reference, self.learner,
                                 stop_ids, StopStrings(tokenizer, list(stop_strings)), self.engine, self.shards,
                                 adapter, device)
        self.held = HeldTurns(self.name)

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
        """Answer the request's prompts; with ``request.keep`` the rollout is held as the
        iteration's turn of round ``request.round`` for the next ``update``."""
        self.activate()
        # Evaluation measures the model itself; only training samples may see dropout.
        self.policy.lm.train(self.learner.dropout_active and request.phase == "train")
        whole = gathered(self.policy) if self.shards is not None else contextlib.nullcontext()
        with self._autocast(), whole:
            reply, rollout, gap = self.answerer.answer(request)
        if request.keep:
            self.held.keep(rollout, request.round, gap)
        return reply

    # ----------------------------------------------------------------- update
    def update(self, scores: list[float], step: int) -> Stats:
        """Learn from the held turns as one batch, each response scored by ``scores`` (the
        turns' responses in order)."""
        rollout, turn_sizes = self.held.take()
        self.activate()
        self.learner.dropout_active = self.settings.dropout_as_trl
        self.policy.lm.train(self.learner.dropout_active)
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
            if self.held.sampler_logprob_gap is not None:
                stats["sampler_logprob_gap"] = self.held.sampler_logprob_gap
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
