"""Held-out evaluation: one episode on the test queries with a fixed sampling seed, every
agent also answering the plain query, summarised as training's rows are
(``multi.summary``, scope ``eval/``): task reward and KL to the reference (the paper's
two axes), the collapse indicators, Pass@k where the task has a correct answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cory.agents.group import AgentGroup
from cory.agents.sampling import stratified_budgets
from cory.config.schema import RunConfig
from cory.multi.episode import Ask, Draw, play_episode
from cory.multi.layout import TurnLayout
from cory.multi.summary import EVALUATION, sample_rows, summarise
from cory.rewards.base import RewardFunction
from cory.tasks.base import Task


@dataclass
class EvalResult:
    metrics: dict[str, float]
    samples: list[dict[str, Any]]


def evaluate(agents: AgentGroup, layout: TurnLayout, task: Task, reward: RewardFunction, config: RunConfig,
             n_samples: int = 8) -> EvalResult:
    """Play ``layout`` on the held-out queries (each ``eval.samples_per_prompt`` times) and summarise."""
    n = config.eval.samples_per_prompt
    repeated = [q for q in task.test[: config.eval.n_prompts] for _ in range(n)]
    draw = Draw(config.eval.seed, "eval", config.eval.greedy, evaluation_budgets(config, len(repeated)))
    episode = play_episode(agents, layout, task, reward, repeated, draw, ask=Ask.PLAIN)
    metrics = summarise(episode, EVALUATION, config.topology.answer, task.checker,
                        pass_k=tuple(config.eval.pass_k), samples_per_prompt=n)
    return EvalResult(metrics, sample_rows(episode, n_samples))


def evaluation_budgets(config: RunConfig, rows: int) -> list[int] | None:
    """Each evaluation row's token budget under ``eval.lengths: all`` (every length of the
    length sampler equally often, fixed by ``eval.seed`` alone); None where the length
    sampler is off or ``eval.lengths: training`` lets the agents draw as in training."""
    sampler = config.generation.length_sampler
    if sampler is None or config.eval.lengths == "training":
        return None
    return stratified_budgets(sampler[0], sampler[1], rows, config.eval.seed)
