"""The trainer's handle on its agents: call a method on several agents at once.

``LocalAgents`` runs the calls one after the other in this process; the Ray backend
offers the same interface with one actor per agent, running the calls in parallel.
"""

from __future__ import annotations

from typing import Any

from cory.agents.agent import Agent


class LocalAgents:
    """Agents living in this process."""

    def __init__(self, agents: list[Agent]) -> None:
        self.agents = agents

    def __len__(self) -> int:
        return len(self.agents)

    def call(self, method: str, calls: dict[int, tuple]) -> dict[int, Any]:
        """``{agent: args}`` -> ``{agent: getattr(agent, method)(*args)}``."""
        return {index: getattr(self.agents[index], method)(*args) for index, args in calls.items()}

    def call_all(self, method: str, *args: Any) -> list[Any]:
        """The same call on every agent, results in agent order."""
        results = self.call(method, {i: args for i in range(len(self.agents))})
        return [results[i] for i in range(len(self.agents))]

    def close(self) -> None:
        """Nothing to release for in-process agents."""
