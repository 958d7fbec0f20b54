"""Trackio (Hugging Face's local-first tracker): a run per training run in project
``log.project``, stored under ``TRACKIO_DIR``; ``trackio show`` opens its dashboard.
Trackio has no tags: they go into the run's config as ``tags``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cory.trackers.wandb_run import SAMPLE_COLUMNS


class TrackioRun:
    def __init__(self, config: dict[str, Any], run_name: str, project: str, tags: list[str],
                 state: dict[str, Any]) -> None:
        import trackio  # optional: the [trackio] extra

        self.trackio, self.project = trackio, project
        resume = "allow" if state.get("name") else "never"
        self.name = state["name"] = state.get("name") or run_name
        self.run = trackio.init(project=project, name=self.name, config={**config, "tags": tags}, resume=resume,
                                embed=False, auto_log_gpu=False, auto_log_cpu=False)

    def held_step(self) -> int | None:
        from trackio.sqlite_storage import SQLiteStorage  # optional: the [trackio] extra

        # a step counts once its metrics row is stored: the sample table of a step is logged
        # before its metrics and may have reached the database alone
        logs = SQLiteStorage.get_logs(self.project, self.name)
        steps = [int(log["step"]) for log in logs if any(k not in ("step", "timestamp", "samples") for k in log)]
        return max(steps, default=-1)

    def log_metrics(self, step: int, row: dict[str, float]) -> None:
        self.run.log(row, step=step)

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        table = self.trackio.Table(columns=list(SAMPLE_COLUMNS),
                                   data=[[row.get(c) for c in SAMPLE_COLUMNS] for row in rows])
        self.run.log({"samples": table}, step=step)

    def log_model(self, folder: Path) -> bool:
        return False  # trackio keeps metrics, not files

    def close(self) -> None:
        self.run.finish()
