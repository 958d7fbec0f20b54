"""A trained agent as a plain Hugging Face model folder."""

from __future__ import annotations

import copy
from typing import Any, cast
from pathlib import Path

from safetensors.torch import save_file
from transformers import PreTrainedTokenizerBase

from cory.distributed.sharding import Shards, full
from cory.models.policy import VALUE_HEAD_FILE, Policy


def export_policy(policy: Policy, tokenizer: PreTrainedTokenizerBase, folder: Path,
                  adapter: str | None = None, shards: Shards | None = None) -> None:
    """Write a Hugging Face folder (LoRA ``adapter`` merged in; the adapter also under
    ``adapter/``) plus ``value_head.safetensors``: loadable as a model spec. A sharded
    policy is gathered whole (every rank calls this; rank 0 writes)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lm = policy.lm
    if shards is not None:
        weights = {name: full(value).detach().cpu() for name, value in lm.state_dict().items()}
        head = {name: full(value).detach().cpu().contiguous() for name, value in policy.value_head.state_dict().items()}
        if shards.writes:
            lm.save_pretrained(folder, state_dict=weights)
            tokenizer.save_pretrained(folder)
            save_file(head, str(folder / VALUE_HEAD_FILE))
        return
    if adapter is not None:
        lm.save_pretrained(folder / "adapter", selected_adapters=[adapter])
        lm = cast(Any, copy.deepcopy(lm)).merge_and_unload(adapter_names=[adapter])  # a peft model
    lm.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    policy.save_value_head(folder)
