"""Experiment suites: runs x seeds (x a sweep) -> one folder, a results table and plots.

A suite file names a base config, the seeds, overrides for every run, and named runs
(each a method plus overrides); a ``sweep`` adds one run per value of one key. Every run
config is resolved before the first run starts, so a bad method or key fails at once.
Finished runs (``final/summary.json`` present) are not run again; an interrupted run
continues from its last checkpoint when the suite sets ``save_every``.
"""

from __future__ import annotations

import csv
import gc
import io
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cory.config import RunConfig, read_config_file, read_yaml, resolve
from cory.configtree import build, deep_merge, option, parse_override, set_dotted, to_dict
from cory.errors import ConfigError
from cory.logging import read_jsonl_rows

SUITE_FILE = "suite.json"
EXTRA_COLUMNS = ("eval/pioneer/task_reward", "eval/observer/task_reward", "eval/system/task_reward")


@dataclass
class SweepConfig:
    name: str = option(help="label of the swept quantity, e.g. lambda")
    key: str = option(help="dotted config key, e.g. collective.lambda")
    values: list[Any] = option(help="one run per value")
    run: dict[str, Any] = option({}, help="method and overrides of every sweep run")


@dataclass
class SuiteConfig:
    name: str = option(help="suite name")
    base: str = option(help="config file every run starts from (relative to the suite file)")
    output_dir: str = "runs/suites/default"
    seeds: list[int] = option([0])
    overrides: dict[str, Any] = option({}, help="applied to every run (dotted keys allowed)")
    runs: dict[str, dict[str, Any]] = option({}, help="name -> method and overrides")
    sweep: SweepConfig | None = None
    collapse_kl: float = option(10.0, gt=0, help="'before collapse' means eval KL at most this")


@dataclass
class PlannedRun:
    name: str
    seed: int
    config: RunConfig
    sweep_value: Any = None

    @property
    def folder(self) -> Path:
        return Path(self.config.output_dir)


@dataclass
class Suite:
    config: SuiteConfig
    runs: list[PlannedRun] = field(default_factory=list)

    @property
    def output_dir(self) -> Path:
        return Path(self.config.output_dir)

    def names(self) -> list[str]:
        return list(dict.fromkeys(run.name for run in self.runs))


def _expand(overrides: dict[str, Any]) -> dict[str, Any]:
    """``{'ppo.learning_rate': 1e-5}`` -> ``{'ppo': {'learning_rate': 1e-5}}``."""
    tree: dict[str, Any] = {}
    for key, value in overrides.items():
        if isinstance(value, dict):
            value = _expand(value)
        set_dotted(tree, str(key).split("."), value)
    return tree


def _sweep_label(sweep: SweepConfig, value: Any) -> str:
    return f"{sweep.name}={value}"


def load_suite(path: str | Path, overrides: list[str] = ()) -> Suite:
    """Read and fully resolve a suite; every run's config is checked here. ``overrides``
    (``key=value``) apply to every run, above the suite's own."""
    path = Path(path)
    config = build(SuiteConfig, read_yaml(path), "suite")
    for text in overrides:
        keys, value = parse_override(text)
        config.overrides[".".join(keys)] = value.parsed
    base = read_config_file(path.parent / config.base)
    named: list[tuple[str, dict[str, Any], Any]] = [(n, spec, None) for n, spec in config.runs.items()]
    if config.sweep is not None:
        for value in config.sweep.values:
            spec = deep_merge(config.sweep.run, _expand({config.sweep.key: value}))
            named.append((_sweep_label(config.sweep, value), spec, value))
    if not named:
        raise ConfigError(f"suite '{path}': lists no runs; add 'runs:' or 'sweep:'")
    suite = Suite(config)
    for name, spec, _ in named:
        if not isinstance(spec, dict):
            raise ConfigError(f"suite.runs.{name}: expected a mapping with 'method' and overrides")
    for seed in config.seeds:  # seed-major: every method's first seed finishes early
        for name, spec, value in named:
            raw = deep_merge(deep_merge(base, _expand(config.overrides)), _expand(spec))
            raw.update(seed=seed, output_dir=str(Path(config.output_dir) / name / f"seed{seed}"))
            try:
                resolved = resolve(raw)
            except ConfigError as error:
                raise ConfigError(f"suite run '{name}' (seed {seed}): {error}") from None
            suite.runs.append(PlannedRun(name, seed, resolved, value))
    return suite


def is_finished(run: PlannedRun) -> bool:
    return (run.folder / "final" / "summary.json").exists()


def run_suite(suite: Suite, log: Callable[[str], None] = print, seeds: list[int] | None = None) -> Path:
    """Run every unfinished run (only those of ``seeds``, if given, so that several processes
    or machines can share a suite's seeds), then write the results table and the plots from
    every run finished so far."""
    from cory.trainer import Trainer

    unknown = sorted(set(seeds or ()) - set(suite.config.seeds))
    if unknown:
        raise ConfigError(f"--seeds: {unknown} not among the suite's seeds {suite.config.seeds}")
    suite.output_dir.mkdir(parents=True, exist_ok=True)
    description = suite.output_dir / SUITE_FILE
    scratch = description.with_name(f".{SUITE_FILE}.{os.getpid()}")
    scratch.write_text(json.dumps(_describe(suite), indent=1))
    scratch.replace(description)
    for number, run in enumerate(suite.runs, start=1):
        label = f"[{number}/{len(suite.runs)}] {run.name} seed {run.seed}"
        if seeds is not None and run.seed not in seeds:
            continue
        if is_finished(run):
            log(f"{label}: finished earlier, skipped")
            continue
        log(f"{label}: training -> {run.folder}")
        config = run.config
        if run.folder.exists():
            config = resolve(deep_merge(to_dict(config), {"resume": "auto"}))
        trainer = Trainer(config)
        try:
            trainer.train()
        finally:
            trainer.close()
            del trainer
            gc.collect()
    return write_results(suite.output_dir)


def _describe(suite: Suite) -> dict[str, Any]:
    return {
        "name": suite.config.name,
        "collapse_kl": suite.config.collapse_kl,
        "sweep": suite.config.sweep.name if suite.config.sweep else None,
        "runs": [{"name": r.name, "seed": r.seed, "folder": str(r.folder), "sweep_value": r.sweep_value,
                  "method": r.config.method} for r in suite.runs],
    }


# ---------------------------------------------------------------- results
@dataclass
class RunResult:
    name: str
    seed: int
    sweep_value: Any
    train: list[dict[str, Any]]
    evals: list[dict[str, Any]]
    final: dict[str, Any]


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
        results.append(RunResult(run["name"], run["seed"], run["sweep_value"],
                                 [r for r in rows if "task_reward" in r],
                                 [r for r in rows if "eval/task_reward" in r],
                                 json.loads(summary.read_text())))
    return description, results


def reward_at_kl(evals: list[dict[str, Any]], target: float) -> float:
    """Eval reward where the eval trajectory first reaches KL ``target`` (linear
    interpolation); the final reward if it never gets there."""
    points = [(r["eval/kl"], r["eval/task_reward"]) for r in evals]
    for (kl0, r0), (kl1, r1) in zip(points, points[1:]):
        if kl0 <= target <= kl1 and kl1 > kl0:
            return r0 + (r1 - r0) * (target - kl0) / (kl1 - kl0)
    if points and points[0][0] >= target:
        return points[0][1]
    return points[-1][1] if points else math.nan


def best_before_collapse(evals: list[dict[str, Any]], collapse_kl: float) -> float:
    """The highest eval reward among evaluations with KL at most ``collapse_kl``."""
    rewards = [r["eval/task_reward"] for r in evals if r["eval/kl"] <= collapse_kl]
    return max(rewards) if rewards else math.nan


def _mean_std(values: list[float]) -> tuple[float, float]:
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return math.nan, math.nan
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5 if len(values) > 1 else 0.0
    return mean, std


def results_table(description: dict[str, Any], results: list[RunResult]) -> list[dict[str, Any]]:
    """One row per run name: means and standard deviations over its seeds."""
    names = list(dict.fromkeys(r["name"] for r in description["runs"]))
    by_name = {name: [r for r in results if r.name == name] for name in names}
    finals = {name: _mean_std([r.final.get("eval/kl") for r in runs])[0] for name, runs in by_name.items() if runs}
    matched_kl = min((v for v in finals.values() if not math.isnan(v)), default=math.nan)
    rows = []
    for name, runs in by_name.items():
        if not runs:
            continue
        row: dict[str, Any] = {"run": name, "seeds": len(runs), "sweep_value": runs[0].sweep_value}
        metrics = {
            "final task reward": [r.final.get("eval/task_reward") for r in runs],
            "final KL": [r.final.get("eval/kl") for r in runs],
            f"reward at KL {matched_kl:.2f}": [reward_at_kl(r.evals, matched_kl) for r in runs],
            f"best reward (KL <= {description['collapse_kl']:g})":
                [best_before_collapse(r.evals, description["collapse_kl"]) for r in runs],
        }
        for key in sorted(runs[0].final):
            if key in EXTRA_COLUMNS or key.startswith("eval/pass@"):
                metrics[key.removeprefix("eval/")] = [r.final.get(key) for r in runs]
        for label, values in metrics.items():
            row[label] = _mean_std(values)
        rows.append(row)
    return rows


def _format(value: Any) -> str:
    if isinstance(value, tuple):
        mean, std = value
        return "n/a" if math.isnan(mean) else f"{mean:.3f} ± {std:.3f}"
    return "" if value is None else str(value)


def write_results(output_dir: Path) -> Path:
    """``results.md`` and ``results.csv`` plus the plots, from the finished runs' logs."""
    from cory.plots import draw_suite

    output_dir = Path(output_dir)
    description, results = collect(output_dir)
    rows = results_table(description, results)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    if all(row.get("sweep_value") is None for row in rows):
        columns.remove("sweep_value")
    lines = [f"# Suite `{description['name']}`", "",
             "Mean ± standard deviation over seeds of the held-out evaluation after the last "
             "iteration (task reward, KL to the reference summed over response tokens).", "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_format(row.get(c)) for c in columns) + " |" for row in rows]
    (output_dir / "results.md").write_text("\n".join(lines) + "\n")
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    flat = []
    for column in columns:
        flat += [f"{column} mean", f"{column} std"] if isinstance(rows[0].get(column), tuple) else [column]
    writer.writerow(flat)
    for row in rows:
        cells = []
        for column in columns:
            value = row.get(column)
            cells += list(value) if isinstance(value, tuple) else [value]
        writer.writerow(cells)
    (output_dir / "results.csv").write_text(buffer.getvalue())
    draw_suite(output_dir, description, results)
    return output_dir / "results.md"
