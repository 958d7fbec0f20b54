"""The precondition probe of CORY's mechanism, without training: does a model use an answer
it is shown?

For each held-out query the model answers three times over (``eval`` sampling settings, each
query repeated ``eval.samples_per_prompt`` times, 16 rows per generation call):

- ``nothing``: the plain query, as a lone agent or CORY's pioneer sees it;
- shown a good answer, in the task's observer template (what CORY's observer sees): the gold
  worked solution where the task has one (arithmetic, GSM8K: ``right``), else the
  highest-reward of the model's own answers to the plain query (``high``);
- shown a bad answer: another query's solution whose final answer differs (``wrong``), else
  the lowest-reward of its own answers (``low``).

Each shown condition is compared with ``nothing`` query by query (the mean over the query's
samples): the paired mean difference and its t-interval. If a model does no better shown a
right answer than shown nothing, an observer has nothing to gain from a pioneer at that size.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from cory.agents.agent import Agent
from cory.build import build_run
from cory.config import RunConfig
from cory.evaluation import evaluation_budgets
from cory.rewards.base import RewardFunction, score_safely
from cory.stats import t_interval
from cory.tasks.base import Task
from cory.types import GenerateRequest, Prompt

# Candidate answers per query from which ``high`` and ``low`` are drawn (tasks without solutions).
CANDIDATES = 4
# Rows per generation call: bounds memory (Gemma-3's 262k-token vocabulary makes logits large).
ROWS_PER_CALL = 16


@dataclass
class ProbeRow:
    """One condition: mean task reward and accuracy (None without a checker) over its answers,
    and the paired difference in reward from ``nothing`` over queries (mean, t-interval)."""

    condition: str
    shown: str
    reward: float
    accuracy: float | None
    difference: float | None = None
    low: float | None = None
    high: float | None = None
    queries: int = 0


def shown_answers(queries: list[Prompt], own: list[list[str]], own_rewards: list[list[float]]
                  ) -> dict[str, tuple[str, list[str]]]:
    """Per condition: what it shows, and the answer shown with each query. ``own`` holds the
    model's answers to each plain query and ``own_rewards`` their rewards."""
    if all(q.solution for q in queries) and len({q.answer for q in queries}) > 1:
        wrong = []
        for i, query in enumerate(queries):
            other = next(queries[(i + k) % len(queries)] for k in range(1, len(queries))
                         if queries[(i + k) % len(queries)].answer != query.answer)
            wrong.append(str(other.solution))
        return {"right": ("the gold solution", [str(q.solution) for q in queries]),
                "wrong": ("another problem's solution (a different answer)", wrong)}
    best = [texts[max(range(len(texts)), key=scores.__getitem__)] for texts, scores in zip(own, own_rewards)]
    worst = [texts[min(range(len(texts)), key=scores.__getitem__)] for texts, scores in zip(own, own_rewards)]
    return {"high": (f"its highest-reward answer of {len(own[0])} to the plain query", best),
            "low": (f"its lowest-reward answer of {len(own[0])} to the plain query", worst)}


def run_probe(config: RunConfig, answer: Callable[[list[str]], list[str]], task: Task,
              reward: RewardFunction) -> list[ProbeRow]:
    """The probe's rows for ``task``; ``answer`` samples the model's responses to prompts."""
    queries = task.test[: config.eval.n_prompts]
    samples = config.eval.samples_per_prompt
    own_count = samples if queries and queries[0].solution else max(samples, CANDIDATES)

    def sample(prompts: list[list[str]], count: int) -> tuple[list[list[str]], list[list[float]], float | None]:
        """Answers to each query's ``count`` prompts, their rewards, and the accuracy over all."""
        flat_queries = [q for q in queries for _ in range(count)]
        texts = answer([p for per_query in prompts for p in per_query])
        scores = score_safely(reward, flat_queries, texts)
        right = task.checker(flat_queries, texts) if task.checker is not None else None
        return ([texts[i * count:(i + 1) * count] for i in range(len(queries))],
                [scores[i * count:(i + 1) * count] for i in range(len(queries))],
                None if right is None else sum(right) / len(right))

    own, own_rewards, own_accuracy = sample([[q.query] * own_count for q in queries], own_count)
    nothing = [sum(r) / len(r) for r in own_rewards]
    rows = [ProbeRow("nothing", "the plain query", sum(nothing) / len(nothing), own_accuracy, queries=len(queries))]
    for condition, (description, shown) in shown_answers(queries, own, own_rewards).items():
        _, rewards, accuracy = sample([[task.prompt_for(q, [text])] * samples
                                       for q, text in zip(queries, shown)], samples)
        means = [sum(r) / len(r) for r in rewards]
        difference = t_interval([m - n for m, n in zip(means, nothing)])
        rows.append(ProbeRow(condition, description, sum(means) / len(means), accuracy,
                             difference.mean, difference.low, difference.high, len(queries)))
    return rows


def probe(config: RunConfig) -> list[ProbeRow]:
    """Build the model, task and reward of ``config`` (its first agent) and run the probe."""
    if config.threads:
        torch.set_num_threads(config.threads)
    parts = build_run(config, local=True)

    def answer(prompts: list[str]) -> list[str]:
        texts = []
        for start in range(0, len(prompts), ROWS_PER_CALL):
            chunk = prompts[start:start + ROWS_PER_CALL]
            request = GenerateRequest(chunk, step=config.eval.seed + start, phase="eval", greedy=config.eval.greedy,
                                      keep=False, budgets=evaluation_budgets(config, len(chunk)))
            texts += parts.agents.map(Agent.generate, {0: (request,)})[0].texts
        return texts

    try:
        return run_probe(config, answer, parts.task, parts.reward)
    finally:
        parts.agents.close()


def probe_table(rows: list[ProbeRow], title: str) -> str:
    """The rows as a Markdown table."""
    lines = [f"**{title}**", "", "| shown | reward | accuracy | reward − nothing [95 % t-interval] |",
             "|---|---|---|---|"]
    for row in rows:
        accuracy = "" if row.accuracy is None else f"{row.accuracy:.3f}"
        difference = ("" if row.difference is None else
                      f"{row.difference:+.3f} [{row.low:+.3f}, {row.high:+.3f}]")
        lines.append(f"| {row.condition}: {row.shown} | {row.reward:.3f} | {accuracy} | {difference} |")
    lines.append(f"\n{rows[0].queries} queries each.")
    return "\n".join(lines)


def write_probe(rows: list[ProbeRow], title: str, out: Path) -> None:
    """``out``.json (the rows) and ``out``.md (the table), written whole or not at all."""
    out.parent.mkdir(parents=True, exist_ok=True)
    for suffix, text in ((".json", json.dumps({"title": title, "rows": [asdict(r) for r in rows]}, indent=1)),
                         (".md", probe_table(rows, title) + "\n")):
        partial = out.with_suffix(suffix + ".partial")
        partial.write_text(text, encoding="utf-8")
        partial.replace(out.with_suffix(suffix))
