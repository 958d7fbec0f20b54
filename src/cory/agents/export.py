"""A trained agent as a plain Hugging Face model folder."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cory.agents.agent import Agent


def export_agent(agent: Agent, folder: Path) -> None:
    """Write a Hugging Face folder (LoRA merged in; the adapter also under ``adapter/``) plus
    ``value_head.safetensors``: loadable as a model spec."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    agent.activate()
    lm = agent.policy.lm
    if agent.adapter is not None:
        lm.save_pretrained(folder / "adapter", selected_adapters=[agent.adapter])
        lm = copy.deepcopy(lm).merge_and_unload(adapter_names=[agent.adapter])
    lm.save_pretrained(folder)
    agent.tokenizer.save_pretrained(folder)
    agent.policy.save_value_head(folder)
