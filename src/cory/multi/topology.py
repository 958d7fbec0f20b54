"""Communication topologies: a DAG over roles saying whose answers each role sees.

Role 0 always answers the bare query. ``pioneer_observer`` is CORY's two-node chain;
``single`` is plain PPO; ``independent`` (no edges) is the MoE baseline.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from cory.config import RunConfig
from cory.errors import ConfigError
from cory.seeding import derive_seed


@dataclass(frozen=True)
class Topology:
    """``parents[r]`` lists the roles whose answers role ``r`` sees (all smaller than r)."""

    name: str
    parents: tuple[tuple[int, ...], ...]

    @property
    def n_roles(self) -> int:
        return len(self.parents)

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
    return build_topology(topo.name, config.n_agents, topo.edge_prob, seed)


def build_topology(name: str, n_agents: int, edge_prob: float = 0.5, seed: int = 0) -> Topology:
    """The topology ``name`` over ``n_agents`` roles."""
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
    return Topology(name, tuple(parents))


def _random_dag(n: int, edge_prob: float, seed: int) -> list[tuple[int, ...]]:
    """Edges only go from lower to higher role index, so the graph is acyclic by design."""
    rng = random.Random(derive_seed("topology", seed))
    return [tuple(j for j in range(i) if rng.random() < edge_prob) for i in range(n)]
