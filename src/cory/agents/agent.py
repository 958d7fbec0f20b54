"""An agent: a policy with a value head, and all the state it learns with.

The agent owns its optimiser and LR schedule, KL controller, score moments, baseline and
Elastic-Reset EMA, and a handle to its (possibly shared) reference. It talks to the
trainer in text and plain numbers only (prompts in; responses, values, statistics out), so
the same object can live in another process (a Ray actor) unchanged. Between
``generate`` and ``update`` it keeps its last rollout to itself.
"""

from __future__ import annotations

import copy
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from transformers import PreTrainedTokenizerBase

from cory.agents.elastic_reset import ElasticReset
from cory.agents.objectives import (USES_VALUE_LOSS, Targets, compute_targets, minibatch_loss,
                                    returns_need_values)
from cory.algorithms.kl import AdaptiveKLController, FixedKLController, kl_per_token
from cory.algorithms.normalize import RunningMoments, transform_scores
from cory.algorithms.ppo import explained_variance
from cory.algorithms.reinforce import MovingAverageBaseline
from cory.checkpoint import save_tensors
from cory.config import RunConfig
from cory.errors import ConfigError, CoryError
from cory.models.generation import SamplingSettings, StopStrings, sample
from cory.models.policy import Policy, PolicyOutput, ValueHead, hidden_size_of, score_sequences
from cory.models.reference import Reference
from cory.rollout import MiniBatch, Rollout
from cory.seeding import generator
from cory.types import Reply


def lr_lambda(kind: str, warmup: int, total: int):
    """Multiplier of the base learning rate after ``step`` scheduler steps."""
    def multiplier(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        if kind == "linear":
            return 1.0 - progress
        if kind == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0
    return multiplier


def compiled(policy: Policy, device: torch.device) -> torch.nn.Module:
    """``torch.compile`` of ``policy`` with dynamic shapes (mini-batches vary in length)."""
    if device.type == "cpu" and shutil.which(os.environ.get("CXX", "g++")) is None:
        raise ConfigError("ppo.compile: torch.compile on CPU needs a C++ compiler; install g++ "
                        "(or point CXX at one), or set ppo.compile=false")
    return torch.compile(policy, dynamic=True)


def max_positions(lm: torch.nn.Module) -> int | None:
    config = lm.config
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


class Agent:
    """One learner. ``adapter`` names its LoRA adapter when agents share a peft base."""

    def __init__(self, index: int, lm: torch.nn.Module, tokenizer: PreTrainedTokenizerBase,
                 reference: Reference, stop_ids: list[int], config: RunConfig,
                 device: torch.device, adapter: str | None = None, use_chat: bool = False,
                 stop_strings: list[str] = ()) -> None:
        self.index = index
        self.name = f"agent{index}"
        self.config = config
        self.device = device
        self.tokenizer = tokenizer
        self.reference = reference
        self.stop_ids = stop_ids
        self.adapter = adapter
        self.use_chat = use_chat
        self.stop_strings = StopStrings(tokenizer, list(stop_strings))
        value_head = ValueHead(hidden_size_of(lm), generator("value_head", config.seed, index))
        self.policy = Policy(lm, value_head).to(device)
        # The update's scoring forward; generation and the reference stay eager.
        self.scorer = compiled(self.policy, device) if config.ppo.compile else self.policy
        self.activate()
        self.trainable = self._trainable_parameters()
        ppo = config.ppo
        params = list(self.trainable.values()) + list(self.policy.value_head.parameters())
        self.optimizer = torch.optim.AdamW(params, lr=ppo.learning_rate, eps=ppo.adam_eps,
                                           weight_decay=ppo.weight_decay,
                                           **({"fused": True} if ppo.fast_path else {"foreach": False}))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(ppo.lr_scheduler, ppo.warmup_steps, config.steps))
        self.kl_ctl = self._new_kl_controller()
        self.moments = RunningMoments()
        self.baseline = (MovingAverageBaseline(config.algorithm.baseline_decay)
                         if config.algorithm.name == "reinforce" else None)
        er = config.elastic_reset
        self.elastic = ElasticReset(self.trainable, er.decay, er.reset_freq) if er.enabled else None
        self.rollout: Rollout | None = None
        # Values feed the PPO value loss and the MoE answer choice; others skip the head.
        self.uses_values = (config.algorithm.name in USES_VALUE_LOSS or config.topology.answer == "value"
                            or returns_need_values(config.algorithm))

    # ------------------------------------------------------------------ set-up
    def activate(self) -> None:
        """Make this agent's adapter the active one on a shared peft base."""
        if self.adapter is not None:
            self.policy.lm.set_adapter(self.adapter)

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

    # ------------------------------------------------------------- generation
    def _format(self, prompt: str) -> str:
        if not self.use_chat:
            return prompt
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)

    def _encode(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Left-padded ids and mask; prompts over the context budget lose their start."""
        limit = self.config.task.max_prompt_tokens
        context = max_positions(self.policy.lm)
        if context is not None:
            limit = min(limit, context - self.config.generation.max_new_tokens)
        if limit < 1:
            raise CoryError(f"{self.name}: generation.max_new_tokens "
                            f"({self.config.generation.max_new_tokens}) leaves no room for a "
                            f"prompt in the model's context of {context} tokens; lower it")
        texts = [self._format(p) for p in prompts]
        encoded = self.tokenizer(texts, add_special_tokens=not self.use_chat)["input_ids"]
        truncated = sum(len(ids) > limit for ids in encoded)
        encoded = [ids[-limit:] for ids in encoded]
        for i, ids in enumerate(encoded):
            if not ids:
                raise CoryError(f"{self.name}: prompt {i} ({prompts[i]!r}) is empty after "
                                "tokenisation; drop empty prompts from the data")
        width = max(len(ids) for ids in encoded)
        pad = self.tokenizer.pad_token_id
        query_ids = torch.tensor([[pad] * (width - len(x)) + x for x in encoded], device=self.device)
        query_mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in encoded],
                                  device=self.device)
        return query_ids, query_mask, truncated

    def _budgets(self, batch: int, step: int, phase: str) -> torch.Tensor | None:
        """Token budgets from the length sampler: one per row (seeded per agent), or one per
        batch (seeded without the agent, so every agent of the iteration draws the same)."""
        gen = self.config.generation
        if gen.length_sampler is None:
            return None
        low, high = gen.length_sampler
        if gen.length_sampler_per == "batch":
            drawn = torch.randint(low, high + 1, (1,), generator=generator("length", self.config.seed, step, phase))
            return drawn.expand(batch)
        return torch.randint(low, high + 1, (batch,),
                             generator=generator("length", self.config.seed, step, self.index, phase))

    def _settings(self, greedy: bool) -> SamplingSettings:
        gen = self.config.generation
        return SamplingSettings(gen.max_new_tokens, gen.min_new_tokens, gen.temperature,
                                gen.top_k, gen.top_p, gen.repetition_penalty, greedy=greedy)

    def generate(self, prompts: list[str], step: int, phase: str = "train",
                 greedy: bool = False, keep: bool = True) -> Reply:
        """Answer ``prompts``; with ``keep`` the rollout is held for the next ``update``."""
        self.activate()
        with self._autocast():
            return self._generate(prompts, step, phase, greedy, keep)

    def _autocast(self) -> torch.autocast:
        """bfloat16 autocast of the forward passes when ``mixed_precision: bf16``."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16,
                              enabled=self.config.mixed_precision == "bf16")

    def _generate(self, prompts: list[str], step: int, phase: str, greedy: bool, keep: bool) -> Reply:
        started = time.perf_counter()
        query_ids, query_mask, truncated = self._encode(prompts)
        # Created on the model's device: torch.multinomial needs its generator there.
        sampler = generator("sample", self.config.seed, step, self.index, phase, device=self.device)
        temperature = self.config.generation.temperature
        fused = self.config.ppo.fast_path and self.config.ppo.kl_penalty != "full"
        generated = sample(
            self.policy.lm, query_ids, query_mask, self._settings(greedy), self.stop_ids,
            self.tokenizer.pad_token_id, generator=sampler,
            value_head=self.policy.value_head if fused and self.uses_values else None,
            max_new_per_row=self._budgets(len(prompts), step, phase),
            stop_strings=self.stop_strings)
        response_ids, response_mask = generated.response_ids, generated.response_mask
        generated_at = time.perf_counter()
        mask = response_mask.float()
        reference = self._score_reference(query_ids, query_mask, response_ids, response_mask)
        logprobs, values, policy_logits = generated.logprobs, generated.values, None
        if not fused:
            with torch.inference_mode():
                out = self.policy(query_ids, query_mask, response_ids, response_mask,
                                  with_entropy=False, temperature=temperature,
                                  head_on_response_only=self.config.ppo.fast_path,
                                  with_values=self.uses_values)
            logprobs, values, policy_logits = out.logprobs * mask, out.values * mask, out.logits
        ref_logprobs = reference.logprobs * mask
        kl_tokens = kl_per_token(
            logprobs, ref_logprobs, self.config.ppo.kl_penalty,
            policy_logits.log_softmax(-1) if policy_logits is not None else None,
            reference.logits.float().log_softmax(-1) if policy_logits is not None else None,
        ) * mask
        rollout = Rollout(query_ids, query_mask, response_ids, response_mask, logprobs, values,
                          ref_logprobs, kl_tokens)
        if keep:
            self.rollout = rollout
        lengths = response_mask.sum(-1).tolist()
        texts = self.tokenizer.batch_decode(
            [ids[:n] for ids, n in zip(response_ids.tolist(), lengths)],
            skip_special_tokens=self.config.generation.skip_special_tokens)
        texts = [self.stop_strings.cut(text) for text in texts]
        finished = time.perf_counter()
        return Reply(
            texts=texts,
            values=rollout.last_values().tolist(),
            kl=rollout.kl_sum().tolist(),
            lengths=lengths,
            hit_length_limit=generated.hit_length_limit.tolist(),
            prompts_truncated=truncated,
            prompt_length=query_mask.sum(-1).float().mean().item(),
            seconds={"generate": generated_at - started, "reference": finished - generated_at},
        )

    def _score_reference(self, query_ids: torch.Tensor, query_mask: torch.Tensor,
                         response_ids: torch.Tensor, response_mask: torch.Tensor) -> PolicyOutput:
        """The KL anchor: the frozen reference, or (Elastic Reset option) the policy's EMA."""
        temperature = self.config.generation.temperature
        if self.elastic is not None and self.config.elastic_reset.kl_reference == "ema":
            with self.elastic.ema_weights(), torch.inference_mode():
                return score_sequences(self.policy.lm, query_ids, query_mask, response_ids,
                                       response_mask, temperature=temperature)
        return self.reference.score(query_ids, query_mask, response_ids, response_mask,
                                    temperature=temperature)

    # ----------------------------------------------------------------- update
    def update(self, scores: list[float], step: int) -> dict[str, float | str]:
        """Learn from the held rollout, each response scored by ``scores``."""
        if self.rollout is None:
            raise CoryError(f"{self.name}: update() called without a rollout; call generate() first")
        self.activate()
        rollout, self.rollout = self.rollout, None
        started = time.perf_counter()
        raw = torch.tensor(scores, dtype=torch.float32, device=self.device)
        if raw.numel() != rollout.size:
            raise CoryError(f"{self.name}: got {raw.numel()} scores for {rollout.size} responses")
        stats: dict[str, float | str] = {"kl_coef": self.kl_ctl.value, "lr": self.scheduler.get_last_lr()[0]}
        if not torch.isfinite(raw).all():
            return self._fault(stats, "non-finite reward")
        scaled = transform_scores(raw, self.moments, self.config.ppo.use_score_scaling,
                                  self.config.ppo.use_score_norm, self.config.ppo.score_clip)
        targets = compute_targets(self.config.algorithm, self.config.ppo, rollout, scaled,
                                  self.kl_ctl.value, self.baseline)
        sums: dict[str, float] = {}
        counts = 0
        skipped = 0
        for epoch in range(self.config.ppo.ppo_epochs):
            for group in self._minibatch_groups(rollout.size, step, epoch):
                outcome = self._optimise(rollout, targets, group)
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
        self.kl_ctl.update(controller_kl, rollout.size)
        self.scheduler.step()
        reset = self._elastic_step(step)
        mask = rollout.response_mask.float()
        stats.update({key: value / counts for key, value in sums.items()})
        stats.update({
            "kl": kl,
            "kl_controller_input": controller_kl,
            "score": scaled.mean().item(),
            "return": targets.returns[:, 0].mean().item(),
            **({"explained_variance": explained_variance(rollout.values, targets.returns, mask),
                "value_mean": rollout.last_values().mean().item()} if self.uses_values else {}),
            "response_length": mask.sum(-1).mean().item(),
            "skipped_minibatches": float(skipped),
            "elastic_reset": float(reset),
            "time/update": time.perf_counter() - started,
        })
        return stats

    def _minibatch_groups(self, size: int, step: int, epoch: int) -> list[list[torch.Tensor]]:
        """Shuffled mini-batches, grouped by optimiser step (gradient accumulation)."""
        ppo = self.config.ppo
        order = torch.randperm(size, generator=generator("minibatch", self.config.seed, step,
                                                         self.index, epoch))
        minibatches = list(order.split(ppo.mini_batch_size))
        accumulate = ppo.gradient_accumulation_steps
        return [minibatches[i:i + accumulate] for i in range(0, len(minibatches), accumulate)]

    def _optimise(self, rollout: Rollout, targets: Targets, group: list[torch.Tensor]) -> dict[str, float] | None:
        """One optimiser step over a group of mini-batches; None if it had to be skipped."""
        ppo = self.config.ppo
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}
        for rows in group:
            batch = MiniBatch.take(rollout, rows.to(self.device), targets.advantages, targets.returns,
                                   trim=ppo.fast_path)
            with self._autocast():
                out = self.scorer(batch.query_ids, batch.query_mask, batch.response_ids,
                                  batch.response_mask, with_entropy=True,
                                  temperature=self.config.generation.temperature,
                                  head_on_response_only=ppo.fast_path, with_values=self.uses_values)
            loss, loss_stats = minibatch_loss(self.config.algorithm, ppo, out, batch)
            if not torch.isfinite(loss):
                self.optimizer.zero_grad(set_to_none=True)
                return None
            (loss / len(group)).backward()
            for key, value in loss_stats.items():
                sums[key] = sums.get(key, 0.0) + value.item() / len(group)
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, ppo.max_grad_norm or float("inf"))
        if not torch.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            return None
        self.optimizer.step()
        if self.elastic is not None and self.config.elastic_reset.ema_every == "optimizer_step":
            self.elastic.update_ema()
        sums["grad_norm"] = grad_norm.item()
        return sums

    def _elastic_step(self, step: int) -> bool:
        if self.elastic is None:
            return False
        if self.config.elastic_reset.ema_every == "iteration":
            self.elastic.update_ema()
        if self.elastic.due(step):
            self.elastic.reset()
            return True
        return False

    def reset_learning_state(self) -> None:
        """What rebuilding a TRL PPO trainer resets (``roles.reset_on_swap``): a fresh Adam
        state, the initial KL coefficient and fresh score moments. Weights, value head, LR
        schedule, baseline and Elastic-Reset EMA are kept."""
        self.optimizer.state.clear()
        self.kl_ctl = self._new_kl_controller()
        self.moments = RunningMoments()

    def _new_kl_controller(self) -> FixedKLController:
        ppo = self.config.ppo
        return (AdaptiveKLController(ppo.init_kl_coef, ppo.target, ppo.horizon)
                if ppo.adap_kl_ctrl else FixedKLController(ppo.init_kl_coef))

    def _fault(self, stats: dict[str, float | str], reason: str) -> dict[str, float | str]:
        """This iteration's update was skipped; say why (the trainer counts faults)."""
        stats.update({"fault": 1.0, "fault_reason": reason})
        return stats
    # ------------------------------------------------------------ persistence
    def state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Everything needed to continue exactly: tensors, and JSON-able metadata."""
        tensors = {f"param.{name}": p.detach() for name, p in self.trainable.items()}
        tensors.update({f"value_head.{k}": v for k, v in self.policy.value_head.state_dict().items()})
        optimizer = self.optimizer.state_dict()
        for index, slots in optimizer["state"].items():
            for key, value in slots.items():
                tensors[f"optim.{index}.{key}"] = value
        if self.elastic is not None:
            tensors.update(self.elastic.tensors())
        meta = {
            "param_groups": optimizer["param_groups"],
            "scheduler": self.scheduler.state_dict(),
            "kl_ctl": self.kl_ctl.state_dict(),
            "moments": self.moments.state_dict(),
            "baseline": self.baseline.state_dict() if self.baseline else None,
            "elastic_resets": self.elastic.resets if self.elastic else 0,
        }
        return tensors, meta

    def load_state(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        """Restore what ``state`` returned."""
        with torch.no_grad():
            for name, param in self.trainable.items():
                param.copy_(tensors[f"param.{name}"])
        self.policy.value_head.load_state_dict(
            {k.removeprefix("value_head."): v for k, v in tensors.items() if k.startswith("value_head.")})
        slots: dict[int, dict[str, torch.Tensor]] = {}
        for key, value in tensors.items():
            if key.startswith("optim."):
                _, index, name = key.split(".", 2)
                slots.setdefault(int(index), {})[name] = value
        self.optimizer.load_state_dict({"state": slots, "param_groups": meta["param_groups"]})
        self.scheduler.load_state_dict(meta["scheduler"])
        self.kl_ctl.load_state_dict(meta["kl_ctl"])
        self.moments.load_state_dict(meta["moments"])
        if self.baseline is not None:
            self.baseline.load_state_dict(meta["baseline"])
        if self.elastic is not None:
            self.elastic.load_tensors(tensors)
            self.elastic.resets = int(meta["elastic_resets"])

    def write_state(self, folder: Path) -> dict[str, Any]:
        """Write this agent's tensors into checkpoint folder ``folder``; return its metadata."""
        tensors, meta = self.state()
        save_tensors(Path(folder), self.name, tensors)
        return meta

    def read_state(self, folder: Path, meta: dict[str, Any]) -> None:
        """Restore from checkpoint folder ``folder`` and the metadata ``write_state`` returned."""
        self.load_state(load_file(str(Path(folder) / f"{self.name}.safetensors")), meta)

    def save_pretrained(self, folder: Path) -> None:
        """A plain Hugging Face folder (LoRA merged in; the adapter also under ``adapter/``)
        plus ``value_head.safetensors``: loadable as a model spec."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.activate()
        lm = self.policy.lm
        if self.adapter is not None:
            lm.save_pretrained(folder / "adapter", selected_adapters=[self.adapter])
            lm = copy.deepcopy(lm).merge_and_unload(adapter_names=[self.adapter])
        lm.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)
        self.policy.save_value_head(folder)
