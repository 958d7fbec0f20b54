"""The precondition probe of CORY's mechanism, without training: does a model use an answer
it is shown?

For each held-out query the model answers over and over (``eval`` sampling settings, each
query repeated ``eval.samples_per_prompt`` times, 16 rows per generation call):

- ``nothing``: the plain query, as a lone agent or CORY's pioneer sees it;
- shown a good answer, in the task's observer template (what CORY's observer sees): the gold
  worked solution where the task has one (arithmetic, GSM8K: ``right``), else the
  highest-reward of the model's own answers to the plain query (``high``);
- shown a bad answer: another query's solution whose final answer differs (``wrong``), else
  the lowest-reward of its own answers (``low``);
- ``own``: its own answer to the plain query (sample k shown to observer sample k), exactly
  as the pipeline keeps a pioneer's reply: CORY's observer at iteration 0. Its difference
  from ``nothing`` is the ``transfer_gain``; on exact-answer tasks ``uses_right`` and
  ``fixes_wrong`` say how often the observer is right after a right and a wrong answer.

A gold solution is shown as a reply of the model would carry it: wrapped in the white space
the model's own replies most often start and end with (a leading space after ``Answer:``, the
blank lines before the stop string). Every shown condition goes through the task's join
(``cory.tasks.shown``); ``joins`` repeats them under other joins to compare them on the same
draws. Each shown condition is compared with ``nothing`` query by query (the mean over the
query's samples): the paired mean difference and its t-interval.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from cory.agents.agent import Agent
from cory.build import build_run
from cory.config.schema import RunConfig
from cory.evaluation import evaluation_budgets
from cory.experiments.stats import t_interval
from cory.multi.episode import Draw
from cory.rewards.base import RewardFunction, score_safely
from cory.tasks.base import Task
from cory.tasks.shown import AnswerJoin
from cory.types import Prompt


# Candidate answers per query from which ``high`` and ``low`` are drawn (tasks without solutions).
CANDIDATES = 4
# Rows per generation call: bounds memory (Gemma-3's 262k-token vocabulary makes logits large).
ROWS_PER_CALL = 16


@dataclass
class ProbeRow:
    """One condition: mean task reward and accuracy (None without a checker) over its answers,
    the paired difference in reward from ``nothing`` over queries (mean, t-interval), and for
    ``own`` how often a right and a wrong shown answer lead to a right one."""

    condition: str
    shown: str
    reward: float
    accuracy: float | None
    difference: float | None = None
    low: float | None = None
    high: float | None = None
    queries: int = 0
    join: str = ""  # how the shown answer was joined into the prompt ("" for nothing)
    uses_right: float | None = None  # own: P(right | its own answer shown was right)
    fixes_wrong: float | None = None  # own: P(right | its own answer shown was wrong)


def reply_shape(texts: list[str]) -> tuple[str, str]:
    """The white space ``texts`` most often start and end with (what generation leaves
    around an answer)."""
    leads = Counter(text[:len(text) - len(text.lstrip())] for text in texts)
    trails = Counter(text[len(text.rstrip()):] for text in texts)
    return leads.most_common(1)[0][0] if texts else "", trails.most_common(1)[0][0] if texts else ""


def shown_answers(queries: list[Prompt], own: list[list[str]], own_rewards: list[list[float]]
                  ) -> dict[str, tuple[str, list[str]]]:
    """Per condition: what it shows, and the answer shown with each query. ``own`` holds the
    model's answers to each plain query and ``own_rewards`` their rewards."""
    if all(q.solution for q in queries) and len({q.answer for q in queries}) > 1:
        lead, trail = reply_shape([text for texts in own for text in texts])
        wrong = []
        for i, query in enumerate(queries):
            other = next(queries[(i + k) % len(queries)] for k in range(1, len(queries))
                         if queries[(i + k) % len(queries)].answer != query.answer)
            wrong.append(f"{lead}{other.solution}{trail}")
        return {"right": ("the gold solution", [f"{lead}{q.solution}{trail}" for q in queries]),
                "wrong": ("another problem's solution (a different answer)", wrong)}
    best = [texts[max(range(len(texts)), key=scores.__getitem__)] for texts, scores in zip(own, own_rewards)]
    worst = [texts[min(range(len(texts)), key=scores.__getitem__)] for texts, scores in zip(own, own_rewards)]
    return {"high": (f"its highest-reward answer of {len(own[0])} to the plain query", best),
            "low": (f"its lowest-reward answer of {len(own[0])} to the plain query", worst)}


def run_probe(config: RunConfig, answer: Callable[[list[str]], list[str]], task: Task,
              reward: RewardFunction, joins: Sequence[AnswerJoin] = ()) -> list[ProbeRow]:
    """The probe's rows for ``task``; ``answer`` samples the model's responses to prompts.
    The shown conditions run under the task's join, then under each of ``joins``."""
    queries = task.test[: config.eval.n_prompts]
    samples = config.eval.samples_per_prompt
    own_count = samples if queries and queries[0].solution else max(samples, CANDIDATES)

    def sample(prompts: list[list[str]], count: int) -> tuple[list[list[str]], list[list[float]], list[bool] | None]:
        """Answers to each query's ``count`` prompts, their rewards, and whether each is right."""
        flat_queries = [q for q in queries for _ in range(count)]
        texts = answer([p for per_query in prompts for p in per_query])
        scores = score_safely(reward, flat_queries, texts)
        right = task.checker(flat_queries, texts) if task.checker is not None else None
        return ([texts[i * count:(i + 1) * count] for i in range(len(queries))],
                [scores[i * count:(i + 1) * count] for i in range(len(queries))], right)

    own, own_rewards, own_right = sample([[q.query] * own_count for q in queries], own_count)
    nothing = [sum(r) / len(r) for r in own_rewards]
    rows = [ProbeRow("nothing", "the plain query", sum(nothing) / len(nothing), _share(own_right),
                     queries=len(queries))]
    conditions = shown_answers(queries, own, own_rewards)
    for join in [task.join, *joins]:
        shown_task = replace(task, join=join)
        for condition, (description, shown) in conditions.items():
            _, rewards, right = sample([[shown_task.prompt_for(q, [text])] * samples
                                        for q, text in zip(queries, shown)], samples)
            rows.append(_compared(ProbeRow(condition, description, 0.0, _share(right), join=join_name(join)),
                                  rewards, nothing))
        _, rewards, right = sample([[shown_task.prompt_for(q, [own[i][k]]) for k in range(samples)]
                                    for i, q in enumerate(queries)], samples)
        row = _compared(ProbeRow("own", "its own answer to the plain query (a pioneer's reply)", 0.0,
                                 _share(right), join=join_name(join)), rewards, nothing)
        if right is not None and own_right is not None:
            shown_right = [own_right[i * own_count + k] for i in range(len(queries)) for k in range(samples)]
            row.uses_right = _share([r for r, s in zip(right, shown_right) if s])
            row.fixes_wrong = _share([r for r, s in zip(right, shown_right) if not s])
        rows.append(row)
    return rows


def join_name(join: AnswerJoin) -> str:
    """How ``join`` shows an answer: ``clean`` or ``verbatim``."""
    return "verbatim" if join.verbatim else "clean"


def _share(flags: list[bool] | None) -> float | None:
    return None if not flags else sum(flags) / len(flags)


def _compared(row: ProbeRow, rewards: list[list[float]], nothing: list[float]) -> ProbeRow:
    """``row`` with its mean reward, query count and paired difference from ``nothing``."""
    means = [sum(r) / len(r) for r in rewards]
    difference = t_interval([m - n for m, n in zip(means, nothing)])
    row.reward, row.queries = sum(means) / len(means), len(means)
    row.difference, row.low, row.high = difference.mean, difference.low, difference.high
    return row


def probe(config: RunConfig, joins: Sequence[str] = ()) -> list[ProbeRow]:
    """Build the model, task and reward of ``config`` (its first agent) and run the probe,
    the shown conditions under the task's join and then under each join named in ``joins``
    (``clean``, ``verbatim``)."""
    if config.threads:
        torch.set_num_threads(config.threads)
    parts = build_run(config, local=True)

    def answer(prompts: list[str]) -> list[str]:
        texts = []
        for start in range(0, len(prompts), ROWS_PER_CALL):
            chunk = prompts[start:start + ROWS_PER_CALL]
            draw = Draw(config.eval.seed + start, "eval", config.eval.greedy, evaluation_budgets(config, len(chunk)))
            request = draw.request(chunk, keep=False)
            texts += parts.agents.map(Agent.generate, {0: (request,)})[0].texts
        return texts

    try:
        others = [replace(parts.task.join, verbatim=name == "verbatim") for name in joins]
        return run_probe(config, answer, parts.task, parts.reward, others)
    finally:
        parts.agents.close()


def probe_table(rows: list[ProbeRow], title: str) -> str:
    """The rows as a Markdown table."""
    lines = [f"**{title}**", "", "| shown | join | reward | accuracy | reward − nothing [95 % t-interval] "
             "| uses_right | fixes_wrong |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        difference = ("" if row.difference is None else
                      f"{row.difference:+.3f} [{row.low:+.3f}, {row.high:+.3f}]")
        lines.append(f"| {row.condition}: {row.shown} | {row.join} | {row.reward:.3f} | {_number(row.accuracy)} "
                     f"| {difference} | {_number(row.uses_right)} | {_number(row.fixes_wrong)} |")
    lines.append(f"\n{rows[0].queries} queries each.")
    return "\n".join(lines)


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def write_probe(rows: list[ProbeRow], title: str, out: Path) -> None:
    """``out``.json (the rows) and ``out``.md (the table), written whole or not at all."""
    out.parent.mkdir(parents=True, exist_ok=True)
    for suffix, text in ((".json", json.dumps({"title": title, "rows": [asdict(r) for r in rows]}, indent=1)),
                         (".md", probe_table(rows, title) + "\n")):
        partial = out.with_suffix(suffix + ".partial")
        partial.write_text(text, encoding="utf-8")
        partial.replace(out.with_suffix(suffix))
