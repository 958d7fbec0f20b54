"""Plots of a suite (matplotlib, PNG): training curves with seed bands, the reward-KL plane
with each method's trajectory and the Pareto frontier, the transfer diagnostics over training,
and a sweep's final values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from cory.experiments.diagnostics import DIAGNOSTICS  # noqa: E402
from cory.experiments.stats import pareto_frontier  # noqa: E402



def _smooth(values: np.ndarray, window: int) -> np.ndarray:
    if window <= 1 or len(values) < window:
        return values
    kernel = np.ones(window) / window
    padded = np.concatenate([np.full(window - 1, values[0]), values])
    return np.convolve(padded, kernel, mode="valid")


def _band(runs: list, key: str, source: str, window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Steps, mean and std over seeds of ``key``, aligned on the steps all seeds have."""
    series = []
    for run in runs:
        rows = getattr(run, source)
        points = {r["step"]: r[key] for r in rows if r.get(key) is not None}
        series.append(points)
    if not series or not all(series):
        return None
    steps = sorted(set.intersection(*(set(s) for s in series)))
    if not steps:
        return None
    values = np.array([[s[step] for step in steps] for s in series], dtype=float)
    values = np.array([_smooth(v, window) for v in values])
    return np.array(steps), values.mean(0), values.std(0)


def _names(description: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(r["name"] for r in description["runs"]))


def _prefix(description: dict[str, Any]) -> str:
    """The metric prefix of the analysed held-out trajectory (``eval`` by default)."""
    return description.get("analysis", {}).get("trajectory", "eval")


def draw_curves(path: Path, description: dict[str, Any], results: list) -> None:
    """Training task reward and KL, and held-out task reward, per run name with seed bands."""
    prefix = _prefix(description)
    panels = [("task_reward", "train", "task reward (train)", 5), ("kl", "train", "KL to reference (train)", 5),
              (f"{prefix}/task_reward", "evals", f"task reward ({prefix})", 1),
              (f"{prefix}/kl", "evals", f"KL ({prefix})", 1)]
    figure, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4))
    for name in _names(description):
        runs = [r for r in results if r.name == name]
        for axis, (key, source, title, window) in zip(axes, panels):
            band = _band(runs, key, source, window)
            if band is None:
                continue
            steps, mean, std = band
            line, = axis.plot(steps, mean, label=name)
            axis.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.2)
            axis.set_title(title)
            axis.set_xlabel("iteration")
    axes[0].legend(fontsize=8)
    figure.suptitle(f"{description['name']}: mean ± std over seeds")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def draw_reward_kl(path: Path, description: dict[str, Any], results: list) -> None:
    """Every seed's held-out (KL, reward) trajectory (thin), each run name's mean over seeds
    (thick) and the Pareto frontier of the mean points."""
    figure, axis = plt.subplots(figsize=(7, 5.5))
    prefix = _prefix(description)
    points = []
    for name in _names(description):
        runs = [r for r in results if r.name == name]
        kl, reward = _band(runs, f"{prefix}/kl", "evals", 1), _band(runs, f"{prefix}/task_reward", "evals", 1)
        if kl is None or reward is None:
            continue
        line, = axis.plot(kl[1], reward[1], marker="o", markersize=3, linewidth=2, label=name)
        for run in runs:
            trail = run.trajectory(prefix)
            axis.plot([p[0] for p in trail], [p[1] for p in trail], color=line.get_color(), alpha=0.3, linewidth=0.8)
        points += list(zip(kl[1].tolist(), reward[1].tolist()))
    if points:
        frontier = [points[i] for i in pareto_frontier(points)]
        axis.plot([p[0] for p in frontier], [p[1] for p in frontier], "k--", linewidth=1, label="Pareto frontier")
    axis.set_xlabel(f"KL to reference ({prefix}, nats)")
    axis.set_ylabel(f"task reward ({prefix})")
    axis.set_title(f"{description['name']}: reward vs KL (thin: seeds, thick: mean)")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def draw_diagnostics(path: Path, description: dict[str, Any], results: list) -> bool:
    """Each transfer diagnostic any run logged, per run name with seed bands: at the held-out
    evaluations (solid, markers) and on the training batches (dashed, smoothed over 3
    iterations). Returns whether there was anything to draw."""
    present = [d for d in DIAGNOSTICS if any(d in row for run in results for row in run.train)
               or any(f"eval/{d}" in row for run in results for row in run.evals)]
    if not present:
        return False
    figure, axes = plt.subplots(1, len(present), figsize=(4.5 * len(present), 4), squeeze=False)
    for index, name in enumerate(_names(description)):
        runs = [r for r in results if r.name == name]
        colour = f"C{index}"
        for axis, diagnostic in zip(axes[0], present):
            label: str | None = name  # on the first line drawn for this run name
            for key, source, window, style in ((f"eval/{diagnostic}", "evals", 1, "-o"), (diagnostic, "train", 3, "--")):
                band = _band(runs, key, source, window)
                if band is None:
                    continue
                steps, mean, std = band
                axis.plot(steps, mean, style, color=colour, markersize=3, label=label)
                axis.fill_between(steps, mean - std, mean + std, color=colour, alpha=0.15)
                label = None
            axis.set_title(diagnostic)
            axis.set_xlabel("iteration")
    for axis in axes[0]:
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=7)
    figure.suptitle(f"{description['name']}: transfer diagnostics (solid: held-out evaluations, dashed: training "
                    "batches; mean ± std over seeds)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def draw_sweep(path: Path, description: dict[str, Any], results: list) -> None:
    """Final held-out reward and KL against the swept value."""
    values = sorted({r.sweep_value for r in results if r.sweep_value is not None})
    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    prefix = _prefix(description)
    for axis, key, label in ((axes[0], f"{prefix}/task_reward", "final task reward"), (axes[1], f"{prefix}/kl", "final KL")):
        means, stds = [], []
        for value in values:
            finals = [r.final[key] for r in results if r.sweep_value == value and key in r.final]
            means.append(np.mean(finals))
            stds.append(np.std(finals))
        axis.errorbar(values, means, yerr=stds, marker="o", capsize=3)
        axis.set_xlabel(description["sweep"])
        axis.set_ylabel(label)
    figure.suptitle(f"{description['name']}: {description['sweep']} sweep (mean ± std over seeds)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def draw_suite(output_dir: Path, description: dict[str, Any], results: list) -> list[Path]:
    """Every plot of a suite into ``output_dir``; returns the files written."""
    if not results:
        return []
    written = [output_dir / "curves.png", output_dir / "reward_kl.png"]
    draw_curves(written[0], description, results)
    draw_reward_kl(written[1], description, results)
    if draw_diagnostics(output_dir / "diagnostics.png", description, results):
        written.append(output_dir / "diagnostics.png")
    if description.get("sweep") and any(r.sweep_value is not None for r in results):
        written.append(output_dir / "sweep.png")
        draw_sweep(written[-1], description, results)
    return written
