"""Held-out evaluation: task reward and KL to the reference (the paper's two axes),
Pass@k where the task has a correct answer, and the reward-KL Pareto frontier."""

from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import Any

import torch

from cory.agents.agent import Agent
from cory.agents.group import AgentGroup
from cory.agents.sampling import stratified_budgets
from cory.config import RunConfig
from cory.multi.episode import (Episode, episode_samples, metric_prefixes, run_episode, score_episode,
                                system_choice)
from cory.multi.moe import gather_selected
from cory.multi.topology import Topology
from cory.multi.transfer import transfer_metrics
from cory.rewards.base import RewardFunction, score_safely
from cory.tasks.base import Task
from cory.types import GenerateRequest, Prompt, Reply


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


def evaluate(agents: AgentGroup, topology: Topology, agent_for_role: list[int], task: Task,
             reward: RewardFunction, config: RunConfig, n_samples: int = 8) -> EvalResult:
    """Run the topology on held-out queries with a fixed sampling seed and summarise."""
    n = config.eval.samples_per_prompt
    queries = task.test[: config.eval.n_prompts]
    repeated = [q for q in queries for _ in range(n)]
    budgets = evaluation_budgets(config, len(repeated))
    episode = run_episode(agents, topology, agent_for_role, task, repeated, step=config.eval.seed,
                          phase="eval", greedy=config.eval.greedy, keep=False, budgets=budgets)
    rewards = score_episode(episode, reward)
    names = topology.role_names()
    metrics: dict[str, float] = {}
    last = episode.last_round()  # a role's metrics are its last round's answers
    for role, name in enumerate(names):
        summary = reply_metrics(episode.replies[last[role]], rewards[last[role]])
        for prefix in metric_prefixes(name, agent_for_role[role], scope="eval/"):
            metrics.update({f"{prefix}/{key}": value for key, value in summary.items()})
    if topology.rounds > 1:
        for turn, name in enumerate(topology.turn_names()):
            summary = reply_metrics(episode.replies[turn], rewards[turn])
            metrics.update({f"eval/{name}/{key}": value for key, value in summary.items()})
    metrics["eval/task_reward"] = rewards.mean().item()
    metrics["eval/kl"] = episode.kl().mean().item()
    solo, solo_rewards = _solo_metrics(agents, topology, agent_for_role, episode, rewards, reward, repeated,
                                       config, budgets)
    metrics.update(solo)
    chosen = system_choice(episode, config.topology.answer)
    metrics["eval/system/task_reward"] = gather_selected(rewards, chosen).mean().item()
    correct = None
    if task.checker is not None:
        correct = [task.checker(episode.queries, reply.texts) for reply in episode.replies]
        metrics.update(_pass_metrics(correct, names, last, n, config.eval.pass_k, chosen))
    if topology.edges():
        plain = {turn: solo_rewards[episode.agent_of_turn(turn)] for turn in range(topology.n_turns)}
        texts = [reply.texts for reply in episode.replies]
        diagnostics = transfer_metrics(topology, texts, rewards, correct, plain)
        metrics.update({f"eval/{key}": value for key, value in diagnostics.items()})
    return EvalResult(metrics, episode_samples(episode, rewards, names, n_samples))


def evaluation_budgets(config: RunConfig, rows: int) -> list[int] | None:
    """Each evaluation row's token budget under ``eval.lengths: all`` (every length of the
    length sampler equally often, fixed by ``eval.seed`` alone); None where the length
    sampler is off or ``eval.lengths: training`` lets the agents draw as in training."""
    sampler = config.generation.length_sampler
    if sampler is None or config.eval.lengths == "training":
        return None
    return stratified_budgets(sampler[0], sampler[1], rows, config.eval.seed)


def distinct_n(texts: list[str], n: int) -> float:
    """Distinct-n (Li et al., 2016): unique word n-grams over all word n-grams of ``texts``."""
    grams = [tuple(words[i:i + n]) for words in (t.split() for t in texts) for i in range(len(words) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def reply_metrics(reply: Reply, rewards: torch.Tensor) -> dict[str, float]:
    """Task reward, KL and the collapse indicators of one batch of answers."""
    return {
        "task_reward": rewards.mean().item(),
        "kl": sum(reply.kl) / len(reply.kl),
        "response_length": sum(reply.lengths) / len(reply.lengths),
        "hit_length_limit": sum(reply.hit_length_limit) / len(reply.hit_length_limit),
        "distinct_1": distinct_n(reply.texts, 1),
        "distinct_2": distinct_n(reply.texts, 2),
    }


def _solo_metrics(agents: AgentGroup, topology: Topology, agent_for_role: list[int], episode: Episode,
                  rewards: torch.Tensor, reward: RewardFunction, queries: list[Prompt],
                  config: RunConfig, budgets: list[int] | None) -> tuple[dict[str, float], dict[int, torch.Tensor]]:
    """Every agent on its own, answering the plain query (how a CORY agent is deployed):
    ``eval/agentN/solo/...`` and their mean ``eval/solo/...``, and each agent's rewards. An
    agent that plays a root role already answered the plain query in the first round; the
    others are asked now."""
    root_reply = {agent_for_role[role]: role for role in range(topology.n_roles) if not topology.parents[role]}
    n_agents = len(agent_for_role)
    asked = [a for a in range(n_agents) if a not in root_reply]
    request = GenerateRequest([q.query for q in queries], config.eval.seed, "eval", config.eval.greedy, keep=False,
                              budgets=budgets)
    answers = agents.map(Agent.generate, {a: (request,) for a in asked}) if asked else {}
    metrics: dict[str, float] = {}
    solo_rewards: dict[int, torch.Tensor] = {}
    for agent in range(n_agents):
        if agent in root_reply:
            reply, scores = episode.replies[root_reply[agent]], rewards[root_reply[agent]]
        else:
            reply = answers[agent]
            scores = torch.tensor(score_safely(reward, queries, reply.texts), dtype=torch.float32)
        solo_rewards[agent] = scores
        metrics.update({f"eval/agent{agent}/solo/{k}": v for k, v in reply_metrics(reply, scores).items()})
    for key in ("task_reward", "kl", "response_length", "hit_length_limit", "distinct_1", "distinct_2"):
        metrics[f"eval/solo/{key}"] = sum(metrics[f"eval/agent{a}/solo/{key}"] for a in range(n_agents)) / n_agents
    return metrics, solo_rewards


def _pass_metrics(correct_per_turn: list[list[bool]], names: list[str], last: list[int], n: int, ks: list[int],
                  chosen: torch.Tensor) -> dict[str, float]:
    """Pass@k of each role's last-round answers, their mean, and the system's."""
    correct = torch.tensor(correct_per_turn, dtype=torch.long)  # [turn, query * n]
    metrics: dict[str, float] = {}
    per_role = correct[last].view(len(names), -1, n).sum(-1)  # [role, query]
    system = gather_selected(correct, chosen).view(-1, n).sum(-1)
    for k in ks:
        for role, name in enumerate(names):
            metrics[f"eval/{name}/pass@{k}"] = sum(pass_at_k(n, int(c), k) for c in per_role[role]) / per_role.shape[1]
        metrics[f"eval/pass@{k}"] = sum(metrics[f"eval/{name}/pass@{k}"] for name in names) / len(names)
        metrics[f"eval/system/pass@{k}"] = sum(pass_at_k(n, int(c), k) for c in system) / len(system)
    return metrics
