"""The optimiser steps of one agent update: shuffled mini-batches grouped for gradient
accumulation, each group a forward, the algorithm's loss, a backward and one step. On a
sharded agent each rank takes some rows of every mini-batch, weighted by its token share."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from cory.agents.learner import LearnerState
from cory.agents.sampling import scoring_filters
from cory.agents.settings import AgentSettings
from cory.algorithms.loss_reduction import StepSize
from cory.algorithms.objective import Targets, minibatch_loss
from cory.batches import MiniBatch, Rollout
from cory.distributed.sharding import Shards, full
from cory.seeding import generator


class MinibatchSteps:
    """Optimiser steps over a rollout for agent ``index``, forwards through ``scorer``."""

    def __init__(self, index: int, scorer: nn.Module, learner: LearnerState, settings: AgentSettings,
                 shards: Shards | None, device: torch.device) -> None:
        self.index, self.scorer, self.learner, self.settings = index, scorer, learner, settings
        self.shards, self.device = shards, device

    def groups(self, turn_sizes: list[int], step: int, epoch: int) -> list[list[torch.Tensor]]:
        """Shuffled mini-batches, grouped by optimiser step (gradient accumulation). With
        several turns (rounds), each mini-batch holds rows of one turn (their prompts are of
        a kind: a later round's are longer, and a mixed mini-batch would pad every row to
        them) and the mini-batches of all turns are shuffled together."""
        ppo = self.settings.ppo
        draws = generator("minibatch", self.settings.seed, step, self.index, epoch)
        minibatches, start = [], 0
        for size in turn_sizes:
            minibatches += list((start + torch.randperm(size, generator=draws)).split(ppo.mini_batch_size))
            start += size
        if len(turn_sizes) > 1:
            minibatches = [minibatches[i] for i in torch.randperm(len(minibatches), generator=draws).tolist()]
        accumulate = ppo.gradient_accumulation_steps
        return [minibatches[i:i + accumulate] for i in range(0, len(minibatches), accumulate)]

    def take(self, rollout: Rollout, targets: Targets, group: list[torch.Tensor]) -> dict[str, float] | None:
        """One optimiser step over a group of mini-batches; its statistics, or None if it
        had to be skipped (a non-finite loss or gradient)."""
        settings, optimizer = self.settings, self.learner.optimizer
        optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}
        size = self._step_size(rollout, group)
        normalised = settings.objective.loss_type is not None  # each part already carries the step's normaliser
        top_k, top_p = scoring_filters(settings.generation)
        for rows in group:
            share, rows = self._share_of(rollout, rows)
            batch = MiniBatch.take(rollout, rows.to(self.device), targets.advantages, targets.returns,
                                   trim=settings.fast.trim_padding)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=settings.bf16_autocast):
                out = self.scorer(batch.query_ids, batch.query_mask, batch.response_ids,
                                  batch.response_mask, with_entropy=True,
                                  temperature=settings.generation.temperature,
                                  head_on_response_only=settings.fast.head_on_response_only,
                                  with_values=settings.uses_values, top_k=top_k, top_p=top_p,
                                  share_prompts=settings.fast.shared_prompts)
            everywhere = self._over_ranks(share)
            loss, loss_stats = minibatch_loss(settings.objective, out, batch, everywhere, size)
            if not torch.isfinite(loss):
                optimizer.zero_grad(set_to_none=True)
                return None
            ranks = 1 if self.shards is None else self.shards.world  # sharding averages gradients over ranks
            if not normalised:
                (loss * share * ranks / len(group)).backward()
            else:  # bnpo's local normaliser is averaged over ranks, as TRL's is
                (loss * (1 if settings.objective.loss_type == "bnpo" else ranks)).backward()
            for key, value in loss_stats.items():
                sums[key] = sums.get(key, 0.0) + float(everywhere(value)) / len(group)
        params = [p for g in optimizer.param_groups for p in g["params"]]
        grad_norm = full(torch.nn.utils.clip_grad_norm_(params, settings.ppo.max_grad_norm or float("inf")))
        if not torch.isfinite(grad_norm):
            optimizer.zero_grad(set_to_none=True)
            return None
        optimizer.step()
        if self.learner.elastic is not None and settings.elastic_reset.ema_every == "optimizer_step":
            self.learner.elastic.update_ema()
        sums["grad_norm"] = grad_norm.item()
        return sums

    def _step_size(self, rollout: Rollout, group: list[torch.Tensor]) -> StepSize:
        """The response tokens and sequences of one optimiser step, on this rank and on all."""
        tokens = sequences = 0.0
        for rows in group:
            mine = rows if self.shards is None else self.shards.rows(rows)
            tokens += rollout.response_mask[mine.to(rollout.response_mask.device)].sum().item()
            sequences += len(mine)
        if self.shards is None:
            return StepSize(tokens, sequences, tokens, sequences)
        return StepSize(tokens, sequences, self.shards.total(tokens), self.shards.total(sequences))

    def _share_of(self, rollout: Rollout, rows: torch.Tensor) -> tuple[float, torch.Tensor]:
        """This rank's rows of a mini-batch and its share of the mini-batch's response tokens
        (1 and every row unsharded)."""
        if self.shards is None:
            return 1.0, rows
        mine = self.shards.rows(rows)
        tokens = rollout.response_mask[mine.to(rollout.response_mask.device)].sum().item()
        return tokens / max(self.shards.total(tokens), 1.0), mine

    def _over_ranks(self, share: float) -> Callable[[torch.Tensor], torch.Tensor]:
        """Turns this rank's token mean into the mean over every rank's tokens."""
        if self.shards is None:
            return lambda value: value
        shards = self.shards
        return lambda value: torch.tensor(shards.total(float(value) * share), device=value.device)
