"""Experiment trackers (``log.report_to``): TensorBoard, Weights & Biases, MLflow, Trackio.

``metrics.jsonl`` stays the source of truth. Every tracker gets each metrics row under the
same names, the resolved config as the run's parameters and the sample completions as a
table. A tracker that fails is switched off, said on the console and recorded as an event,
so a tracker can never stop a run; the run ends with a line per tracker saying what it got.

Each tracker's run id and the last step it received live in ``trackers.json`` in the run
folder. A resumed run reopens the same tracker run, asks the tracker which step it really
holds (a killed process may have taken unsent data with it) and sends every row after that
one again from ``metrics.jsonl``: no hole, and no step twice.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from pathlib import Path
from typing import Any, Callable, Protocol, TypeVar

from cory.errors import ConfigError
from cory.trackers.mlflow_run import MlflowRun
from cory.trackers.tensorboard_run import TensorBoardRun
from cory.trackers.trackio_run import TrackioRun
from cory.trackers.wandb_run import WandbRun

STATE_FILE = "trackers.json"
EXTRAS = {"wandb": "wandb", "mlflow": "mlflow", "trackio": "trackio", "tensorboard": "tensorboard"}
TRACKERS = ("tensorboard", "wandb", "mlflow", "trackio", "all", "none")
T = TypeVar("T")


class Tracker(Protocol):
    """One experiment tracker's run."""

    def held_step(self) -> int | None:
        """The last step the tracker durably holds, where it can tell (None: it cannot, and
        every step it was sent is held, as with a synchronous store)."""

    def log_metrics(self, step: int, row: dict[str, float]) -> None: ...

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None: ...

    def log_model(self, folder: Path) -> bool:
        """Upload a final model folder; False where the tracker keeps no files."""

    def close(self) -> None: ...


def installed_trackers() -> list[str]:
    """``log.report_to: all``: TensorBoard and every optional tracker that is installed."""
    return ["tensorboard", *(name for name in ("wandb", "mlflow", "trackio") if importlib.util.find_spec(name))]


def check_installed(names: list[str]) -> None:
    """A clear error for a requested tracker whose package is missing."""
    for name in names:
        if name not in TRACKERS:
            raise ConfigError(f"log.report_to: unknown tracker {name!r}; choose from {', '.join(TRACKERS)}")
        if name not in ("none", "all") and importlib.util.find_spec(name) is None:
            raise ConfigError(f"log.report_to: '{name}' is not installed; pip install 'cory[{EXTRAS[name]}]'")


def numeric(row: dict[str, Any]) -> dict[str, float]:
    """The numbers of a metrics row (booleans and text left out)."""
    return {k: float(v) for k, v in row.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"}


def within(seconds: float, action: Callable[[], T]) -> T:
    """``action()``, or ``TimeoutError`` once ``seconds`` have passed without its answer (a
    tracker whose server accepts and never answers; the call runs on in a daemon thread and
    whatever it returns later is dropped)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = action()
        except BaseException as error:  # handed to the caller below
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True, name="tracker-start")
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"no answer within log.tracker_timeout ({seconds:g} s)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


class TrackerSet:
    """The run's trackers, each fenced so that its failure only switches it off."""

    def __init__(self, names: list[str], run_dir: Path, config: dict[str, Any], run_name: str,
                 project: str, tags: list[str], on_failure: Callable[[str, str], None],
                 timeout: float = 30.0) -> None:
        self.run_dir = run_dir
        self.on_failure = on_failure
        self.state: dict[str, dict[str, Any]] = self._read_state()
        self.active: dict[str, Tracker] = {}
        self.failed: dict[str, str] = {}
        self.sent: dict[str, int] = {}
        for name in dict.fromkeys(n for n in names if n != "none"):
            state = self.state.setdefault(name, {})
            self._guard(name, lambda: self.active.__setitem__(name, within(
                timeout, lambda: _open(name, run_dir, config, run_name, project, tags, state, timeout))))
        for name, tracker in list(self.active.items()):
            held = self._ask(name, tracker.held_step)
            if held is not None and held < self.state[name].get("last_step", -1):
                self.state[name]["last_step"] = held  # the rest died with the process that sent it
        self._write_state()

    def catch_up(self, rows: list[dict[str, Any]]) -> None:
        """Send each tracker the logged ``rows`` it does not hold (after a resume)."""
        for row in rows:
            if "step" in row:
                self.metrics(int(row["step"]), row, persist=False)
        self._write_state()

    def metrics(self, step: int, row: dict[str, Any], persist: bool = True) -> None:
        values = numeric(row)
        for name, tracker in list(self.active.items()):
            if step <= self.state[name].get("last_step", -1):
                continue  # held already; an exact resume recomputed the same row
            if self._guard(name, lambda: tracker.log_metrics(step, values)):
                self.state[name]["last_step"] = step
                self.sent[name] = self.sent.get(name, 0) + 1
        if persist:
            self._write_state()

    def samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        for name, tracker in list(self.active.items()):
            if step > self.state[name].get("last_samples_step", -1):
                if self._guard(name, lambda: tracker.log_samples(step, rows)):
                    self.state[name]["last_samples_step"] = step

    def model(self, folder: Path) -> list[str]:
        """Upload ``folder`` to every tracker that keeps files; their names."""
        kept = []
        for name, tracker in list(self.active.items()):
            if self._ask(name, lambda: tracker.log_model(folder)):
                kept.append(name)
        return kept

    def summary(self) -> list[str]:
        """One line per requested tracker: what it received, or why it was switched off."""
        lines = []
        for name, state in self.state.items():
            if name in self.failed:
                lines.append(f"{name}: switched off ({self.failed[name]}); metrics.jsonl has every row")
            elif name in self.active:
                last = state.get("last_step")
                lines.append(f"{name}: {self.sent.get(name, 0)} row(s) sent this session"
                             + (f", steps up to {last}" if last is not None else ""))
        return lines

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
            self._switch_off(name, error)
            return False

    def _ask(self, name: str, question: Callable[[], Any]) -> Any:
        try:
            return question()
        except Exception as error:
            self._switch_off(name, error)
            return None

    def _switch_off(self, name: str, error: Exception) -> None:
        self.active.pop(name, None)
        self.failed[name] = f"{type(error).__name__}: {error}"[:500]
        self.on_failure(name, self.failed[name])

    def _read_state(self) -> dict[str, dict[str, Any]]:
        path = self.run_dir / STATE_FILE
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}

    def _write_state(self) -> None:
        partial = self.run_dir / f".{STATE_FILE}.partial"
        partial.write_text(json.dumps(self.state, indent=1), encoding="utf-8")
        partial.replace(self.run_dir / STATE_FILE)


def _open(name: str, run_dir: Path, config: dict[str, Any], run_name: str, project: str,
          tags: list[str], state: dict[str, Any], timeout: float) -> Tracker:
    if name == "tensorboard":
        return TensorBoardRun(run_dir, config, state)
    if name == "wandb":
        return WandbRun(run_dir, config, run_name, project, tags, state, timeout)
    if name == "mlflow":
        return MlflowRun(config, run_name, project, tags, state, timeout)
    return TrackioRun(config, run_name, project, tags, state)
