"""Communication topologies: a DAG over roles saying whose answers each role sees.

Role 0 always answers the bare query. ``pioneer_observer`` is CORY's two-node chain;
``single`` is plain PPO; ``independent`` (no edges) is the MoE baseline.

With ``rounds`` R > 1 the graph is unrolled R times into turns (turn ``r * n_roles + i`` is
role i answering in round r): in round r > 0 a role also sees every role's answer of round
r - 1, so the unrolled graph is still acyclic, and each agent answers once per round.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from cory.config.schema import RunConfig
from cory.errors import ConfigError
from cory.seeding import derive_seed


@dataclass(frozen=True)
class Topology:
    """``parents[r]`` lists the roles whose answers role ``r`` sees (all smaller than r),
    within a round; ``rounds`` unrolls it."""

    name: str
    parents: tuple[tuple[int, ...], ...]
    rounds: int = 1

    @property
    def n_roles(self) -> int:
        return len(self.parents)

    @property
    def n_turns(self) -> int:
        return self.rounds * self.n_roles

    def turn(self, round_: int, role: int) -> int:
        """The index of role ``role``'s answer in round ``round_``."""
        return round_ * self.n_roles + role

    def round_and_role(self, turn: int) -> tuple[int, int]:
        return divmod(turn, self.n_roles)

    def inputs(self, turn: int) -> tuple[int, ...]:
        """The turns whose answers ``turn`` is shown: every role's of the previous round,
        then its parents' of its own round."""
        round_, role = self.round_and_role(turn)
        previous = tuple(self.turn(round_ - 1, r) for r in range(self.n_roles)) if round_ > 0 else ()
        return previous + tuple(self.turn(round_, p) for p in self.parents[role])

    def edges(self) -> list[tuple[int, int]]:
        """Every ``(input turn, turn that sees it)`` pair of the unrolled graph."""
        return [(source, turn) for turn in range(self.n_turns) for source in self.inputs(turn)]

    def turn_names(self) -> list[str]:
        """Metric names of the turns: the role names in one round, ``round{r}/{role}`` in several."""
        names = self.role_names()
        if self.rounds == 1:
            return names
        return [f"round{r}/{name}" for r in range(self.rounds) for name in names]

    def role_names(self) -> list[str]:
        """``pioneer`` / ``observer`` for CORY's pair, ``role{i}`` otherwise."""
        if self.name == "pioneer_observer":
            return ["pioneer", "observer"]
        if self.n_roles == 1:
            return ["policy"]
        return [f"role{i}" for i in range(self.n_roles)]

    def levels(self) -> list[list[int]]:
        """Roles grouped so that every role comes after all of its parents."""
        depth: list[int] = []
        for parents in self.parents:
            depth.append(1 + max((depth[p] for p in parents), default=-1))
        return [[r for r, d in enumerate(depth) if d == level] for level in range(max(depth) + 1)]


def topology_of(config: RunConfig) -> Topology:
    """The topology a run config describes (``random`` graphs default to the run seed)."""
    topo = config.topology
    seed = config.seed if topo.seed is None else topo.seed
    return build_topology(topo.name, config.n_agents, topo.edge_prob, seed, topo.rounds)


def build_topology(name: str, n_agents: int, edge_prob: float = 0.5, seed: int = 0, rounds: int = 1) -> Topology:
    """The topology ``name`` over ``n_agents`` roles, unrolled ``rounds`` times."""
    if name == "single":
        parents: list[tuple[int, ...]] = [()]
    elif name == "pioneer_observer":
        parents = [(), (0,)]
    elif name == "chain":
        parents = [()] + [(i - 1,) for i in range(1, n_agents)]
    elif name == "mesh":
        parents = [tuple(range(i)) for i in range(n_agents)]
    elif name == "star":
        parents = [()] + [(0,)] * (n_agents - 1)
    elif name == "independent":
        parents = [()] * n_agents
    elif name == "random":
        parents = _random_dag(n_agents, edge_prob, seed)
    else:
        raise ConfigError(f"topology.name: unknown topology {name!r}")
    return Topology(name, tuple(parents), rounds)


def _random_dag(n: int, edge_prob: float, seed: int) -> list[tuple[int, ...]]:
    """Edges only go from lower to higher role index, so the graph is acyclic by design."""
    rng = random.Random(derive_seed("topology", seed))
    return [tuple(j for j in range(i) if rng.random() < edge_prob) for i in range(n)]
