"""The trainer's handle on its agents: a typed ``AgentGroup``, wherever the agents live.

``LocalAgents`` holds them in this process and runs calls one after the other; the Ray
backend's ``RayAgents`` offers the same methods over one actor per agent and runs calls on
several agents in parallel. Arguments and results are text, numbers and paths only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from cory.agents.agent import Agent
from cory.errors import CoryError
from cory.provenance import describe_device
from cory.types import GenerateRequest, Reply, Stats


class AgentGroup(Protocol):
    """What the trainer asks of its agents. Calls naming several agents may run in parallel."""

    restarts: int  # how often ``restart`` replaced the agents' processes

    def __len__(self) -> int: ...

    def devices(self) -> list[str]:
        """Where each agent's model lives, in order, e.g. ``cpu`` or ``cuda:0 (NVIDIA H200)``."""

    def generate(self, requests: dict[int, GenerateRequest]) -> dict[int, Reply]:
        """Each named agent answers its request."""

    def update(self, scores: dict[int, list[float]], step: int) -> dict[int, Stats]:
        """Each named agent learns from its held rollout with these scores."""

    def reset_learning_state(self) -> None:
        """Fresh optimiser, initial KL coefficient and fresh score moments for every agent."""

    def write_state(self, folder: Path) -> list[dict[str, Any]]:
        """Every agent writes its tensors into checkpoint ``folder``; their metadata, in order."""

    def read_state(self, folder: Path, metas: list[dict[str, Any]]) -> None:
        """Every agent restores itself from ``folder`` and its metadata."""

    def save_pretrained(self, folder: Path) -> None:
        """Every agent exports a Hugging Face folder ``folder/agentN``."""

    def restart(self) -> None:
        """Replace every agent's process with a fresh one; state then comes from a checkpoint."""

    def close(self) -> None:
        """Release what the agents hold (processes, engines)."""


class LocalAgents:
    """Agents living in this process."""

    def __init__(self, agents: list[Agent]) -> None:
        self.agents = agents
        self.restarts = 0

    def __len__(self) -> int:
        return len(self.agents)

    def devices(self) -> list[str]:
        return [describe_device(agent.device) for agent in self.agents]

    def generate(self, requests: dict[int, GenerateRequest]) -> dict[int, Reply]:
        return {i: self.agents[i].generate(request) for i, request in requests.items()}

    def update(self, scores: dict[int, list[float]], step: int) -> dict[int, Stats]:
        return {i: self.agents[i].update(values, step) for i, values in scores.items()}

    def reset_learning_state(self) -> None:
        for agent in self.agents:
            agent.reset_learning_state()

    def write_state(self, folder: Path) -> list[dict[str, Any]]:
        return [agent.write_state(folder) for agent in self.agents]

    def read_state(self, folder: Path, metas: list[dict[str, Any]]) -> None:
        for agent, meta in zip(self.agents, metas, strict=True):
            agent.read_state(folder, meta)

    def save_pretrained(self, folder: Path) -> None:
        for agent in self.agents:
            agent.save_pretrained(Path(folder) / agent.name)

    def restart(self) -> None:
        """Agents in this process are never lost: nothing to replace."""
        raise CoryError("in-process agents cannot be restarted; only backend: ray replaces lost agents")

    def close(self) -> None:
        """Stop the agents' rollout engines (vLLM), if any."""
        for agent in self.agents:
            agent.close()
