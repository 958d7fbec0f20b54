"""Held-out evaluation: task reward and KL to the reference (the paper's two axes),
Pass@k where the task has a correct answer, and the reward-KL Pareto frontier."""

from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import Any

import torch

from cory.config import RunConfig
from cory.multi.episode import run_episode, score_episode, system_choice
from cory.multi.topology import Topology
from cory.rewards.base import RewardFunction
from cory.tasks.base import Task


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased Pass@k of Chen et al. (2021): ``1 - C(n - c, k) / C(n, k)``."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def pareto_frontier(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points ``(kl, reward)`` that no other point beats on both axes
    (lower KL and higher reward), sorted by KL."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    frontier, best = [], float("-inf")
    for i in order:
        if points[i][1] > best:
            frontier.append(i)
            best = points[i][1]
    return frontier


@dataclass
class EvalResult:
    metrics: dict[str, float]
    samples: list[dict[str, Any]]


def evaluate(agents, topology: Topology, agent_for_role: list[int], task: Task,
             reward: RewardFunction, config: RunConfig, n_samples: int = 8) -> EvalResult:
    """Run the topology on held-out queries with a fixed sampling seed and summarise."""
    n = config.eval.samples_per_prompt
    queries = task.test[: config.eval.n_prompts]
    repeated = [q for q in queries for _ in range(n)]
    episode = run_episode(agents, topology, agent_for_role, task, repeated, step=config.eval.seed,
                          phase="eval", greedy=config.eval.greedy, keep=False)
    rewards = score_episode(episode, reward)
    kl = episode.kl()
    names = topology.role_names()
    metrics: dict[str, float] = {}
    for role, name in enumerate(names):
        agent = agent_for_role[role]
        lengths = torch.tensor(episode.replies[role].lengths, dtype=torch.float32)
        for prefix in (f"eval/{name}", f"eval/agent{agent}"):
            metrics[f"{prefix}/task_reward"] = rewards[role].mean().item()
            metrics[f"{prefix}/kl"] = kl[role].mean().item()
            metrics[f"{prefix}/response_length"] = lengths.mean().item()
    metrics["eval/task_reward"] = rewards.mean().item()
    metrics["eval/kl"] = kl.mean().item()
    chosen = system_choice(episode, config.topology.answer)
    columns = torch.arange(len(repeated))
    metrics["eval/system/task_reward"] = rewards[chosen, columns].mean().item()
    if task.checker is not None:
        metrics.update(_pass_metrics(episode, task, names, n, config.eval.pass_k, chosen))
    samples = [
        {"role": names[role], "agent": agent_for_role[role], "query": repeated[i].query,
         "prompt": episode.prompts[role][i], "response": episode.replies[role].texts[i],
         "task_reward": rewards[role, i].item()}
        for i in range(min(n_samples, len(repeated))) for role in range(episode.n_roles)
    ]
    return EvalResult(metrics, samples)


def _pass_metrics(episode, task: Task, names: list[str], n: int, ks: list[int],
                  chosen: torch.Tensor) -> dict[str, float]:
    correct = torch.tensor([task.checker(episode.queries, reply.texts) for reply in episode.replies],
                           dtype=torch.long)  # [role, query * n]
    metrics: dict[str, float] = {}
    per_role = correct.view(len(names), -1, n).sum(-1)  # [role, query]
    system = correct[chosen, torch.arange(correct.shape[1])].view(-1, n).sum(-1)
    for k in ks:
        for role, name in enumerate(names):
            metrics[f"eval/{name}/pass@{k}"] = sum(pass_at_k(n, int(c), k) for c in per_role[role]) / per_role.shape[1]
        metrics[f"eval/pass@{k}"] = sum(metrics[f"eval/{name}/pass@{k}"] for name in names) / len(names)
        metrics[f"eval/system/pass@{k}"] = sum(pass_at_k(n, int(c), k) for c in system) / len(system)
    return metrics
