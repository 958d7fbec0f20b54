"""One pass of the topology over a batch of queries: who answers what, in which order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from cory.agents.agent import Agent
from cory.agents.group import AgentGroup
from cory.multi.moe import select_by_value
from cory.multi.topology import Topology
from cory.rewards.base import RewardFunction, score_safely
from cory.tasks.base import Task
from cory.types import GenerateRequest, Prompt, Reply


@dataclass
class Episode:
    """Every role's prompts and replies for one batch of queries, and their task rewards."""

    queries: list[Prompt]
    agent_for_role: list[int]
    prompts: list[list[str]]  # [role][query]
    replies: list[Reply]  # [role]
    task_rewards: torch.Tensor | None = None  # [role, query]

    @property
    def n_roles(self) -> int:
        return len(self.replies)

    def values(self) -> torch.Tensor:
        return torch.tensor([reply.values for reply in self.replies])

    def kl(self) -> torch.Tensor:
        return torch.tensor([reply.kl for reply in self.replies])


def run_episode(agents: AgentGroup, topology: Topology, agent_for_role: list[int], task: Task,
                queries: list[Prompt], step: int, phase: str = "train", greedy: bool = False,
                keep: bool = True, budgets: list[int] | None = None) -> Episode:
    """Let every role answer, level by level; roles of one level are asked together.
    ``budgets`` (one per query) holds every role's answer to a query to the same token budget."""
    prompts: dict[int, list[str]] = {}
    replies: dict[int, Reply] = {}
    for level in topology.levels():
        requests: dict[int, tuple[GenerateRequest]] = {}
        for role in level:
            parents = topology.parents[role]
            if parents:
                role_prompts = [task.observer_prompt(q, [replies[p].texts[i] for p in parents])
                                for i, q in enumerate(queries)]
            else:
                role_prompts = [q.query for q in queries]
            prompts[role] = role_prompts
            requests[agent_for_role[role]] = (GenerateRequest(role_prompts, step, phase, greedy, keep, budgets),)
        answered = agents.map(Agent.generate, requests)
        for role in level:
            replies[role] = answered[agent_for_role[role]]
    roles = range(topology.n_roles)
    return Episode(queries, agent_for_role, [prompts[r] for r in roles], [replies[r] for r in roles])


def score_episode(episode: Episode, reward: RewardFunction) -> torch.Tensor:
    """Task reward of every role's answer, on (query, answer), in one batched call."""
    flat_prompts = [q for _ in episode.replies for q in episode.queries]
    flat_responses = [text for reply in episode.replies for text in reply.texts]
    scores = score_safely(reward, flat_prompts, flat_responses)
    episode.task_rewards = torch.tensor(scores, dtype=torch.float32).view(episode.n_roles, -1)
    return episode.task_rewards


def system_choice(episode: Episode, answer: str) -> torch.Tensor:
    """Per query, the role whose answer is the system's: the last role, or the highest value."""
    if answer == "value":
        return select_by_value(episode.values())
    return torch.full((len(episode.queries),), episode.n_roles - 1, dtype=torch.long)


def episode_samples(episode: Episode, rewards: torch.Tensor, names: list[str], n: int) -> list[dict[str, Any]]:
    """The first ``n`` queries' answers, role by role, as sample rows (role, agent, query,
    prompt, response, task reward)."""
    return [{"role": name, "agent": episode.agent_for_role[role], "query": episode.queries[i].query,
             "prompt": episode.prompts[role][i], "response": episode.replies[role].texts[i],
             "task_reward": rewards[role, i].item()}
            for i in range(min(n, len(episode.queries))) for role, name in enumerate(names)]


def metric_prefixes(role_name: str, agent: int, scope: str = "") -> tuple[str, str]:
    """The two names a role's metrics are logged under: the role's and its agent's
    (``pioneer/...`` and ``agent0/...``; with ``scope`` "eval/": ``eval/pioneer/...``)."""
    return f"{scope}{role_name}", f"{scope}agent{agent}"
