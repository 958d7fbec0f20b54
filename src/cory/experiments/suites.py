"""Experiment suites, the file: runs x seeds (x a sweep) of one base config.

A suite file names a base config, the seeds, overrides for every run, and named runs
(each a method plus overrides); a ``sweep`` adds one run per value of one key. Every run
config is resolved here, before the first run starts, so a bad method or key fails at once.
``cory.experiments.running`` runs a suite; ``cory.experiments.results`` turns its folder into tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cory.config.loading import read_config_file, read_yaml, resolve
from cory.config.schema import RunConfig
from cory.config.tree import build, deep_merge, option, parse_override, set_dotted
from cory.errors import ConfigError


SUITE_FILE = "suite.json"


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
    level: float = option(0.95, gt=0, lt=1, help="confidence level of the t and bootstrap intervals")
    alpha: float = option(0.05, gt=0, lt=1, help="level of the primary measure's one-sided sign-flip test")
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
    keep_checkpoints: bool = option(
        True, help="false: delete a run's checkpoints/ once its final/ export is written (a CORY run's "
                   "take ~3 GB); the run then cannot be continued to more steps, only rerun")
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


def load_suite(path: str | Path, overrides: Sequence[str] = ()) -> Suite:
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
