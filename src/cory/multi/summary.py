"""An episode's metrics: the same blocks in training and in evaluation.

    overall   task reward and KL over every answer (training: also its spread and the mean
              training reward)
    roles     each role's last-round answers, under the role's name and its agent's
              (``pioneer/...`` and ``agent0/...``): the answers a system gives
    turns     with several rounds, every turn's answers and each round's mean reward
    system    the system's answer per query (``topology.answer``), and Pass@k where asked
    transfer  does a turn use the answers it is shown (``multi.transfer``)
    solo      each agent answering the plain query, where the episode asked for it

Where training's and evaluation's rows differ is written once, in ``SummaryKind``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from math import comb
from typing import Any

import numpy as np
import torch

from cory.multi.episode import Ask, Episode
from cory.multi.system_answer import gather_selected, system_choice
from cory.multi.transfer import transfer_metrics
from cory.types import Prompt, Reply, Stats

AnswerMetrics = Callable[[Reply, torch.Tensor], dict[str, float]]
Checker = Callable[[list[Prompt], list[str]], list[bool]]
# Update statistics that also get a headline key: the mean over the agents that report them.
HEADLINE_STATS = ("kl_coef", "entropy", "clip_fraction", "approx_kl", "value_loss", "policy_loss",
                  "explained_variance", "response_length", "grad_norm")


def training_answer_metrics(reply: Reply, rewards: torch.Tensor) -> dict[str, float]:
    """A batch of training answers: reward, its spread, and what the prompts and limits did."""
    return {
        "task_reward": rewards.mean().item(),
        "task_reward_std": rewards.std(unbiased=False).item(),
        "prompts_truncated": reply.prompts_truncated,
        "prompt_length": reply.prompt_length,
        "hit_length_limit": float(np.mean(reply.hit_length_limit)),
    }


def distinct_n(texts: list[str], n: int) -> float:
    """Distinct-n (Li et al., 2016): unique word n-grams over all word n-grams of ``texts``."""
    grams = [tuple(words[i:i + n]) for words in (t.split() for t in texts) for i in range(len(words) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def evaluation_answer_metrics(reply: Reply, rewards: torch.Tensor) -> dict[str, float]:
    """A batch of held-out answers: task reward, KL and the collapse indicators."""
    return {
        "task_reward": rewards.mean().item(),
        "kl": sum(reply.kl) / len(reply.kl),
        "response_length": sum(reply.lengths) / len(reply.lengths),
        "hit_length_limit": sum(reply.hit_length_limit) / len(reply.hit_length_limit),
        "distinct_1": distinct_n(reply.texts, 1),
        "distinct_2": distinct_n(reply.texts, 2),
    }


@dataclass(frozen=True)
class SummaryKind:
    """How a training row and an evaluation row differ: the key prefix, what is reported per
    batch of answers, whether a role's row names its agent, and whether a one-turn episode
    reports a system answer (evaluation does, so every run has ``eval/system/...``)."""

    prefix: str
    answer_metrics: AnswerMetrics
    names_agents: bool
    system_of_one_turn: bool


TRAINING = SummaryKind("", training_answer_metrics, names_agents=True, system_of_one_turn=False)
EVALUATION = SummaryKind("eval/", evaluation_answer_metrics, names_agents=False, system_of_one_turn=True)


def metric_prefixes(role_name: str, agent: int) -> tuple[str, str]:
    """The two names a role's metrics are logged under: the role's and its agent's."""
    return role_name, f"agent{agent}"


def summarise(episode: Episode, kind: SummaryKind, answer_rule: str, checker: Checker | None = None,
              per_agent: Mapping[int, Stats] | None = None, pass_k: tuple[int, ...] = (),
              samples_per_prompt: int = 1) -> dict[str, Any]:
    """Every metric of ``episode``. ``per_agent`` adds an agent's update statistics to its
    role's block; ``pass_k`` (with the checker, on queries repeated ``samples_per_prompt``
    times) adds Pass@k of each role and of the system."""
    correct = ([checker(episode.queries, reply.texts) for reply in episode.replies]
               if checker is not None and (pass_k or episode.layout.topology.edges()) else None)
    metrics = {**_overall(episode), **_roles(episode, kind, per_agent or {}), **_turns(episode, kind)}
    if episode.n_turns > 1 or kind.system_of_one_turn:
        chosen = system_choice(episode, answer_rule)
        metrics["system/task_reward"] = gather_selected(episode.task_rewards, chosen).mean().item()
        if correct is not None and pass_k:
            metrics.update(_pass_metrics(episode, correct, chosen, samples_per_prompt, pass_k))
    if episode.layout.topology.edges():
        plain = {turn: found.rewards for turn in range(episode.n_turns) if (found := episode.plain(turn)) is not None}
        metrics.update(transfer_metrics(episode.layout.topology, [r.texts for r in episode.replies],
                                        episode.task_rewards, correct, plain))
    if episode.asked is Ask.PLAIN:
        metrics.update(_solo(episode, kind))
    return {f"{kind.prefix}{key}": value for key, value in metrics.items()}


def _overall(episode: Episode) -> dict[str, float]:
    rewards = episode.task_rewards
    metrics = {"task_reward": rewards.mean().item(), "kl": episode.kl().mean().item()}
    if episode.credited is not None:
        metrics["task_reward_std"] = rewards.std(unbiased=False).item()
        metrics["collective_reward"] = episode.credited.mean().item()
    return metrics


def _roles(episode: Episode, kind: SummaryKind, per_agent: Mapping[int, Stats]) -> dict[str, Any]:
    """Each role's last-round answers (and, in training, the mean training reward over all of
    its agent's turns, and its agent's update statistics), under the role's and agent's names."""
    layout, names = episode.layout, episode.layout.topology.role_names()
    metrics: dict[str, Any] = {}
    for turn in layout.last_round():
        if kind.names_agents and len(names) > 1:
            metrics[f"{names[turn.role]}/agent"] = turn.agent
        block: dict[str, Any] = dict(kind.answer_metrics(episode.replies[turn.index], episode.task_rewards[turn.index]))
        if episode.credited is not None:
            own = [t.index for t in layout.of_agent(turn.agent)]
            block["collective_reward"] = episode.credited[own].mean().item()
        block.update(per_agent.get(turn.agent, {}))
        for prefix in metric_prefixes(names[turn.role], turn.agent):
            metrics.update({f"{prefix}/{key}": value for key, value in block.items()})
    return metrics


def _turns(episode: Episode, kind: SummaryKind) -> dict[str, float]:
    """With several rounds: each round's mean task reward and every turn's answer metrics."""
    topology = episode.layout.topology
    if topology.rounds == 1:
        return {}
    per_round = episode.task_rewards.view(topology.rounds, topology.n_roles, -1)
    metrics = {f"round{r}/task_reward": per_round[r].mean().item() for r in range(topology.rounds)}
    for turn, name in enumerate(topology.turn_names()):
        answers = kind.answer_metrics(episode.replies[turn], episode.task_rewards[turn])
        metrics.update({f"{name}/{key}": value for key, value in answers.items()})
    return metrics


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased Pass@k of Chen et al. (2021): ``1 - C(n - c, k) / C(n, k)``."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def _pass_metrics(episode: Episode, correct_per_turn: list[list[bool]], chosen: torch.Tensor, n: int,
                  ks: tuple[int, ...]) -> dict[str, float]:
    """Pass@k of each role's last-round answers, their mean, and the system's."""
    names = episode.layout.topology.role_names()
    last = [turn.index for turn in episode.layout.last_round()]
    correct = torch.tensor(correct_per_turn, dtype=torch.long)  # [turn, query * n]
    per_role = correct[last].view(len(names), -1, n).sum(-1)  # [role, query]
    system = gather_selected(correct, chosen).view(-1, n).sum(-1)
    metrics: dict[str, float] = {}
    for k in ks:
        for role, name in enumerate(names):
            metrics[f"{name}/pass@{k}"] = sum(pass_at_k(n, int(c), k) for c in per_role[role]) / per_role.shape[1]
        metrics[f"pass@{k}"] = sum(metrics[f"{name}/pass@{k}"] for name in names) / len(names)
        metrics[f"system/pass@{k}"] = sum(pass_at_k(n, int(c), k) for c in system) / len(system)
    return metrics


def _solo(episode: Episode, kind: SummaryKind) -> dict[str, float]:
    """Every agent answering the plain query (how a CORY agent is deployed): ``agentN/solo/...``
    and their mean, ``solo/...``."""
    agents = sorted(set(episode.layout.agents()))
    metrics: dict[str, float] = {}
    keys: list[str] = []
    for agent in agents:
        plain = episode.plain_of_agent(agent)
        if plain is None:
            raise ValueError(f"agent{agent} gave no plain answer: play the episode with Ask.PLAIN")
        block = kind.answer_metrics(plain.reply, plain.rewards)
        keys = list(block)
        metrics.update({f"agent{agent}/solo/{key}": value for key, value in block.items()})
    for key in keys:
        metrics[f"solo/{key}"] = sum(metrics[f"agent{a}/solo/{key}"] for a in agents) / len(agents)
    return metrics


def summarise_updates(stats: Mapping[int, Stats]) -> dict[str, Any]:
    """The agents' update statistics as headline keys (the mean over agents), the vLLM
    sampler's gap to the policy (the worst agent's), and a fault where an update failed."""
    row: dict[str, Any] = {}
    for key in HEADLINE_STATS:
        values = [value for s in stats.values() if isinstance(value := s.get(key), (int, float))]
        if values:
            row[key] = float(np.mean(values))
    for key in ("sampler_logprob_gap", "mismatch_kl"):
        found = [s[key] for s in stats.values() if isinstance(s.get(key), float)]
        if found:
            row[key] = max(found)
    faults = [f"agent{a}: {s['fault_reason']}" for a, s in stats.items() if s.get("fault")]
    if faults:
        row.update({"fault": 1.0, "fault_reason": "; ".join(faults)})
    return row


def sample_rows(episode: Episode, n: int) -> list[dict[str, Any]]:
    """The first ``n`` queries' answers, turn by turn, as sample rows (the query's index in the
    batch, ``episode``, which ties an answer to its revisions; role, round, the agent that
    spoke, query, prompt, response, task reward)."""
    layout, names = episode.layout, episode.layout.topology.role_names()
    several_rounds = layout.topology.rounds > 1
    return [{"episode": i, "role": names[turn.role], **({"round": turn.round} if several_rounds else {}),
             "agent": turn.agent, "query": episode.queries[i].query,
             "prompt": episode.prompts[turn.index][i], "response": episode.replies[turn.index].texts[i],
             "task_reward": episode.task_rewards[turn.index, i].item()}
            for i in range(min(n, len(episode.queries))) for turn in layout.turns]
