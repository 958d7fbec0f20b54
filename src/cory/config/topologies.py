"""What each topology name promises before a graph is built: how many agents it fixes, and
whether its roles see one another's answers within a round. The config checks read this
table; ``multi/topology.py`` builds the graphs and its tests hold it to the table."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TopologyFacts:
    fixed_agents: int | None  # None: topology.n_agents chooses (3 when unset)
    edges_within_round: bool | None  # None: drawn at random (``random``)


TOPOLOGIES: dict[str, TopologyFacts] = {
    "single": TopologyFacts(fixed_agents=1, edges_within_round=False),
    "pioneer_observer": TopologyFacts(fixed_agents=2, edges_within_round=True),
    "chain": TopologyFacts(fixed_agents=None, edges_within_round=True),
    "mesh": TopologyFacts(fixed_agents=None, edges_within_round=True),
    "star": TopologyFacts(fixed_agents=None, edges_within_round=True),
    "random": TopologyFacts(fixed_agents=None, edges_within_round=None),
    "independent": TopologyFacts(fixed_agents=None, edges_within_round=False),
}
DEFAULT_AGENTS = 3
