"""An agent's learning state as checkpoint files: trainable weights, value head, optimiser
slots and Elastic-Reset EMA as tensors; schedule, KL controller, score moments and baseline
as JSON-able metadata. Everything needed to continue exactly."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file

from cory.checkpoint import save_tensors
from cory.distributed.sharding import full, shaped_like

if TYPE_CHECKING:
    from cory.agents.agent import Agent


def agent_state(agent: Agent) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The agent's tensors (whole, also when it is sharded: every rank must call this) and
    JSON-able metadata."""
    tensors = {f"param.{name}": full(p.detach()) for name, p in agent.trainable.items()}
    tensors.update({f"value_head.{k}": full(v) for k, v in agent.policy.value_head.state_dict().items()})
    optimizer = agent.optimizer.state_dict()
    for index, slots in optimizer["state"].items():
        for key, value in slots.items():
            tensors[f"optim.{index}.{key}"] = full(value)
    if agent.elastic is not None:
        tensors.update(agent.elastic.tensors())
    meta = {
        "param_groups": optimizer["param_groups"],
        "scheduler": agent.scheduler.state_dict(),
        "kl_ctl": agent.kl_ctl.state_dict(),
        "moments": agent.moments.state_dict(),
        "baseline": agent.baseline.state_dict() if agent.baseline else None,
        "elastic_resets": agent.elastic.resets if agent.elastic else 0,
        "dropout_active": agent.dropout_active,
    }
    return tensors, meta


def load_agent_state(agent: Agent, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    """Restore what ``agent_state`` returned."""
    with torch.no_grad():
        for name, param in agent.trainable.items():
            param.copy_(shaped_like(param, tensors[f"param.{name}"].to(param.device)))
        for name, param in agent.policy.value_head.named_parameters():
            param.copy_(shaped_like(param, tensors[f"value_head.{name}"].to(param.device)))
    params = [p for group in agent.optimizer.param_groups for p in group["params"]]
    slots: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, index, name = key.split(".", 2)
            param = params[int(index)]
            # moments are sharded as their parameter; the step count stays a plain scalar
            sharded = value.shape == param.shape and value.dim() > 0
            slots.setdefault(int(index), {})[name] = shaped_like(param, value.to(param.device)) if sharded else value
    agent.optimizer.load_state_dict({"state": slots, "param_groups": meta["param_groups"]})
    agent.scheduler.load_state_dict(meta["scheduler"])
    agent.kl_ctl.load_state_dict(meta["kl_ctl"])
    agent.moments.load_state_dict(meta["moments"])
    if agent.baseline is not None:
        agent.baseline.load_state_dict(meta["baseline"])
    if agent.elastic is not None:
        agent.elastic.load_tensors(tensors)
        agent.elastic.resets = int(meta["elastic_resets"])
    agent.dropout_active = bool(meta.get("dropout_active", False))  # absent before agents.dropout


def write_agent_state(agent: Agent, folder: Path) -> dict[str, Any]:
    """Write the agent's tensors into checkpoint folder ``folder`` (rank 0 of a sharded agent
    writes them whole); return its metadata."""
    tensors, meta = agent_state(agent)
    if agent.shards is None or agent.shards.writes:
        save_tensors(Path(folder), agent.name, tensors)
    return meta


def read_agent_state(agent: Agent, folder: Path, meta: dict[str, Any]) -> None:
    """Restore from checkpoint folder ``folder`` and the metadata ``write_agent_state`` returned."""
    load_agent_state(agent, load_file(str(Path(folder) / f"{agent.name}.safetensors")), meta)
