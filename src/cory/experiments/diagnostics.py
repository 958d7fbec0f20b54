"""A suite's transfer diagnostics over training: per run name and evaluation step, the mean
over seeds of each headline diagnostic (``cory.multi.transfer``) at that held-out evaluation
and over the training iterations since the previous one.

One-agent runs have none of these keys and give no rows; a diagnostic no run logged gives
no column.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cory.experiments.results import RunResult

# The topology-independent headline keys of cory.multi.transfer (round 1: the first revision).
DIAGNOSTICS = ("transfer_gain", "copy_rate", "uses_right", "fixes_wrong",
               "round1/flip_right_wrong", "round1/flip_wrong_right")


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _eval_steps(runs: list[RunResult]) -> list[int]:
    """The evaluation steps every seed of a run name reached."""
    return sorted(set.intersection(*({r["step"] for r in run.evals} for run in runs)))


def _at(rows: list[dict[str, Any]], step: int, key: str) -> float | None:
    return next((r[key] for r in rows if r["step"] == step and r.get(key) is not None), None)


def _over_window(rows: list[dict[str, Any]], first: int, last: int, key: str) -> float | None:
    """The mean of ``key`` over the training rows of steps ``first`` to ``last - 1``."""
    return _mean([r[key] for r in rows if first <= r["step"] < last and r.get(key) is not None])


def diagnostics_over_training(description: dict[str, Any], results: list[RunResult],
                              prefix: str) -> list[dict[str, Any]]:
    """One row per (run name, evaluation step) of a run name with any diagnostic: the mean over
    seeds of the analysed ``prefix`` reward and KL, of each diagnostic at the evaluation
    (``eval ...``) and over the training iterations since the previous evaluation
    (``train ...``; none at step 0). Rounded to three decimals."""
    rows: list[dict[str, Any]] = []
    for name in dict.fromkeys(r["name"] for r in description["runs"]):
        runs = [r for r in results if r.name == name]
        if not runs or not any(f"eval/{d}" in row for run in runs for row in run.evals for d in DIAGNOSTICS):
            continue
        steps = _eval_steps(runs)
        for previous, step in zip([0, *steps], steps):
            row: dict[str, Any] = {"run": name, "step": step, "seeds": len(runs)}
            for label, key in (("reward", f"{prefix}/task_reward"), ("KL", f"{prefix}/kl")):
                row[label] = _mean([v for run in runs if (v := _at(run.evals, step, key)) is not None])
            for diagnostic in DIAGNOSTICS:
                row[f"eval {diagnostic}"] = _mean(
                    [v for run in runs if (v := _at(run.evals, step, f"eval/{diagnostic}")) is not None])
                row[f"train {diagnostic}"] = _mean(
                    [v for run in runs if (v := _over_window(run.train, previous, step, diagnostic)) is not None])
            rows.append(row)
    columns = [c for c in dict.fromkeys(k for row in rows for k in row) if any(row.get(c) is not None for row in rows)]
    return [{c: round(v, 3) + 0.0 if isinstance(v, float) else v for c, v in ((c, row.get(c)) for c in columns)}
            for row in rows]
