"""A trained agent as a plain Hugging Face model folder."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING

from safetensors.torch import save_file

from cory.distributed.sharding import full
from cory.models.policy import VALUE_HEAD_FILE

if TYPE_CHECKING:
    from cory.agents.agent import Agent


def export_agent(agent: Agent, folder: Path) -> None:
    """Write a Hugging Face folder (LoRA merged in; the adapter also under ``adapter/``) plus
    ``value_head.safetensors``: loadable as a model spec. A sharded agent is gathered whole."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    agent.activate()
    lm = agent.policy.lm
    if agent.shards is not None:  # gather the whole model (every rank), rank 0 writes it
        weights = {name: full(value).detach().cpu() for name, value in lm.state_dict().items()}
        head = {name: full(value).detach().cpu().contiguous() for name, value in agent.policy.value_head.state_dict().items()}
        if agent.shards.writes:
            lm.save_pretrained(folder, state_dict=weights)
            agent.tokenizer.save_pretrained(folder)
            save_file(head, str(folder / VALUE_HEAD_FILE))
        return
    if agent.adapter is not None:
        lm.save_pretrained(folder / "adapter", selected_adapters=[agent.adapter])
        lm = copy.deepcopy(lm).merge_and_unload(adapter_names=[agent.adapter])
    lm.save_pretrained(folder)
    agent.tokenizer.save_pretrained(folder)
    agent.policy.save_value_head(folder)
