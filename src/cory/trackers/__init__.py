"""Experiment trackers (``log.report_to``): TensorBoard, Weights & Biases, MLflow, Trackio.

``metrics.jsonl`` stays the source of truth. Every tracker gets each metrics row under the
same names, the resolved config as the run's parameters and the sample completions as a
table; a tracker that fails is switched off and the failure recorded as an event, so a
tracker can never stop a run or lose a metric. Each tracker's run id and the last step it
received live in ``trackers.json`` in the run folder: a resumed run continues the same
tracker run and does not send a step twice.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any, Callable, Protocol

from cory.errors import ConfigError

STATE_FILE = "trackers.json"
EXTRAS = {"wandb": "wandb", "mlflow": "mlflow", "trackio": "trackio", "tensorboard": "tensorboard"}
TRACKERS = ("tensorboard", "wandb", "mlflow", "trackio", "none")


class Tracker(Protocol):
    """One experiment tracker's run."""

    def log_metrics(self, step: int, row: dict[str, float]) -> None: ...

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None: ...

    def close(self) -> None: ...


def check_installed(names: list[str]) -> None:
    """A clear error for a requested tracker whose package is missing."""
    for name in names:
        if name not in TRACKERS:
            raise ConfigError(f"log.report_to: unknown tracker {name!r}; choose from {', '.join(TRACKERS)}")
        module = {"mlflow": "mlflow", "tensorboard": "tensorboard"}.get(name, name)
        if name != "none" and importlib.util.find_spec(module) is None:
            raise ConfigError(f"log.report_to: '{name}' is not installed; pip install 'cory[{EXTRAS[name]}]'")


def numeric(row: dict[str, Any]) -> dict[str, float]:
    """The numbers of a metrics row (booleans and text left out)."""
    return {k: float(v) for k, v in row.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"}


class TrackerSet:
    """The run's trackers, each fenced so that its failure only switches it off."""

    def __init__(self, names: list[str], run_dir: Path, config: dict[str, Any], run_name: str,
                 project: str, tags: list[str], on_failure: Callable[[str, str], None]) -> None:
        self.run_dir = run_dir
        self.on_failure = on_failure
        self.state: dict[str, dict[str, Any]] = self._read_state()
        self.active: dict[str, Tracker] = {}
        for name in dict.fromkeys(n for n in names if n != "none"):
            state = self.state.setdefault(name, {})
            self._guard(name, lambda: self.active.__setitem__(
                name, _open(name, run_dir, config, run_name, project, tags, state)))
        self._write_state()

    def metrics(self, step: int, row: dict[str, Any]) -> None:
        values = numeric(row)
        for name, tracker in list(self.active.items()):
            if step <= self.state[name].get("last_step", -1):
                continue  # sent before a crash; an exact resume recomputed the same row
            if self._guard(name, lambda: tracker.log_metrics(step, values)):
                self.state[name]["last_step"] = step
        self._write_state()

    def samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        for name, tracker in list(self.active.items()):
            if step > self.state[name].get("last_samples_step", -1):
                if self._guard(name, lambda: tracker.log_samples(step, rows)):
                    self.state[name]["last_samples_step"] = step

    def close(self) -> None:
        for name, tracker in list(self.active.items()):
            self._guard(name, tracker.close)
        self.active.clear()
        self._write_state()

    def _guard(self, name: str, action: Callable[[], None]) -> bool:
        try:
            action()
            return True
        except Exception as error:  # a tracker must never stop the run
            self.active.pop(name, None)
            self.on_failure(name, f"{type(error).__name__}: {error}")
            return False

    def _read_state(self) -> dict[str, dict[str, Any]]:
        path = self.run_dir / STATE_FILE
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}

    def _write_state(self) -> None:
        partial = self.run_dir / f".{STATE_FILE}.partial"
        partial.write_text(json.dumps(self.state, indent=1), encoding="utf-8")
        partial.replace(self.run_dir / STATE_FILE)


def _open(name: str, run_dir: Path, config: dict[str, Any], run_name: str, project: str,
          tags: list[str], state: dict[str, Any]) -> Tracker:
    if name == "tensorboard":
        from cory.trackers.tensorboard_run import TensorBoardRun

        return TensorBoardRun(run_dir, state)
    if name == "wandb":
        from cory.trackers.wandb_run import WandbRun

        return WandbRun(run_dir, config, run_name, project, tags, state)
    if name == "mlflow":
        from cory.trackers.mlflow_run import MlflowRun

        return MlflowRun(config, run_name, project, tags, state)
    from cory.trackers.trackio_run import TrackioRun

    return TrackioRun(config, run_name, project, state)
