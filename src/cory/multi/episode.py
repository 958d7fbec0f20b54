"""One pass of the (unrolled) topology over a batch of queries: who answers what, in which
order, and the counterfactual answers difference credit compares with."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch

from cory.agents.agent import Agent
from cory.agents.group import AgentGroup
from cory.answers import extract_answer
from cory.multi.moe import select_by_value
from cory.multi.topology import Topology
from cory.rewards.base import RewardFunction, score_safely
from cory.tasks.base import Task
from cory.types import GenerateRequest, Prompt, Reply


@dataclass
class Episode:
    """Every turn's prompts and replies for one batch of queries, and their task rewards.
    A turn is one role answering in one round (``Topology.turn``); with one round, turns are
    roles. ``counterfactuals[(source, turn)]`` is ``turn``'s agent answering ``turn``'s
    prompt without ``source``'s answer (difference credit), scored into
    ``counterfactual_rewards``."""

    queries: list[Prompt]
    agent_for_role: list[int]
    topology: Topology
    prompts: list[list[str]]  # [turn][query]
    replies: list[Reply]  # [turn]
    task_rewards: torch.Tensor | None = None  # [turn, query]
    counterfactuals: dict[tuple[int, int], Reply] = field(default_factory=dict)
    counterfactual_rewards: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)

    @property
    def n_roles(self) -> int:
        return self.topology.n_roles

    @property
    def n_turns(self) -> int:
        return len(self.replies)

    def last_round(self) -> list[int]:
        """The turns of the last round, in role order: the answers a system gives."""
        first = self.n_turns - self.n_roles
        return list(range(first, self.n_turns))

    def agent_of_turn(self, turn: int) -> int:
        return self.agent_for_role[self.topology.round_and_role(turn)[1]]

    def values(self) -> torch.Tensor:
        return torch.tensor([reply.values for reply in self.replies])

    def kl(self) -> torch.Tensor:
        return torch.tensor([reply.kl for reply in self.replies])


def _turn_prompts(task: Task, topology: Topology, queries: list[Prompt], turn: int,
                  replies: dict[int, Reply], without: int | None = None) -> list[str]:
    """``turn``'s prompt for each query, showing its inputs' answers (all but ``without``)."""
    shown = [source for source in topology.inputs(turn) if source != without]
    revising = topology.round_and_role(turn)[0] > 0
    return [task.prompt_for(q, [replies[s].texts[i] for s in shown], revising) for i, q in enumerate(queries)]


def run_episode(agents: AgentGroup, topology: Topology, agent_for_role: list[int], task: Task,
                queries: list[Prompt], step: int, phase: str = "train", greedy: bool = False,
                keep: bool = True, budgets: list[int] | None = None) -> Episode:
    """Let every role answer, round by round and level by level; roles of one level are
    asked together. ``budgets`` (one per query) holds every answer to a query to the same
    token budget. Round r > 0 draws from its own random stream."""
    prompts: dict[int, list[str]] = {}
    replies: dict[int, Reply] = {}
    for round_ in range(topology.rounds):
        for level in topology.levels():
            requests: dict[int, tuple[GenerateRequest]] = {}
            for role in level:
                turn = topology.turn(round_, role)
                prompts[turn] = _turn_prompts(task, topology, queries, turn, replies)
                requests[agent_for_role[role]] = (GenerateRequest(
                    prompts[turn], step, phase, greedy, keep, budgets, turn=round_,
                    stream=f"round{round_}" if round_ else ""),)
            answered = agents.map(Agent.generate, requests)
            for role in level:
                replies[topology.turn(round_, role)] = answered[agent_for_role[role]]
    turns = range(topology.n_turns)
    return Episode(queries, agent_for_role, topology, [prompts[t] for t in turns], [replies[t] for t in turns])


def answer_counterfactuals(agents: AgentGroup, episode: Episode, task: Task, step: int) -> None:
    """For every edge (source -> turn), ``turn``'s agent answers ``turn``'s prompt without
    ``source``'s answer (one batched call per agent, nothing kept for the update); the
    replies go into ``episode.counterfactuals``."""
    topology, queries = episode.topology, episode.queries
    replies = dict(enumerate(episode.replies))
    asked: dict[int, list[tuple[int, int]]] = {}
    prompts: dict[int, list[str]] = {}
    for source, turn in topology.edges():
        agent = episode.agent_of_turn(turn)
        asked.setdefault(agent, []).append((source, turn))
        prompts.setdefault(agent, []).extend(_turn_prompts(task, topology, queries, turn, replies, without=source))
    requests = {agent: (GenerateRequest(prompts[agent], step, keep=False, stream="counterfactual"),)
                for agent in asked}
    answered = agents.map(Agent.generate, requests)
    n = len(queries)
    for agent, edges in asked.items():
        reply = answered[agent]
        for k, edge in enumerate(edges):
            episode.counterfactuals[edge] = _rows(reply, slice(k * n, (k + 1) * n))


def _rows(reply: Reply, rows: slice) -> Reply:
    """Some rows of a batched reply (its timings stay with the batch)."""
    return Reply(reply.texts[rows], reply.values[rows], reply.kl[rows], reply.lengths[rows],
                 reply.hit_length_limit[rows], 0, reply.prompt_length)


def score_episode(episode: Episode, reward: RewardFunction) -> torch.Tensor:
    """Task reward of every turn's answer (and every counterfactual's), on (query, answer),
    in one batched call."""
    replies = episode.replies + list(episode.counterfactuals.values())
    flat_prompts = [q for _ in replies for q in episode.queries]
    flat_responses = [text for reply in replies for text in reply.texts]
    scores = torch.tensor(score_safely(reward, flat_prompts, flat_responses), dtype=torch.float32)
    scores = scores.view(len(replies), -1)
    episode.task_rewards = scores[:episode.n_turns]
    episode.counterfactual_rewards = dict(zip(episode.counterfactuals, scores[episode.n_turns:]))
    return episode.task_rewards


def system_choice(episode: Episode, answer: str) -> torch.Tensor:
    """Per query, the turn whose answer is the system's, from the last round: the last
    role's, the highest value, or the majority final answer (``vote``)."""
    last = episode.last_round()
    if answer == "value":
        return last[0] + select_by_value(episode.values()[last])
    if answer == "vote":
        return torch.tensor([majority_turn([episode.replies[t].texts[i] for t in last], last)
                             for i in range(len(episode.queries))])
    return torch.full((len(episode.queries),), last[-1], dtype=torch.long)


def majority_turn(texts: list[str], turns: list[int]) -> int:
    """The turn whose final answer is the most common among ``texts`` (one per turn). Ties go
    to the answer of the later turn; answers without a number do not vote; with no vote at
    all, the last turn."""
    answers = [extract_answer(text) for text in texts]
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return turns[-1]
    top = max(counts.values())
    for turn, found in reversed(list(zip(turns, answers))):
        if found is not None and counts[found] == top:
            return turn
    raise AssertionError("unreachable: a counted answer has a turn")


def episode_samples(episode: Episode, rewards: torch.Tensor, names: list[str], n: int) -> list[dict[str, Any]]:
    """The first ``n`` queries' answers, turn by turn, as sample rows (the query's index in the
    batch, ``episode``, which ties an answer to its revisions; role, round, the agent that
    spoke, query, prompt, response, task reward)."""
    topology = episode.topology
    return [{"episode": i, "role": names[role], **({"round": round_} if topology.rounds > 1 else {}),
             "agent": episode.agent_for_role[role], "query": episode.queries[i].query,
             "prompt": episode.prompts[turn][i], "response": episode.replies[turn].texts[i],
             "task_reward": rewards[turn, i].item()}
            for i in range(min(n, len(episode.queries)))
            for turn in range(episode.n_turns) for round_, role in [topology.round_and_role(turn)]]


def metric_prefixes(role_name: str, agent: int, scope: str = "") -> tuple[str, str]:
    """The two names a role's metrics are logged under: the role's and its agent's
    (``pioneer/...`` and ``agent0/...``; with ``scope`` "eval/": ``eval/pioneer/...``)."""
    return f"{scope}{role_name}", f"{scope}agent{agent}"
