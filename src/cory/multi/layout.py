"""Where each answer of an episode sits, and who gives it.

Two words, one meaning each:

- a **round** is one pass over the topology's roles (``topology.rounds`` of them);
- a **turn** is one answer of the unrolled graph: role ``role`` answering in round
  ``round``, numbered round by round (turn = round * n_roles + role).

An agent plays one role per round, so it speaks once per round; it keeps its turns in round
order and learns from all of them in one update. ``TurnLayout`` is that fact as a type:
nobody else slices turns by stride.
"""

from __future__ import annotations

from dataclasses import dataclass
from cory.multi.topology import Topology


@dataclass(frozen=True)
class Turn:
    """One answer of an episode: its index, its round, the role it plays and the agent speaking."""

    index: int
    round: int
    role: int
    agent: int


@dataclass(frozen=True)
class TurnLayout:
    """The turns of one iteration's episode: a topology with its roles handed to agents."""

    topology: Topology
    agent_for_role: tuple[int, ...]

    @classmethod
    def of(cls, topology: Topology, agent_for_role: list[int]) -> TurnLayout:
        return cls(topology, tuple(agent_for_role))

    @property
    def n_turns(self) -> int:
        return self.topology.n_turns

    @property
    def turns(self) -> list[Turn]:
        return [self.turn(index) for index in range(self.n_turns)]

    def turn(self, index: int) -> Turn:
        round_, role = self.topology.round_and_role(index)
        return Turn(index, round_, role, self.agent_for_role[role])

    def inputs(self, index: int) -> tuple[int, ...]:
        """The turns whose answers turn ``index`` is shown."""
        return self.topology.inputs(index)

    def of_agent(self, agent: int) -> list[Turn]:
        """``agent``'s turns in the order it keeps them: round by round."""
        return [turn for turn in self.turns if turn.agent == agent]

    def agents(self) -> list[int]:
        """The agents that speak, in the order of the roles they play."""
        return list(self.agent_for_role)

    def last_round(self) -> list[Turn]:
        """The turns of the last round, in role order: the answers a system gives."""
        return self.turns[self.n_turns - self.topology.n_roles:]
