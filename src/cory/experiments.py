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
from cory.preflight import check_environment
from cory.stats import (MIN_SEEDS_FOR_VERDICT, Interval, Trajectory, bootstrap_mean, common_levels, kl_at_reward,
                        paired_difference, paired_values, reward_at_kl, sign_flip_p)

SUITE_FILE = "suite.json"
EXTRA_COLUMNS = ("eval/pioneer/task_reward", "eval/observer/task_reward", "eval/system/task_reward")


@dataclass
class SweepConfig:
    name: str = option(help="label of the swept quantity, e.g. lambda")
    key: str = option(help="dotted config key, e.g. collective.lambda")
    values: list[Any] = option(help="one run per value")
    run: dict[str, Any] = option({}, help="method and overrides of every sweep run")


@dataclass
class AnalysisConfig:
    trajectory: str = option(
        "eval", help="metric prefix of the (KL, reward) trajectory compared, e.g. eval/solo: each "
                     "agent on its own on the plain query, averaged over agents")
    reference: str | None = option(None, help="run name every other run is compared with, paired by seed")
    pairs: list[list[str]] = option([], help="further [a, b] comparisons (a - b), paired by seed")
    rows: list[str] = option([], help="further final eval metrics reported per run")
    level: float = option(0.95, gt=0, lt=1, help="confidence level of the bootstrap intervals")
    resamples: int = option(10000, ge=100, help="bootstrap resamples")


@dataclass
class SuiteConfig:
    name: str = option(help="suite name")
    base: str = option(help="config file every run starts from (relative to the suite file)")
    output_dir: str = "runs/suites/default"
    seeds: list[int] = option([0])
    overrides: dict[str, Any] = option({}, help="applied to every run (dotted keys allowed)")
    runs: dict[str, dict[str, Any]] = option(
        {}, help="name -> method and overrides; 'base' (a config file) and 'seeds' (a subset) per run")
    sweep: SweepConfig | None = None
    collapse_kl: float = option(10.0, gt=0, help="'before collapse' means eval KL at most this")
    analysis: AnalysisConfig = option(AnalysisConfig)


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
    bases, run_seeds = {}, {}
    for name, spec, _ in named:
        if not isinstance(spec, dict):
            raise ConfigError(f"suite.runs.{name}: expected a mapping with 'method' and overrides")
        spec = dict(spec)
        own_base = spec.pop("base", None)  # a run may start from another config file
        bases[name] = read_config_file(path.parent / own_base) if own_base else base
        run_seeds[name] = spec.pop("seeds", config.seeds)
        if not set(run_seeds[name]) <= set(config.seeds):
            raise ConfigError(f"suite.runs.{name}.seeds: {run_seeds[name]} must be among the suite's "
                              f"seeds {config.seeds}")
    named = [(name, {k: v for k, v in spec.items() if k not in ("base", "seeds")}, value)
             for name, spec, value in named]
    for seed in config.seeds:  # seed-major: every method's first seed finishes early
        for name, spec, value in named:
            if seed not in run_seeds[name]:
                continue
            raw = deep_merge(deep_merge(bases[name], _expand(config.overrides)), _expand(spec))
            raw.update(seed=seed, output_dir=str(Path(config.output_dir) / name / f"seed{seed}"))
            try:
                resolved = resolve(raw)
            except ConfigError as error:
                raise ConfigError(f"suite run '{name}' (seed {seed}): {error}") from None
            suite.runs.append(PlannedRun(name, seed, resolved, value))
    return suite


def is_finished(run: PlannedRun) -> bool:
    return (run.folder / "final" / "summary.json").exists()


def run_suite(suite: Suite, log: Callable[[str], None] = print, seeds: list[int] | None = None,
              names: list[str] | None = None) -> Path:
    """Run every unfinished run (only those of ``seeds`` and ``names``, if given, so that
    several processes or machines can share a suite), then write the results table and the
    plots from every run finished so far."""
    from cory.trainer import Trainer

    unknown = sorted(set(seeds or ()) - set(suite.config.seeds))
    if unknown:
        raise ConfigError(f"--seeds: {unknown} not among the suite's seeds {suite.config.seeds}")
    unknown_names = sorted(set(names or ()) - set(suite.names()))
    if unknown_names:
        raise ConfigError(f"--runs: {unknown_names} not among the suite's runs {suite.names()}")
    for run in suite.runs:  # this machine can run every selected run: fail before the first starts
        if (seeds is None or run.seed in seeds) and (names is None or run.name in names) and not is_finished(run):
            check_environment(run.config)
    suite.output_dir.mkdir(parents=True, exist_ok=True)
    description = suite.output_dir / SUITE_FILE
    scratch = description.with_name(f".{SUITE_FILE}.{os.getpid()}")
    scratch.write_text(json.dumps(_describe(suite), indent=1))
    scratch.replace(description)
    for number, run in enumerate(suite.runs, start=1):
        label = f"[{number}/{len(suite.runs)}] {run.name} seed {run.seed}"
        if (seeds is not None and run.seed not in seeds) or (names is not None and run.name not in names):
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
        "analysis": to_dict(suite.config.analysis),
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

    def trajectory(self, prefix: str) -> Trajectory:
        """The held-out ``(kl, reward)`` evaluations of ``prefix`` in time order."""
        return [(r[f"{prefix}/kl"], r[f"{prefix}/task_reward"]) for r in self.evals
                if f"{prefix}/kl" in r and f"{prefix}/task_reward" in r]


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


def best_before_collapse(trajectory: Trajectory, collapse_kl: float) -> float:
    """The highest eval reward among evaluations with KL at most ``collapse_kl``."""
    rewards = [reward for kl, reward in trajectory if kl <= collapse_kl]
    return max(rewards) if rewards else math.nan


LEVEL_FRACTIONS = (0.25, 0.5, 0.75)


def per_seed_measures(description: dict[str, Any], results: list[RunResult]) -> dict[str, dict[str, dict[int, float]]]:
    """``{run name: {measure: {seed: value}}}``: final reward and KL of the analysed
    trajectory, KL at reward levels and reward at KL levels that every run reaches, the same
    at levels every run *of the seed* reaches (for paired comparisons: runs of one seed share
    their data order and their starting evaluation), the best reward before collapse, and the
    further rows the suite asks for."""
    analysis = AnalysisConfig(**description.get("analysis", {}))
    prefix = analysis.trajectory
    trajectories = {(r.name, r.seed): r.trajectory(prefix) for r in results}
    reward_levels = common_levels(list(trajectories.values()), 1, LEVEL_FRACTIONS)
    kl_levels = common_levels(list(trajectories.values()), 0, LEVEL_FRACTIONS)
    of_seed: dict[int, list[Trajectory]] = {}
    for (_, seed), path in trajectories.items():
        of_seed.setdefault(seed, []).append(path)
    seed_reward_levels = {seed: common_levels(paths, 1, LEVEL_FRACTIONS) for seed, paths in of_seed.items()}
    seed_kl_levels = {seed: common_levels(paths, 0, LEVEL_FRACTIONS) for seed, paths in of_seed.items()}
    measures: dict[str, dict[str, dict[int, float]]] = {}
    for run in results:
        path = trajectories[(run.name, run.seed)]
        values = {
            "final task reward": run.final.get(f"{prefix}/task_reward", math.nan),
            "final KL": run.final.get(f"{prefix}/kl", math.nan),
            **{f"KL at reward {level:.3f}": kl_at_reward(path, level) for level in reward_levels},
            **{f"reward at KL {level:.2f}": reward_at_kl(path, level) for level in kl_levels},
            **{f"KL at the seed's reward level {fraction:.0%}": kl_at_reward(path, level)
               for fraction, level in zip(LEVEL_FRACTIONS, seed_reward_levels[run.seed])},
            **{f"reward at the seed's KL level {fraction:.0%}": reward_at_kl(path, level)
               for fraction, level in zip(LEVEL_FRACTIONS, seed_kl_levels[run.seed])},
            f"best reward (KL <= {description['collapse_kl']:g})": best_before_collapse(path, description["collapse_kl"]),
        }
        for key in [*EXTRA_COLUMNS, *analysis.rows, *sorted(k for k in run.final if k.startswith("eval/pass@"))]:
            if key in run.final:
                values[key.removeprefix("eval/")] = run.final[key]
        for label, value in values.items():
            measures.setdefault(run.name, {}).setdefault(label, {})[run.seed] = value
    return measures


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


def comparisons(description: dict[str, Any], results: list[RunResult]) -> list[dict[str, Any]]:
    """Paired-by-seed differences (a - b) of every measure, with intervals and verdicts."""
    analysis = AnalysisConfig(**description.get("analysis", {}))
    measures = per_seed_measures(description, results)
    pairs = [(name, analysis.reference) for name in measures if analysis.reference and name != analysis.reference]
    pairs += [(a, b) for a, b in analysis.pairs]
    rows = []
    for a, b in pairs:
        if a not in measures or b not in measures:
            continue
        for label in measures[a]:
            if label not in measures[b]:
                continue
            difference = paired_difference(measures[a][label], measures[b][label], analysis.level, analysis.resamples)
            p_value = sign_flip_p(paired_values(measures[a][label], measures[b][label]))
            rows.append({"comparison": f"{a} - {b}", "measure": label, "difference": difference,
                         "seeds": difference.n, "sign-flip p": "" if math.isnan(p_value) else f"{p_value:.3f}",
                         "verdict": difference.verdict()})
    return rows


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
        cells = []
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
    from cory.plots import draw_suite

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
             "interpolated, where it first reaches a level every run reaches. 'The seed's level q' is "
             "such a level for the runs of one seed only (q of the way from the highest start to the "
             "lowest peak among them): runs of a seed share data order and starting evaluation, so "
             "these are the measures to compare paired by seed.", ""]
    lines += _markdown(rows, columns)
    compared = comparisons(description, results)
    if compared:
        lines += ["", f"## Paired differences (by seed, {percent} bootstrap interval)", "",
                  f"A difference is *shown* only where its interval excludes zero, over at least "
                  f"{MIN_SEEDS_FOR_VERDICT} seeds. The exact sign-flip test's p-value is beside it: "
                  "with few seeds the percentile bootstrap is optimistic, and with n seeds the "
                  "sign-flip p cannot fall below 2 / 2^n (0.0625 for 5 seeds).", ""]
        columns_compared = ["comparison", "measure", "difference", "seeds", "sign-flip p", "verdict"]
        lines += _markdown(compared, columns_compared)
        (output_dir / "comparisons.csv").write_text(_csv(compared, columns_compared))
    (output_dir / "results.md").write_text("\n".join(lines) + "\n")
    (output_dir / "results.csv").write_text(_csv(rows, columns))
    draw_suite(output_dir, description, results)
    return output_dir / "results.md"


RUN_FILES = ("metrics.jsonl", "config.yaml", "final/summary.json")


def export_suite(output_dir: Path, destination: Path) -> Path:
    """Copy what a suite's analysis needs, small enough to commit: its tables and plots, and
    each finished run's metrics, config and final summary (no weights, no checkpoints).
    ``cory plot DESTINATION`` redraws everything from the copy."""
    import shutil

    output_dir, destination = Path(output_dir), Path(destination)
    description = json.loads((output_dir / SUITE_FILE).read_text())
    for run in description["runs"]:
        source = Path(run["folder"])
        target = destination / source.relative_to(output_dir)
        run["folder"] = str(target)
        if (source / "final" / "summary.json").exists():
            for name in RUN_FILES:
                (target / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source / name, target / name)
    destination.mkdir(parents=True, exist_ok=True)
    (destination / SUITE_FILE).write_text(json.dumps(description, indent=1))
    return write_results(destination)
