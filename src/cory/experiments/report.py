"""A suite's results written out: ``results.md`` (tables of every reading in
``cory.experiments.results``), the CSV files, the plots, and an export small enough to commit.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any

from cory.experiments.diagnostics import diagnostics_over_training
from cory.experiments.results import (PRIMARY_MEASURE, TRAJECTORY_POINTS, RunResult, collect, comparisons, family,
                                      results_table, run_rows, sensitivity)
from cory.experiments.stats import Interval
from cory.experiments.suites import SUITE_FILE, AnalysisConfig
from cory.provenance import ENVIRONMENT_FILE



def _cell(value: Any) -> str:
    return "" if value is None else str(value)


def _markdown(rows: list[dict[str, Any]], columns: list[str]) -> list[str]:
    return (["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            + ["| " + " | ".join(_cell(row.get(c)) for c in columns) + " |" for row in rows])


def _csv(rows: list[dict[str, Any]], columns: list[str]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    header = []
    for column in columns:
        interval = any(isinstance(row.get(column), Interval) for row in rows)
        header += [f"{column} mean", f"{column} low", f"{column} high"] if interval else [column]
    writer.writerow(header)
    for row in rows:
        cells: list[Any] = []
        for column in columns:
            value = row.get(column)
            if isinstance(value, Interval):
                cells += [value.mean, value.low, value.high]
            elif any(isinstance(r.get(column), Interval) for r in rows):
                cells += [None, None, None]
            else:
                cells.append(value)
        writer.writerow(cells)
    return buffer.getvalue()


def write_results(output_dir: Path) -> Path:
    """``results.md`` and ``results.csv`` (and ``comparisons.csv`` when the suite compares
    runs) plus the plots, from the finished runs' logs."""
    from cory.experiments.plots import draw_suite  # matplotlib (a second), only when figures are drawn

    output_dir = Path(output_dir)
    description, results = collect(output_dir)
    analysis = AnalysisConfig(**description.get("analysis", {}))
    rows = results_table(description, results)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    if all(row.get("sweep_value") is None for row in rows) and "sweep_value" in columns:
        columns.remove("sweep_value")
    percent = f"{analysis.level:.0%}"
    lines = [f"# Suite `{description['name']}`", "",
             f"Mean over seeds [{percent} bootstrap interval] of the held-out evaluations of "
             f"`{analysis.trajectory}` (task reward; KL to the reference summed over response tokens). "
             "'KL at reward r' and 'reward at KL k' read each run's evaluation trajectory, linearly "
             "interpolated, where it first reaches a level every run of the suite reaches "
             "(description only: comparisons use each pair's own levels, below).", ""]
    lines += _markdown(rows, columns)
    compared = comparisons(description, results)
    if compared:
        lines += ["", "## Paired differences (a - b, by seed)", "",
                  f"Each comparison's **primary measure**, fixed before the runs, is *{PRIMARY_MEASURE}*: "
                  "per seed, the two runs' reward difference at KL levels 25/50/75 % of the way from the "
                  "pair's higher starting KL to its lower peak KL (linear interpolation along each "
                  "trajectory), averaged. Its verdict is the exact one-sided sign-flip test of a > b at "
                  f"alpha = {analysis.alpha:g} (the other direction is named when its own one-sided test "
                  f"is significant; with n seeds p cannot fall below 1 / 2^n); until every seed the suite "
                  "plans for a pair has finished, its verdict is marked *interim*, a reading rather than the "
                  "pre-registered result. 'difference' is the mean "
                  f"with its {percent} paired t-interval; the bootstrap interval and the other rows are "
                  "description, without a verdict.", ""]
        columns_compared = ["comparison", "measure", "difference", "bootstrap", "seeds", "p (a > b)",
                            "p (two-sided)", "verdict"]
        lines += _markdown(compared, columns_compared)
        (output_dir / "comparisons.csv").write_text(_csv(compared, columns_compared))
    lines += _family_section(output_dir, description, results, analysis)
    lines += _sensitivity_section(output_dir, description, results)
    lines += _diagnostics_section(output_dir, description, results, analysis)
    per_run, columns_per_run = run_rows(description, results)
    lines += ["", "## Every run", "",
              f"`{analysis.trajectory}` at up to {TRAJECTORY_POINTS} of its evaluations, collapse indicators at "
              "the last one, seconds per training iteration and minutes in all (training plus evaluation, "
              "wall-clock as logged); where recorded, the step and thread count of every start (a second "
              "entry is a resume).", ""]
    lines += _markdown(per_run, columns_per_run)
    (output_dir / "results.md").write_text("\n".join(lines) + "\n")
    (output_dir / "results.csv").write_text(_csv(rows, columns))
    draw_suite(output_dir, description, results)
    return output_dir / "results.md"


def _table_section(output_dir: Path, rows: list[dict[str, Any]], csv_name: str, title: str, intro: str) -> list[str]:
    """A results.md section (title, intro, table) with its rows also in ``csv_name``; nothing
    when there are no rows."""
    if not rows:
        return []
    columns = list(rows[0])
    (output_dir / csv_name).write_text(_csv(rows, columns))
    return ["", f"## {title}", "", intro, "", *_markdown(rows, columns)]


def _family_section(output_dir: Path, description: dict[str, Any], results: list[RunResult],
                    analysis: AnalysisConfig) -> list[str]:
    rows = family(description, results)
    return _table_section(
        output_dir, rows, "family.csv", "The primary comparisons as one family (Holm)",
        f"The primary measure of every comparison above, tested as one family of {len(rows)}: exact "
        "sign-flip p-values in each one-sided direction and two-sided, each Holm-adjusted over the "
        f"family. The verdict is the two-sided reading: shown where the Holm-adjusted two-sided p is at "
        f"most {analysis.alpha:g}, its direction the mean's.")


def _sensitivity_section(output_dir: Path, description: dict[str, Any], results: list[RunResult]) -> list[str]:
    return _table_section(
        output_dir, sensitivity(description, results), "sensitivity.csv",
        "Which reward counts: the primary measure per reward quantity",
        "Each comparison with a multi-agent run, its primary measure recomputed with each reward "
        "quantity of the multi-agent run (a one-agent run keeps its own): the agents' mean (the "
        "analysed trajectory), each agent alone, the observer with the pioneer's answer, the agent "
        "better at the last evaluation, and at each evaluation the better agent's point (`best of "
        "two`). The last two are chosen after the fact and favour the multi-agent run; the verdict "
        "is the uncorrected one-sided sign-flip test.")


def _diagnostics_section(output_dir: Path, description: dict[str, Any], results: list[RunResult],
                         analysis: AnalysisConfig) -> list[str]:
    return _table_section(
        output_dir, diagnostics_over_training(description, results, analysis.trajectory), "diagnostics.csv",
        "Transfer diagnostics over training",
        f"Per multi-agent run and evaluation step, the mean over seeds of `{analysis.trajectory}`'s reward "
        "and KL and of each diagnostic of `cory.multi.transfer`: at that held-out evaluation (`eval`) and "
        "over the training batches since the previous one (`train`). `transfer_gain`: a turn's reward "
        "minus its agent's on the plain query (in training only under difference credit); `copy_rate`: "
        "answers mostly repeating an input; `uses_right`/`fixes_wrong`: P(right | input right/wrong); "
        "`round1/flip_*`: answers turned right->wrong and wrong->right by the second round. Drawn in "
        "`diagnostics.png`.")


RUN_FILES = ("metrics.jsonl", "config.yaml", "final/summary.json", ENVIRONMENT_FILE)


def export_suite(output_dir: Path, destination: Path) -> Path:
    """Copy what a suite's analysis needs, small enough to commit: its tables and plots, and
    each finished run's metrics, config, final summary and environment record (no weights, no
    checkpoints). ``cory plot DESTINATION`` redraws everything from the copy."""
    output_dir, destination = Path(output_dir), Path(destination)
    description = json.loads((output_dir / SUITE_FILE).read_text())
    for run in description["runs"]:
        source = Path(run["folder"])
        target = destination / source.relative_to(output_dir)
        run["folder"] = str(target)
        if (source / "final" / "summary.json").exists():
            for name in RUN_FILES:
                if (source / name).exists():  # runs older than environment.jsonl lack it
                    (target / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source / name, target / name)
    destination.mkdir(parents=True, exist_ok=True)
    (destination / SUITE_FILE).write_text(json.dumps(description, indent=1))
    return write_results(destination)
