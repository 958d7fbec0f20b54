"""The trainer's handle on its agents: a typed ``AgentGroup``, wherever the agents live.

Every call on agents goes through one generic dispatch, ``map(Agent.method, calls)``: mypy
checks each call's arguments against the ``Agent`` method and infers its result type, so a
new agent verb is written once, on ``Agent``. ``LocalAgents`` holds the agents in this
process and runs calls one after the other; ``RayAgents`` (``agents/ray_group.py``) runs
them on one actor per agent, several agents in parallel. Arguments and results are text,
numbers and paths only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar, TypeVarTuple

from cory.agents.agent import Agent
from cory.errors import CoryError
from cory.provenance import describe_device

Ts = TypeVarTuple("Ts")
R = TypeVar("R")


class AgentGroup(Protocol):
    """What the trainer asks of its agents. Calls naming several agents may run in parallel."""

    restarts: int  # how often ``restart`` replaced the agents' processes

    def __len__(self) -> int: ...

    def map(self, method: Callable[[Agent, *Ts], R], calls: Mapping[int, tuple[*Ts]]) -> dict[int, R]:
        """``method`` called on each named agent with that agent's arguments; its results by agent."""
        ...

    def devices(self) -> list[str]:
        """Where each agent's model lives, in order, e.g. ``cpu`` or ``cuda:0 (NVIDIA H200)``."""
        ...

    def restart(self) -> None:
        """Replace every agent's process with a fresh one; state then comes from a checkpoint."""
        ...

    def close(self) -> None:
        """Release what the agents hold (processes, engines)."""
        ...


def on_every_agent(agents: AgentGroup, method: Callable[[Agent, *Ts], R], *args: *Ts) -> list[R]:
    """``method(*args)`` on every agent, results in agent order."""
    results = agents.map(method, {index: args for index in range(len(agents))})
    return [results[index] for index in range(len(agents))]


class LocalAgents:
    """Agents living in this process."""

    def __init__(self, agents: list[Agent]) -> None:
        self.agents = agents
        self.restarts = 0

    def __len__(self) -> int:
        return len(self.agents)

    def map(self, method: Callable[[Agent, *Ts], R], calls: Mapping[int, tuple[*Ts]]) -> dict[int, R]:
        # By name, as on an actor: the agent's own binding of the method answers.
        name = method.__name__
        return {index: getattr(self.agents[index], name)(*args) for index, args in calls.items()}

    def devices(self) -> list[str]:
        return [describe_device(agent.device) for agent in self.agents]

    def restart(self) -> None:
        """Agents in this process are never lost: nothing to replace."""
        raise CoryError("in-process agents cannot be restarted; only backend: ray replaces lost agents")

    def close(self) -> None:
        """Stop the agents' rollout engines (vLLM), if any."""
        for agent in self.agents:
            agent.close()


def read_agent_states(agents: AgentGroup, folder: Path, metas: list[dict[str, Any]]) -> None:
    """Every agent restores itself from checkpoint ``folder`` and its own metadata."""
    agents.map(Agent.read_state, {index: (folder, meta) for index, meta in enumerate(metas)})


def export_agents(agents: AgentGroup, folder: Path) -> None:
    """Every agent exports a Hugging Face folder ``folder/agentN``."""
    agents.map(Agent.save_pretrained, {index: (folder / f"agent{index}",) for index in range(len(agents))})
