"""One iteration's episode, end to end: every turn answered, the answers a credit rule or the
diagnostics compare with, every answer scored, and what each agent trains on.

    queries -> turns, round by round, level by level  (agents answer; training keeps rollouts)
            -> counterfactuals: a turn re-answered showing fewer inputs, where asked
            -> one scoring call for every answer
            -> training rewards per turn (``collective``), read per agent in the order it
               keeps its turns

``play_episode`` returns a finished, immutable ``Episode``; ``multi.summary`` turns it into
metrics, the same way in training and in evaluation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

import torch

from cory.agents.agent import Agent
from cory.agents.group import AgentGroup
from cory.config.schema import CollectiveConfig
from cory.multi.collective import needs_counterfactuals, training_rewards
from cory.multi.layout import TurnLayout
from cory.rewards.base import RewardFunction, score_safely
from cory.tasks.base import Task
from cory.timing import StageTimer
from cory.types import GenerateRequest, Prompt, Reply


@dataclass(frozen=True)
class Draw:
    """How an episode's answers are drawn: at iteration ``step`` (in evaluation, its seed), in
    ``phase``, greedy or sampled, and, where given, with one token budget per query."""

    step: int
    phase: str = "train"
    greedy: bool = False
    budgets: list[int] | None = None

    def request(self, prompts: list[str], keep: bool, round_: int = 0, stream: str = "") -> GenerateRequest:
        """Ask for ``prompts``: one or more blocks of one prompt per query, each block held to
        the queries' budgets."""
        budgets = self.budgets * (len(prompts) // len(self.budgets)) if self.budgets else None
        return GenerateRequest(prompts, self.step, self.phase, self.greedy, keep, budgets, round=round_,
                               stream=stream)


class Counterfactual(NamedTuple):
    """Turn ``turn``'s agent answering ``turn``'s prompt shown only the answers of ``shown``
    (a subset of its inputs); ``shown == ()`` is the plain query."""

    turn: int
    shown: tuple[int, ...]


class Ask(Enum):
    """Which counterfactuals an episode asks for."""

    NONE = "none"
    EACH_INPUT_WITHHELD = "each input withheld"  # difference credit: per edge, the turn without it
    PLAIN = "plain"  # every agent's answer to the plain query (how a CORY agent is deployed)


@dataclass(frozen=True)
class Scored:
    """A batch of answers, one per query, and their task rewards."""

    reply: Reply
    rewards: torch.Tensor  # [query]


@dataclass(frozen=True)
class Episode:
    """Every turn's prompts, replies and task rewards for one batch of queries; the
    counterfactual answers that were asked for; and, in training, what each turn trains on."""

    queries: list[Prompt]
    layout: TurnLayout
    prompts: list[list[str]]  # [turn][query]
    replies: list[Reply]  # [turn]
    task_rewards: torch.Tensor  # [turn, query]
    counterfactuals: dict[Counterfactual, Scored]
    asked: Ask = Ask.NONE  # which counterfactuals were asked for
    credited: torch.Tensor | None = None  # [turn, query] training rewards; None outside training

    @property
    def n_turns(self) -> int:
        return len(self.replies)

    def scored(self, turn: int) -> Scored:
        return Scored(self.replies[turn], self.task_rewards[turn])

    def plain(self, turn: int) -> Scored | None:
        """Turn ``turn``'s agent answering the plain query: the turn itself when it is shown
        nothing, else the counterfactual shown nothing, if it was asked for."""
        if not self.layout.inputs(turn):
            return self.scored(turn)
        return self.counterfactuals.get(Counterfactual(turn, ()))

    def plain_of_agent(self, agent: int) -> Scored | None:
        """``agent`` answering the plain query (its first turn's plain answer)."""
        return self.plain(self.layout.of_agent(agent)[0].index)

    def rewards_of_agent(self, agent: int) -> list[float]:
        """The training rewards of ``agent``'s turns, in the order it keeps them (round by round)."""
        if self.credited is None:
            raise ValueError("an episode played outside training has no training rewards")
        return self.credited[[turn.index for turn in self.layout.of_agent(agent)]].flatten().tolist()

    def values(self) -> torch.Tensor:
        return torch.tensor([reply.values for reply in self.replies])

    def kl(self) -> torch.Tensor:
        return torch.tensor([reply.kl for reply in self.replies])


def play_episode(agents: AgentGroup, layout: TurnLayout, task: Task, reward: RewardFunction,
                 queries: list[Prompt], draw: Draw, credit: CollectiveConfig | None = None, ask: Ask = Ask.NONE,
                 timer: StageTimer | None = None) -> Episode:
    """Play one episode. With ``credit`` (training) the agents keep their turns' rollouts for
    their next update and the episode carries the training rewards; a credit rule that needs
    counterfactuals gets them. ``ask`` adds counterfactuals the diagnostics want."""
    timer = timer or StageTimer()
    training = credit is not None
    if credit is not None and needs_counterfactuals(credit.credit):
        ask = Ask.EACH_INPUT_WITHHELD
    with timer.stage("rollout"):
        prompts, replies = _answer_turns(agents, layout, task, queries, draw, keep=training)
    with timer.stage("counterfactual") if ask is not Ask.NONE else contextlib.nullcontext():
        asked = _answer_counterfactuals(agents, layout, task, queries, draw, replies, ask)
    with timer.stage("score"):
        answers = replies + list(asked.values())
        scores = torch.tensor(score_safely(reward, [q for _ in answers for q in queries],
                                           [text for reply in answers for text in reply.texts]),
                              dtype=torch.float32).view(len(answers), -1)
        task_rewards = scores[:len(replies)]
        counterfactuals = _scored_counterfactuals(layout, replies, task_rewards, asked, scores[len(replies):], ask)
        credited = None
        if credit is not None:
            edges = {(source, turn): counterfactuals[Counterfactual(turn, _without(layout, turn, source))].rewards
                     for source, turn in layout.topology.edges()} if needs_counterfactuals(credit.credit) else {}
            credited = training_rewards(task_rewards, edges, layout.topology.n_roles, credit.credit,
                                        credit.lambda_, credit.normalize, credit.turn_discount)
    return Episode(queries, layout, prompts, replies, task_rewards, counterfactuals, ask, credited)


def _turn_prompts(task: Task, layout: TurnLayout, queries: list[Prompt], turn: int,
                  replies: Mapping[int, Reply] | list[Reply], shown: tuple[int, ...]) -> list[str]:
    """``turn``'s prompt for each query, showing the answers of ``shown``."""
    revising = layout.turn(turn).round > 0
    return [task.prompt_for(q, [replies[s].texts[i] for s in shown], revising) for i, q in enumerate(queries)]


def _answer_turns(agents: AgentGroup, layout: TurnLayout, task: Task, queries: list[Prompt], draw: Draw,
                  keep: bool) -> tuple[list[list[str]], list[Reply]]:
    """Every turn's prompts and replies: round by round and level by level, the roles of one
    level asked together. Round r > 0 draws from its own random stream."""
    topology = layout.topology
    prompts: dict[int, list[str]] = {}
    replies: dict[int, Reply] = {}
    for round_ in range(topology.rounds):
        for level in topology.levels():
            turns = [layout.turn(topology.turn(round_, role)) for role in level]
            for turn in turns:
                prompts[turn.index] = _turn_prompts(task, layout, queries, turn.index, replies,
                                                    layout.inputs(turn.index))
            answered = agents.map(Agent.generate, {turn.agent: (draw.request(
                prompts[turn.index], keep, round_, stream=f"round{round_}" if round_ else ""),) for turn in turns})
            for turn in turns:
                replies[turn.index] = answered[turn.agent]
    return [prompts[t] for t in range(layout.n_turns)], [replies[t] for t in range(layout.n_turns)]


def _without(layout: TurnLayout, turn: int, source: int) -> tuple[int, ...]:
    return tuple(shown for shown in layout.inputs(turn) if shown != source)


def _wanted(layout: TurnLayout, ask: Ask) -> list[Counterfactual]:
    """The counterfactuals to generate (one per agent for the plain query, asked at its first
    turn that is shown answers)."""
    if ask is Ask.EACH_INPUT_WITHHELD:
        return [Counterfactual(turn, _without(layout, turn, source)) for source, turn in layout.topology.edges()]
    if ask is Ask.PLAIN:
        first = {turn.agent: turn.index for turn in reversed(layout.turns)}  # each agent's first turn
        return [Counterfactual(turn, ()) for turn in first.values() if layout.inputs(turn)]
    return []


def _answer_counterfactuals(agents: AgentGroup, layout: TurnLayout, task: Task, queries: list[Prompt], draw: Draw,
                            replies: list[Reply], ask: Ask) -> dict[Counterfactual, Reply]:
    """The wanted counterfactuals, one batched call per agent, nothing kept for an update.
    Training's draw from the stream ``counterfactual``; evaluation's plain answers from the
    evaluation's own stream, as the agent answering the plain query there would."""
    wanted = _wanted(layout, ask)
    per_agent: dict[int, list[Counterfactual]] = {}
    for counterfactual in wanted:
        per_agent.setdefault(layout.turn(counterfactual.turn).agent, []).append(counterfactual)
    stream = "counterfactual" if draw.phase == "train" else ""
    requests = {agent: (draw.request([p for c in asked for p in _turn_prompts(task, layout, queries, c.turn, replies,
                                                                                  c.shown)],
                                     keep=False, stream=stream),)
                for agent, asked in per_agent.items()}
    answered = agents.map(Agent.generate, requests) if requests else {}
    n = len(queries)
    return {c: _rows(answered[agent], slice(k * n, (k + 1) * n))
            for agent, asked in per_agent.items() for k, c in enumerate(asked)}


def _scored_counterfactuals(layout: TurnLayout, replies: list[Reply], task_rewards: torch.Tensor,
                            asked: dict[Counterfactual, Reply], scores: torch.Tensor,
                            ask: Ask) -> dict[Counterfactual, Scored]:
    """The asked counterfactuals with their scores. An agent has one plain answer: its first
    turn's own when that is shown nothing, else the one asked for; under ``Ask.PLAIN`` it is
    the plain answer of each of the agent's turns that is shown answers."""
    scored = {c: Scored(reply, scores[k]) for k, (c, reply) in enumerate(asked.items())}
    if ask is not Ask.PLAIN:
        return scored
    plain: dict[int, Scored] = {}
    for turn in layout.turns:  # round by round: an agent's first turn comes first
        if turn.agent not in plain:
            plain[turn.agent] = scored.get(Counterfactual(turn.index, ()),
                                           Scored(replies[turn.index], task_rewards[turn.index]))
    return {Counterfactual(turn.index, ()): plain[turn.agent] for turn in layout.turns if layout.inputs(turn.index)}


def _rows(reply: Reply, rows: slice) -> Reply:
    """Some rows of a batched reply (its timings stay with the batch)."""
    return Reply(reply.texts[rows], reply.values[rows], reply.kl[rows], reply.lengths[rows],
                 reply.hit_length_limit[rows], 0, reply.prompt_length, response_ids=reply.response_ids[rows])
