"""Frozen reference models: the fixed point every agent's KL penalty is measured against.

Agents built from one base share one reference. With LoRA on a shared base the reference
is that base with the adapters switched off, so it costs no extra memory.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, cast

import torch
from transformers import PreTrainedModel

from cory.models.policy import PolicyOutput, score_sequences


class Reference:
    """Scores sequences with a frozen LM, in inference mode."""

    def __init__(self, lm: PreTrainedModel,
                 context: Callable[[], ContextManager] = contextlib.nullcontext) -> None:
        self.lm = lm
        self._context = context
        for param in lm.parameters():
            param.requires_grad_(False)

    @torch.inference_mode()
    def score(self, query_ids: torch.Tensor, query_mask: torch.Tensor, response_ids: torch.Tensor,
              response_mask: torch.Tensor, temperature: float = 1.0,
              share_prompts: bool = False) -> PolicyOutput:
        with self._context():
            return score_sequences(self.lm, query_ids, query_mask, response_ids, response_mask,
                                   temperature=temperature, share_prompts=share_prompts)


def frozen_reference(lm: PreTrainedModel) -> Reference:
    """A reference that owns its own (frozen) copy of the weights."""
    return Reference(lm.eval())


def adapter_free_reference(peft_model: PreTrainedModel) -> Reference:
    """The shared base of a peft model, scored with every adapter disabled."""
    reference = Reference.__new__(Reference)
    reference.lm = peft_model
    reference._context = cast(Any, peft_model).disable_adapter  # a peft model's
    return reference
