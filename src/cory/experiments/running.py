"""Running an experiment suite (``experiments.suites`` reads the file): every run x seed into
one folder, then ``experiments.results`` turns the folder into tables and plots.

Finished runs (``final/summary.json`` present) are not run again; an interrupted run
continues from its last checkpoint when the suite sets ``save_every``.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from cory.config.loading import resolve
from cory.config.preflight import check_environment
from cory.config.tree import deep_merge, to_dict
from cory.errors import ConfigError
from cory.experiments.report import write_results
from cory.experiments.suites import SUITE_FILE, PlannedRun, Suite
from cory.logging import duration
from cory.trainer import Trainer



def is_finished(run: PlannedRun) -> bool:
    return (run.folder / "final" / "summary.json").exists()


def run_suite(suite: Suite, log: Callable[[str], None] = print, seeds: list[int] | None = None,
              names: list[str] | None = None) -> Path:
    """Run every unfinished run (only those of ``seeds`` and ``names``, if given, so that
    several processes or machines can share a suite), then write the results table and the
    plots from every run finished so far."""
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
    selected = [run for run in suite.runs
                if (seeds is None or run.seed in seeds) and (names is None or run.name in names)]
    todo = [run for run in selected if not is_finished(run)]
    started, trained = time.monotonic(), 0
    for run in selected:
        label = f"[{suite.runs.index(run) + 1}/{len(suite.runs)}] {run.name} seed {run.seed}"
        if run not in todo:
            log(f"{label}: finished earlier, skipped")
            _drop_checkpoints(suite, run, log)
            continue
        log(f"{label}: training -> {run.folder} ({_suite_pace(trained, len(todo), time.monotonic() - started)})")
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
        trained += 1
        _drop_checkpoints(suite, run, log)
    return write_results(suite.output_dir)


def _suite_pace(trained: int, todo: int, seconds: float) -> str:
    """Which run of this invocation's ``todo`` is starting and, once one finished, the time left
    at the mean duration of the runs trained so far."""
    where = f"run {trained + 1} of {todo} to train here"
    if trained == 0:
        return where
    return f"{where}; suite ~{duration(seconds / trained * (todo - trained))} left at {duration(seconds / trained)} per run"


def _drop_checkpoints(suite: Suite, run: PlannedRun, log: Callable[[str], None]) -> None:
    """With ``keep_checkpoints: false``, a finished run's checkpoints go (its final/ stays)."""
    checkpoints = run.folder / "checkpoints"
    if suite.config.keep_checkpoints or not is_finished(run) or not checkpoints.is_dir():
        return
    size = sum(path.stat().st_size for path in checkpoints.rglob("*") if path.is_file())
    shutil.rmtree(checkpoints)
    log(f"{run.name} seed {run.seed}: checkpoints removed ({size / 1e9:.2f} GB; keep_checkpoints: false)")


def _describe(suite: Suite) -> dict[str, Any]:
    return {
        "name": suite.config.name,
        "collapse_kl": suite.config.collapse_kl,
        "analysis": to_dict(suite.config.analysis),
        "sweep": suite.config.sweep.name if suite.config.sweep else None,
        "runs": [{"name": r.name, "seed": r.seed, "folder": str(r.folder), "sweep_value": r.sweep_value,
                  "method": r.config.method} for r in suite.runs],
    }
