"""A screen across suites: each suite one cell (a model on a task) with PPO as its reference
arm; every other arm's paired difference from PPO in reward at the pair's matched KL, the
transfer diagnostics beside it, and the confirmation the pre-registered rule
(docs/preregistration.md) asks for per model.

The rule: per model, the arm-and-task with the largest mean difference over its screening
seeds; nothing to confirm unless that is above zero; seeds for 80 % power of a one-sided test
at alpha 0.05, ``n = ceil(((z_0.95 + z_0.80) * sd / d)^2)``, with ``sd`` the standard deviation
of paired differences pooled over the model's cells, at least ``MIN_SEEDS`` (the fewest an
exact one-sided sign-flip test needs to reach p < 0.05), and a cell needing more than
``MAX_SEEDS`` reported as not testable here, with the power that many seeds would give.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy import stats as scipy_stats

from cory.errors import ConfigError
from cory.experiments.diagnostics import DIAGNOSTICS
from cory.experiments.results import RunResult, collect, compared_pairs, matched_kl_difference
from cory.experiments.suites import AnalysisConfig

MIN_SEEDS, MAX_SEEDS = 5, 10
ALPHA, POWER = 0.05, 0.80


@dataclass
class Cell:
    """One non-reference arm of one suite: its per-seed differences from the reference and the
    mean over seeds, at the last evaluation, of each row the suite's analysis lists
    (``analysis.rows``) and of each headline transfer diagnostic the arm logged."""

    model: str
    task: str
    arm: str
    differences: list[float]
    diagnostics: dict[str, float]
    seeds: list[int] = field(default_factory=list)  # the seed of each difference

    @property
    def mean(self) -> float:
        return float(np.mean(self.differences)) if self.differences else math.nan


def suite_cells(description: dict[str, Any], results: list[RunResult], model: str, task: str) -> list[Cell]:
    """Every arm of one suite against its reference, paired by seed."""
    analysis = AnalysisConfig(**description.get("analysis", {}))
    if not analysis.reference:
        raise ConfigError(f"suite '{description.get('name')}': a screen needs analysis.reference (the PPO arm)")
    cells = []
    for a, b, runs in compared_pairs(analysis, results):
        if b != analysis.reference:
            continue
        by_seed = {run_a.seed: v for run_a, run_b in runs if math.isfinite(v := matched_kl_difference(
            run_a.trajectory(analysis.trajectory), run_b.trajectory(analysis.trajectory)))}
        keys = dict.fromkeys([*analysis.rows, *(f"eval/{d}" for d in DIAGNOSTICS)])
        diagnostics = {key.removeprefix("eval/"): float(np.mean([run_a.final[key] for run_a, _ in runs]))
                       for key in keys if runs and all(key in run_a.final for run_a, _ in runs)}
        cells.append(Cell(model, task, a, list(by_seed.values()), diagnostics, list(by_seed)))
    return cells


def _model_and_task(description: dict[str, Any]) -> tuple[str, str]:
    """The model and task of a suite's first finished run, from its saved config."""
    for run in description["runs"]:
        config_file = Path(run["folder"]) / "config.yaml"
        if config_file.exists():
            config = yaml.safe_load(config_file.read_text())
            return str(config["model"]), str(config["task"]["name"])
    raise ConfigError(f"suite '{description.get('name')}': no finished run to read its model and task from")


def screen_cells(folders: list[Path]) -> list[Cell]:
    """The cells of every suite folder (run folders or an exported copy)."""
    cells = []
    for folder in folders:
        description, results = collect(Path(folder))
        if results:
            cells += suite_cells(description, results, *_model_and_task(description))
    return cells


def pooled_sd(cells: list[Cell]) -> float:
    """The standard deviation of paired differences pooled over cells: each cell's variance
    around its own mean, weighted by its degrees of freedom (seeds - 1)."""
    usable = [c.differences for c in cells if len(c.differences) > 1]
    dof = sum(len(d) - 1 for d in usable)
    if not dof:
        return math.nan
    return math.sqrt(sum((len(d) - 1) * float(np.var(d, ddof=1)) for d in usable) / dof)


def seeds_for_power(difference: float, sd: float, alpha: float = ALPHA, power: float = POWER) -> int:
    """Seeds for ``power`` of a one-sided test at ``alpha`` of a true mean ``difference``."""
    z = scipy_stats.norm.ppf(1 - alpha) + scipy_stats.norm.ppf(power)
    return math.ceil((z * sd / difference) ** 2)


def power_with(seeds: int, difference: float, sd: float, alpha: float = ALPHA) -> float:
    """The power a one-sided test at ``alpha`` has with ``seeds`` seeds (normal approximation)."""
    return float(scipy_stats.norm.cdf(difference * math.sqrt(seeds) / sd - scipy_stats.norm.ppf(1 - alpha)))


def detectable_effect(seeds: int, sd: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true mean difference a one-sided test at ``alpha`` with ``seeds`` seeds
    detects with ``power`` (normal approximation): what a null at that many seeds can rule out."""
    return (scipy_stats.norm.ppf(1 - alpha) + scipy_stats.norm.ppf(power)) * sd / math.sqrt(seeds)


@dataclass
class Selection:
    model: str
    best: Cell | None
    sd: float
    seeds: int | None  # confirmation seeds; None: nothing to confirm or not testable
    verdict: str


def select(cells: list[Cell]) -> list[Selection]:
    """The pre-registered rule, per model (in order of first appearance)."""
    selections = []
    for model in dict.fromkeys(c.model for c in cells):
        own = [c for c in cells if c.model == model and c.differences]
        sd = pooled_sd(own)
        best = max(own, key=lambda c: c.mean, default=None)
        if best is None or not best.mean > 0:
            verdict = "nothing to confirm: no cell above PPO" + (f" (best {best.mean:+.3f})" if best else "")
            selections.append(Selection(model, best, sd, None, verdict))
            continue
        if not sd > 0:
            selections.append(Selection(model, best, sd, None, "not sized: no spread between seeds to pool"))
            continue
        needed = seeds_for_power(best.mean, sd)
        if needed > MAX_SEEDS:
            verdict = (f"not testable here: needs {needed} seeds for 80 % power; "
                       f"{MAX_SEEDS} give {power_with(MAX_SEEDS, best.mean, sd):.0%}")
            selections.append(Selection(model, best, sd, None, verdict))
            continue
        seeds = max(MIN_SEEDS, needed)
        verdict = f"confirm with {seeds} seeds (80 % power needs {needed}; power at {seeds}: " \
                  f"{power_with(seeds, best.mean, sd):.0%})"
        selections.append(Selection(model, best, sd, seeds, verdict))
    return selections


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table, one string per line."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


# What each column after "mean" holds (a suite's analysis.rows may add others, named as logged).
COLUMN_MEANINGS = {
    "transfer_gain": "a turn's reward minus its agent's reward on the plain query, mean over turns with inputs",
    "copy_rate": "share of answers that mostly repeat an answer they were shown (≥ 80 % of word bigrams)",
    "uses_right": "P(right | an answer shown was right)",
    "fixes_wrong": "P(right | an answer shown was wrong)",
    "round1/flip_right_wrong": "P(wrong in round 1 | right in round 0), per role",
    "round1/flip_wrong_right": "P(right in round 1 | wrong in round 0), per role",
    "task_reward": "held-out task reward",
    "kl": "KL to the reference, summed over a response's tokens",
}


def column_legend(keys: list[str]) -> str:
    """A line under the table: signed columns are differences from PPO, the rest the arm's own
    values at its last evaluation, averaged over seeds; then what each named column is."""
    meanings = []
    for key in keys:
        known = next((m for name, m in COLUMN_MEANINGS.items() if key == name or key.endswith("/" + name)), None)
        if known:
            meanings.append(f"`{key}`: {known}")
    return ("Signed columns (per seed, mean) are the arm's reward at the pair's matched KL minus PPO's; the "
            "columns after them are the arm's own values at its last evaluation, averaged over seeds, not "
            "differences" + (". " + "; ".join(meanings) + "." if meanings else "."))


def screen_report(folders: list[Path]) -> str:
    """Markdown: every cell of the suites in ``folders`` ranked by its mean difference from
    PPO, then the selection."""
    return cells_report(screen_cells(folders))


def cells_report(cells: list[Cell]) -> str:
    """Markdown: ``cells`` ranked by their mean difference from PPO, a legend, then the selection."""
    keys = list(dict.fromkeys(k for c in cells for k in c.diagnostics))
    ranked = sorted(cells, key=lambda c: (c.model, -c.mean if math.isfinite(c.mean) else math.inf))
    lines = markdown_table(
        ["model", "task", "arm", "seeds", "reward at matched KL − PPO, per seed", "mean", *keys],
        [[c.model, c.task, c.arm, str(len(c.differences)), ", ".join(f"{v:+.3f}" for v in c.differences),
          f"{c.mean:+.3f}", *(f"{c.diagnostics[k]:.3f}" if k in c.diagnostics else "" for k in keys)]
         for c in ranked])
    lines += ["", column_legend(keys)]
    lines += [""] + markdown_table(
        ["model", "best cell", "mean", "pooled sd", "selection"],
        [[s.model, f"{s.best.task} / {s.best.arm}" if s.best else "", f"{s.best.mean:+.3f}" if s.best else "",
          f"{s.sd:.3f}", s.verdict] for s in select(cells)])
    return "\n".join(lines) + "\n"
