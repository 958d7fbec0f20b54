"""A suite folder -> its readings: per-run trajectories, means over seeds with bootstrap
intervals, paired-by-seed comparisons with verdicts, the comparisons as one Holm family, the
primary measure per reward quantity, and one row per run. ``cory.experiments.report`` writes them out.

Reads only the finished runs' logs (``metrics.jsonl``, ``final/summary.json``,
``environment.jsonl``) and the suite's ``suite.json``, so an exported copy redraws everything
without the runs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cory.experiments.reward_quantities import (QUANTITIES, agents_evaluated_alone, prefix_trajectory,
                                                quantity_trajectory)
from cory.experiments.stats import (Trajectory, bootstrap_mean, common_levels, holm, kl_at_reward, reward_at_kl,
                                    sign_flip_p, smallest_one_sided_p, t_interval)
from cory.experiments.suites import SUITE_FILE, AnalysisConfig
from cory.logging import read_jsonl_rows
from cory.provenance import ENVIRONMENT_FILE

EXTRA_COLUMNS = ("eval/pioneer/task_reward", "eval/observer/task_reward", "eval/system/task_reward")
# Collapse indicators shown per run, read at the last evaluation of the analysed prefix.
END_INDICATORS = {"distinct_2": ".3f", "response_length": ".1f", "hit_length_limit": ".2f"}
TRAJECTORY_POINTS = 5
STARTS_COLUMN = "starts (step: threads)"


@dataclass
class RunResult:
    name: str
    seed: int
    sweep_value: Any
    train: list[dict[str, Any]]
    evals: list[dict[str, Any]]
    final: dict[str, Any]
    starts: list[tuple[int, int]] = field(default_factory=list)  # (step, threads) per start or resume

    def trajectory(self, prefix: str) -> Trajectory:
        """The held-out ``(kl, reward)`` evaluations of ``prefix`` in time order."""
        return prefix_trajectory(self.evals, prefix)


def collect(output_dir: Path) -> tuple[dict[str, Any], list[RunResult]]:
    """The suite description and every finished run's logs."""
    description = json.loads((Path(output_dir) / SUITE_FILE).read_text())
    results = []
    for run in description["runs"]:
        folder = Path(run["folder"])
        summary = folder / "final" / "summary.json"
        if not summary.exists():
            continue
        rows = read_jsonl_rows(folder / "metrics.jsonl")
        environment = folder / ENVIRONMENT_FILE
        starts = [(r["step"], r["threads"]) for r in read_jsonl_rows(environment)] if environment.exists() else []
        results.append(RunResult(run["name"], run["seed"], run["sweep_value"],
                                 [r for r in rows if "task_reward" in r],
                                 [r for r in rows if "eval/task_reward" in r],
                                 json.loads(summary.read_text()), starts))
    return description, results


def best_before_collapse(trajectory: Trajectory, collapse_kl: float) -> float:
    """The highest eval reward among evaluations with KL at most ``collapse_kl``."""
    rewards = [reward for kl, reward in trajectory if kl <= collapse_kl]
    return max(rewards) if rewards else math.nan


LEVEL_FRACTIONS = (0.25, 0.5, 0.75)
# The pre-registered primary measure of every paired comparison (docs/results.md).
PRIMARY_MEASURE = "reward at the pair's matched KL"


def per_seed_measures(description: dict[str, Any], results: list[RunResult]) -> dict[str, dict[str, dict[int, float]]]:
    """``{run name: {measure: {seed: value}}}``: final reward and KL of the analysed
    trajectory, KL at reward levels and reward at KL levels that every run reaches, the best
    reward before collapse, and the further rows the suite asks for."""
    analysis = AnalysisConfig(**description.get("analysis", {}))
    prefix = analysis.trajectory
    trajectories = {(r.name, r.seed): r.trajectory(prefix) for r in results}
    reward_levels = common_levels(list(trajectories.values()), 1, LEVEL_FRACTIONS)
    kl_levels = common_levels(list(trajectories.values()), 0, LEVEL_FRACTIONS)
    measures: dict[str, dict[str, dict[int, float]]] = {}
    for run in results:
        path = trajectories[(run.name, run.seed)]
        values = {
            "final task reward": run.final.get(f"{prefix}/task_reward", math.nan),
            "final KL": run.final.get(f"{prefix}/kl", math.nan),
            **{f"KL at reward {level:.3f}": kl_at_reward(path, level) for level in reward_levels},
            **{f"reward at KL {level:.2f}": reward_at_kl(path, level) for level in kl_levels},
            f"best reward (KL <= {description['collapse_kl']:g})": best_before_collapse(path, description["collapse_kl"]),
        }
        values.update(_final_rows(run, analysis))
        for label, value in values.items():
            measures.setdefault(run.name, {}).setdefault(label, {})[run.seed] = value
    return measures


def _final_rows(run: RunResult, analysis: AnalysisConfig) -> dict[str, float]:
    """The suite's further rows and Pass@k, from the run's final evaluation."""
    keys = [*EXTRA_COLUMNS, *analysis.rows, *sorted(k for k in run.final if k.startswith("eval/pass@"))]
    return {key.removeprefix("eval/"): run.final[key] for key in keys if key in run.final}


def _rewards_at_matched_kl(path_a: Trajectory, path_b: Trajectory) -> list[float]:
    """``a - b`` in reward at the pair's KL levels (``LEVEL_FRACTIONS`` of the way from the
    higher start to the lower peak); empty when the two never share a KL range."""
    levels = common_levels([path_a, path_b], 0, LEVEL_FRACTIONS)
    return [reward_at_kl(path_a, level) - reward_at_kl(path_b, level) for level in levels]


def matched_kl_difference(path_a: Trajectory, path_b: Trajectory) -> float:
    """The primary measure of one seed's pair: the reward difference averaged over the pair's
    matched-KL levels (``nan`` without a common KL range)."""
    at_kl = _rewards_at_matched_kl(path_a, path_b)
    return float(np.mean(at_kl)) if at_kl else math.nan


def pair_differences(a: RunResult, b: RunResult, analysis: AnalysisConfig) -> dict[str, float]:
    """``a - b`` for one seed, every measure read at levels of *this pair's* trajectories
    (``LEVEL_FRACTIONS`` of the way from the higher start to the lower peak), so that no
    third run decides which levels exist. The first entry is the primary measure: the
    reward difference averaged over the pair's matched-KL levels."""
    path_a, path_b = a.trajectory(analysis.trajectory), b.trajectory(analysis.trajectory)
    reward_levels = common_levels([path_a, path_b], 1, LEVEL_FRACTIONS)
    at_kl = _rewards_at_matched_kl(path_a, path_b)
    differences = {PRIMARY_MEASURE: matched_kl_difference(path_a, path_b)}
    final = (f"{analysis.trajectory}/task_reward", f"{analysis.trajectory}/kl")
    differences["final task reward"] = a.final.get(final[0], math.nan) - b.final.get(final[0], math.nan)
    differences["final KL"] = a.final.get(final[1], math.nan) - b.final.get(final[1], math.nan)
    for fraction, value in zip(LEVEL_FRACTIONS, at_kl):
        differences[f"reward at the pair's KL level {fraction:.0%}"] = value
    for fraction, level in zip(LEVEL_FRACTIONS, reward_levels):
        differences[f"KL at the pair's reward level {fraction:.0%}"] = kl_at_reward(path_a, level) - kl_at_reward(path_b, level)
    rows_a, rows_b = _final_rows(a, analysis), _final_rows(b, analysis)
    differences.update({key: rows_a[key] - rows_b[key] for key in rows_a if key in rows_b})
    return differences


def results_table(description: dict[str, Any], results: list[RunResult]) -> list[dict[str, Any]]:
    """One row per run name: each measure's mean over seeds with its bootstrap interval."""
    analysis = AnalysisConfig(**description.get("analysis", {}))
    measures = per_seed_measures(description, results)
    rows = []
    for name in dict.fromkeys(r["name"] for r in description["runs"]):
        if name not in measures:
            continue
        runs = [r for r in results if r.name == name]
        row: dict[str, Any] = {"run": name, "seeds": len(runs), "sweep_value": runs[0].sweep_value}
        for label, by_seed in measures[name].items():
            row[label] = bootstrap_mean(list(by_seed.values()), analysis.level, analysis.resamples)
        rows.append(row)
    return rows


def primary_verdict(differences: list[float], alpha: float) -> str:
    """The pre-registered test of ``a > b`` on the primary measure: the exact one-sided
    sign-flip test at level ``alpha``; the opposite direction is named when its own one-sided
    test is significant."""
    n = len(differences)
    if n == 0:
        return "not shown (no seed)"
    if smallest_one_sided_p(n) > alpha:
        return f"not shown (too few seeds: {n} cannot reach p <= {alpha:g})"
    if sign_flip_p(differences, "greater") <= alpha:
        return "shown: higher"
    if sign_flip_p(differences, "less") <= alpha:
        return "shown: lower (against the hypothesis)"
    return "not shown"


def planned_seeds(description: dict[str, Any], a: str, b: str) -> list[int]:
    """The seeds the suite plans for both runs of a pair (empty when it names none)."""
    def seeds(name: str) -> set[int]:
        return {run["seed"] for run in description["runs"] if run["name"] == name and "seed" in run}
    return sorted(seeds(a) & seeds(b))


def interim(verdict: str, done: int, planned: int) -> str:
    """``verdict`` marked as an interim reading when fewer seeds than planned are in."""
    return f"interim, {done} of {planned} planned seeds: {verdict}" if done < planned else verdict


Pair = tuple[str, str, list[tuple[RunResult, RunResult]]]


def compared_pairs(analysis: AnalysisConfig, results: list[RunResult]) -> list[Pair]:
    """The suite's comparisons ``(a, b, [(run a, run b) per common seed])``: every run against
    the reference, then the further pairs; a pair with a run that has not finished is left out."""
    by_name: dict[str, dict[int, RunResult]] = {}
    for run in results:
        by_name.setdefault(run.name, {})[run.seed] = run
    names = [(name, analysis.reference) for name in by_name if analysis.reference and name != analysis.reference]
    names += [(a, b) for a, b in analysis.pairs]
    return [(a, b, [(by_name[a][seed], by_name[b][seed]) for seed in sorted(set(by_name[a]) & set(by_name[b]))])
            for a, b in names if a in by_name and b in by_name]


def comparisons(description: dict[str, Any], results: list[RunResult]) -> list[dict[str, Any]]:
    """Paired-by-seed differences (a - b) of every measure: mean, paired t-interval, bootstrap
    interval and sign-flip p-values; the pre-registered verdict on the primary measure, marked
    interim while fewer of the pair's planned seeds have finished."""
    analysis = AnalysisConfig(**description.get("analysis", {}))
    rows = []
    for a, b, runs in compared_pairs(analysis, results):
        seeds = [run_a.seed for run_a, _ in runs]
        planned = len(planned_seeds(description, a, b))
        per_seed = {run_a.seed: pair_differences(run_a, run_b, analysis) for run_a, run_b in runs}
        labels = list(dict.fromkeys(label for values in per_seed.values() for label in values))
        for label in labels:
            values = [per_seed[s][label] for s in seeds if math.isfinite(per_seed[s].get(label, math.nan))]
            missing = [s for s in seeds if not math.isfinite(per_seed[s].get(label, math.nan))]
            primary = label == PRIMARY_MEASURE
            rows.append({
                "comparison": f"{a} - {b}", "measure": f"**{label}** (primary)" if primary else label,
                "difference": t_interval(values, analysis.level),
                "bootstrap": bootstrap_mean(values, analysis.level, analysis.resamples),
                "seeds": len(values) if not missing else f"{len(values)} (no value: seed {', '.join(map(str, missing))})",
                "p (a > b)": _p(sign_flip_p(values, "greater")), "p (two-sided)": _p(sign_flip_p(values)),
                "verdict": interim(primary_verdict(values, analysis.alpha), len(seeds), planned) if primary else ""})
    return rows


def family(description: dict[str, Any], results: list[RunResult]) -> list[dict[str, Any]]:
    """The suite's primary comparisons read as one family of tests: each one's sign-flip p in
    both one-sided directions and two-sided, each Holm-adjusted over the family, and the
    verdict the Holm-adjusted two-sided p allows at the suite's alpha (the direction named by
    the mean). Empty with fewer than two comparisons."""
    analysis = AnalysisConfig(**description.get("analysis", {}))
    measured = []
    for a, b, runs in compared_pairs(analysis, results):
        values = [v for run_a, run_b in runs if math.isfinite(v := matched_kl_difference(
            run_a.trajectory(analysis.trajectory), run_b.trajectory(analysis.trajectory)))]
        measured.append((f"{a} - {b}", values))
    if len(measured) < 2:
        return []
    tests = {side: [sign_flip_p(values, side) for _, values in measured] for side in ("greater", "less", "two-sided")}
    adjusted = {side: holm(p_values) for side, p_values in tests.items()}
    rows = []
    for i, (comparison, values) in enumerate(measured):
        mean = float(np.mean(values)) if values else math.nan
        verdict = "not shown"
        if adjusted["two-sided"][i] <= analysis.alpha:
            verdict = "shown: higher" if mean > 0 else "shown: lower"
        rows.append({"comparison": comparison, "seeds": len(values), "difference": t_interval(values, analysis.level),
                     "p (a > b)": _p(tests["greater"][i]), "p (a < b)": _p(tests["less"][i]),
                     "p (two-sided)": _p(tests["two-sided"][i]), "Holm p (a > b)": _p(adjusted["greater"][i]),
                     "Holm p (a < b)": _p(adjusted["less"][i]), "Holm p (two-sided)": _p(adjusted["two-sided"][i]),
                     "verdict (Holm, two-sided)": verdict})
    return rows


def sensitivity(description: dict[str, Any], results: list[RunResult]) -> list[dict[str, Any]]:
    """The primary measure of every comparison with a multi-agent run, recomputed for each
    reward quantity of ``cory.experiments.reward_quantities`` (the same quantity for both runs of a pair;
    a one-agent run keeps its analysed trajectory), with the verdict its sign-flip test gives."""
    analysis = AnalysisConfig(**description.get("analysis", {}))
    rows = []
    for a, b, runs in compared_pairs(analysis, results):
        if not any(agents_evaluated_alone(run.evals) for pair in runs for run in pair):
            continue
        for quantity in QUANTITIES:
            values = [v for run_a, run_b in runs if math.isfinite(v := matched_kl_difference(
                quantity_trajectory(run_a.evals, quantity, analysis.trajectory),
                quantity_trajectory(run_b.evals, quantity, analysis.trajectory)))]
            rows.append({"comparison": f"{a} - {b}", "reward quantity": quantity, "seeds": len(values),
                         "difference": t_interval(values, analysis.level), "p (a > b)": _p(sign_flip_p(values, "greater")),
                         "p (two-sided)": _p(sign_flip_p(values)), "verdict": primary_verdict(values, analysis.alpha)})
    return rows


def _p(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.3f}"


def _shown_points(count: int) -> list[int]:
    """At most ``TRAJECTORY_POINTS`` indices spread evenly over ``count``, first and last included."""
    return sorted({round(i) for i in np.linspace(0, count - 1, min(count, TRAJECTORY_POINTS))}) if count else []


def _run_times(run: RunResult) -> tuple[float, float]:
    """Mean seconds per training iteration and total minutes (training plus evaluation)."""
    logged = {id(r): r for r in (*run.train, *run.evals)}.values()  # an evaluation shares its step's row
    iterations = [r["time/iteration"] for r in logged if "time/iteration" in r]
    seconds = sum(iterations) + sum(r["time/eval"] for r in logged if "time/eval" in r)
    return (float(np.mean(iterations)) if iterations else math.nan), seconds / 60


def run_rows(description: dict[str, Any], results: list[RunResult]) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per finished run (name, seed): the analysed reward and KL at up to
    ``TRAJECTORY_POINTS`` evaluations, the collapse indicators at its last evaluation, seconds
    per iteration, total minutes and, where runs recorded them, the step and thread count of
    each start (a second entry is a resume). Returns the rows and their columns."""
    prefix = AnalysisConfig(**description.get("analysis", {})).trajectory
    shown = {}
    for run in results:
        evals = [r for r in run.evals if f"{prefix}/task_reward" in r]
        shown[(run.name, run.seed)] = [evals[i] for i in _shown_points(len(evals))]
    schedules = {tuple(r.get("step") for r in points) for points in shown.values()}
    common = next(iter(schedules)) if len(schedules) == 1 else None
    at = f" at iterations {', '.join(str(step) for step in common)}" if common else ""

    def path(points: list[dict[str, Any]], key: str, form: str) -> str:
        return " → ".join(("" if common else f"{r.get('step')}: ") + format(r[key], form) for r in points)

    columns = ["run", "seed", f"`{prefix}` reward{at}", f"KL{at}", *(f"{name} (end)" for name in END_INDICATORS),
               "s / iteration", "minutes"]
    if any(run.starts for run in results):
        columns.append(STARTS_COLUMN)
    rows = []
    order = {name: i for i, name in enumerate(dict.fromkeys(r["name"] for r in description["runs"]))}
    for run in sorted(results, key=lambda r: (order.get(r.name, len(order)), r.seed)):
        points = shown[(run.name, run.seed)]
        last = points[-1] if points else {}
        per_iteration, minutes = _run_times(run)
        rows.append(dict(zip(columns, [
            run.name, run.seed, path(points, f"{prefix}/task_reward", "+.2f"), path(points, f"{prefix}/kl", ".1f"),
            *(format(last[f"{prefix}/{name}"], form) if f"{prefix}/{name}" in last else ""
              for name, form in END_INDICATORS.items()),
            f"{per_iteration:.1f}", f"{minutes:.1f}", ", ".join(f"{step}: {threads}" for step, threads in run.starts)])))
    return rows, columns
