"""Run logs: ``metrics.jsonl`` (one row per iteration), samples, events, trackers, progress.

Each JSONL row is written with one ``write`` of a whole line and flushed, so a crash leaves
at most an incomplete last line, which readers skip and a resumed run rewrites.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from cory.trackers import TrackerSet

METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"
EVENTS_FILE = "events.jsonl"


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else (1e308 if value > 0 else -1e308)
    return value


def json_line(row: dict[str, Any]) -> str:
    return json.dumps({k: _jsonable(v) for k, v in row.items()}, ensure_ascii=False) + "\n"


def read_jsonl_rows(path: Path) -> list[dict[str, Any]]:
    """Complete rows of a JSONL log (an incomplete last line from a crash is skipped)."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def write_jsonl_atomic(path: Path, rows: list[dict[str, Any]]) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text("".join(json_line(r) for r in rows), encoding="utf-8")
    partial.replace(path)



def duration(seconds: float) -> str:
    """``seconds`` as a reader wants it: ``42 s``, ``7.5 min``, ``2.3 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class Pace:
    """Seconds per iteration and the time left, counted from the iteration a process started
    at (a resumed run measures only what it ran itself)."""

    def __init__(self, total: int, start: int, clock: Any = time.monotonic) -> None:
        self.total, self.start, self.clock = total, start, clock
        self.started = clock()

    def describe(self, completed: int) -> str:
        """``step k/N`` with, once an iteration finished here, ``s/it`` and the time left."""
        done = completed - self.start
        if done <= 0:
            return f"{completed}/{self.total} done"
        per_iteration = (self.clock() - self.started) / done
        left = per_iteration * max(self.total - completed, 0)
        return f"{completed}/{self.total} done, {per_iteration:.1f} s/it, {duration(left)} left"


def progress_status(step: int, row: dict[str, Any]) -> tuple[str, str, int]:
    """(status text, line label, iterations completed) for a metrics row. A multi-agent run's
    evaluation shows the system's answer, the agents alone and the mean over every turn
    (docs/guide.md, "Headline metrics"). Iterations are
    numbered from 0 wherever a user reads them (console, metrics, events, errors), so the
    label names the row's own ``step``; the row after the last iteration holds only the
    final evaluation."""
    if row.get("fault"):
        return f"fault: {row.get('fault_reason', '')} (update skipped)", f"step {step}", step + 1
    parts = []
    if "task_reward" in row:
        parts.append(f"reward {row['task_reward']:+.3f}  kl {row.get('kl', float('nan')):.3f}")
    if "eval/agent1/solo/task_reward" in row:  # several agents: the system's answer, each alone, every turn
        parts.append(f"eval system {row['eval/system/task_reward']:+.3f}  solo {row['eval/solo/task_reward']:+.3f}"
                     f"  all turns {row['eval/task_reward']:+.3f}")
    elif "eval/task_reward" in row:
        parts.append(f"eval {row['eval/task_reward']:+.3f}")
    if "task_reward" in row:
        return "  ".join(parts), f"step {step}", step + 1
    return "  ".join(parts), f"final evaluation (step {step}, after {step} iterations)", step


class RunLogger:
    """Writes every log of one run directory."""

    def __init__(self, run_dir: Path, total_steps: int, start_step: int = 0, progress: bool = True) -> None:
        self.run_dir = run_dir
        self._files = {name: open(run_dir / name, "a", encoding="utf-8")
                       for name in (METRICS_FILE, SAMPLES_FILE, EVENTS_FILE)}
        self.trackers: TrackerSet | None = None
        self.console = Console(stderr=True, soft_wrap=True)  # one line per row, however long: greppable logs
        self.pace = Pace(total_steps, start_step)
        self._progress = None
        if progress and self.console.is_terminal:
            self._progress = Progress(
                TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[pace]}"),
                TextColumn("{task.fields[status]}"), console=self.console)
            self._task = self._progress.add_task("train", total=total_steps, completed=start_step,
                                                 status="", pace="")
            self._progress.start()
        self._plain = progress and self._progress is None

    def _append(self, name: str, row: dict[str, Any]) -> None:
        handle = self._files[name]
        handle.write(json_line(row))
        handle.flush()

    def metrics(self, step: int, row: dict[str, Any]) -> None:
        self._append(METRICS_FILE, row)
        if self.trackers is not None:
            self.trackers.metrics(step, row)
        status, label, completed = progress_status(step, row)
        pace = self.pace.describe(completed)
        if self._progress is not None:
            self._progress.update(self._task, completed=completed, status=status,
                                  pace=pace.split(", ", 1)[1] if ", " in pace else "")  # the bar shows k/N
        elif self._plain:
            self.console.print(f"{label}: {status}  [{pace}]", highlight=False)

    def samples(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            self._append(SAMPLES_FILE, row)
        if self.trackers is not None and rows:
            self.trackers.samples(rows[0]["step"], rows)

    def event(self, step: int, kind: str, **details: Any) -> None:
        self._append(EVENTS_FILE, {"step": step, "event": kind, **details})

    def message(self, text: str) -> None:
        self.console.print(text, highlight=False)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
        if self.trackers is not None:
            self.trackers.close()
            for line in self.trackers.summary():
                self.message(f"tracker {line}")
        for handle in self._files.values():
            handle.close()


@contextmanager
def quiet_library_bars() -> Iterator[None]:
    """Hide transformers' per-file bars (loading and writing model shards) inside the block,
    then restore the caller's setting; warnings still show."""
    from transformers.utils import logging as hf_logging  # transformers, ~1 s

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
