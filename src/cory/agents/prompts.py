"""Prompts to model inputs: the chat template, tokenisation, left truncation and padding."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from cory.errors import CoryError


@dataclass
class EncodedPrompts:
    """Left-padded prompt ids and mask, and how many prompts lost their start."""

    ids: torch.Tensor
    mask: torch.Tensor
    truncated: int


def context_length(lm: torch.nn.Module) -> int | None:
    """The model's context window in tokens, when its config says."""
    config = lm.config
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


class PromptEncoder:
    """Turns prompt texts into left-padded ids that leave room for ``max_new_tokens``."""

    def __init__(self, owner: str, tokenizer: PreTrainedTokenizerBase, use_chat: bool,
                 max_prompt_tokens: int, max_new_tokens: int, context: int | None) -> None:
        self.owner = owner
        self.tokenizer = tokenizer
        self.use_chat = use_chat
        self.limit = max_prompt_tokens if context is None else min(max_prompt_tokens, context - max_new_tokens)
        if self.limit < 1:
            raise CoryError(f"{owner}: generation.max_new_tokens ({max_new_tokens}) leaves no room "
                            f"for a prompt in the model's context of {context} tokens; lower it")

    def format(self, prompt: str) -> str:
        """The prompt as the model sees it: wrapped in the chat template when one is used."""
        if not self.use_chat:
            return prompt
        return str(self.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True))

    def encode(self, prompts: list[str], device: torch.device) -> EncodedPrompts:
        """Prompts over the token budget lose their start (the end carries the question)."""
        texts = [self.format(p) for p in prompts]
        encoded = self.tokenizer(texts, add_special_tokens=not self.use_chat)["input_ids"]
        return self.padded(encoded, [repr(p) for p in prompts], device)

    def padded(self, encoded: list[list[int]], names: list[str], device: torch.device) -> EncodedPrompts:
        """Token ids as the model reads them, as they are (token in: a kept conversation is
        never decoded and encoded again), left-truncated to the budget and left-padded."""
        truncated = sum(len(ids) > self.limit for ids in encoded)
        kept = [row[-self.limit:] for row in encoded]
        for i, row in enumerate(kept):
            if not row:
                raise CoryError(f"{self.owner}: prompt {i} ({names[i]}) is empty after "
                                "tokenisation; drop empty prompts from the data")
        width = max(len(row) for row in kept)
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(x)) + x for x in kept], device=device)
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in kept], device=device)
        return EncodedPrompts(ids, mask, truncated)
