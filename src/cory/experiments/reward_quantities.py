"""Which reward a multi-agent run is judged by: the alternatives to a suite's analysed
trajectory that a comparison's verdict is checked against.

A run of several agents evaluates each agent alone on the plain query
(``eval/agent{i}/solo/``), and CORY's observer with the pioneer's answer (``eval/observer/``);
a suite compares one of them (by default ``eval/solo``, the agents' mean). Each quantity below
turns a run's evaluation rows into a ``(kl, reward)`` trajectory; a run of one agent has only
its analysed trajectory, so every quantity is that one for it.

- ``mean of agents``: the suite's analysed trajectory itself.
- ``agent i``: agent i alone.
- ``observer``: the observer role (its reward and KL with the pioneer's answer in the prompt).
- ``better agent``: the agent whose reward at the run's last evaluation is higher, its whole
  trajectory (chosen after the fact: biased upwards for the multi-agent run).
- ``best of two``: at each evaluation, the point of whichever agent has the higher reward
  (biased upwards further: the choice is made at every evaluation).
"""

from __future__ import annotations

import re
from typing import Any

from cory.experiments.stats import Trajectory

QUANTITIES = ("mean of agents", "agent 0", "agent 1", "observer", "better agent", "best of two")
_AGENT_KEY = re.compile(r"^eval/agent(\d+)/solo/task_reward$")


def agents_evaluated_alone(evals: list[dict[str, Any]]) -> list[int]:
    """The agent indices with a solo evaluation among ``evals`` (empty for a one-agent run)."""
    found = {int(m.group(1)) for row in evals for key in row if (m := _AGENT_KEY.match(key))}
    return sorted(found) if len(found) > 1 else []


def prefix_trajectory(evals: list[dict[str, Any]], prefix: str) -> Trajectory:
    """The ``(kl, reward)`` evaluations of ``prefix`` in time order."""
    return [(r[f"{prefix}/kl"], r[f"{prefix}/task_reward"]) for r in evals
            if f"{prefix}/kl" in r and f"{prefix}/task_reward" in r]


def quantity_trajectory(evals: list[dict[str, Any]], quantity: str, analysed: str) -> Trajectory:
    """The trajectory of ``quantity`` (one of ``QUANTITIES``) from a run's evaluation rows;
    ``analysed`` is the suite's trajectory prefix. Empty when the run lacks the quantity."""
    if quantity not in QUANTITIES:
        raise ValueError(f"unknown reward quantity {quantity!r}; choose from {', '.join(QUANTITIES)}")
    agents = agents_evaluated_alone(evals)
    if quantity == "mean of agents" or not agents:
        return prefix_trajectory(evals, analysed)
    if quantity == "observer":
        return prefix_trajectory(evals, "eval/observer")
    paths = {i: prefix_trajectory(evals, f"eval/agent{i}/solo") for i in agents}
    if quantity.startswith("agent "):
        return paths.get(int(quantity.removeprefix("agent ")), [])
    if quantity == "better agent":
        return max(paths.values(), key=lambda path: path[-1][1] if path else float("-inf"))
    if len({len(path) for path in paths.values()}) != 1:
        return []  # best of two needs every agent at every evaluation
    return [max(points, key=lambda point: point[1]) for points in zip(*paths.values())]
