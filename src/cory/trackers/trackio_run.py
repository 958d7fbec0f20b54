"""Trackio (Hugging Face's local-first tracker): a run per training run in project
``log.project``, stored under ``TRACKIO_DIR``; ``trackio show`` opens its dashboard."""

from __future__ import annotations

from typing import Any

from cory.trackers.wandb_run import SAMPLE_COLUMNS


class TrackioRun:
    def __init__(self, config: dict[str, Any], run_name: str, project: str, state: dict[str, Any]) -> None:
        import trackio

        self.trackio = trackio
        resume = "allow" if state.get("name") else "never"
        state["name"] = run_name
        self.run = trackio.init(project=project, name=run_name, config=config, resume=resume, embed=False,
                                auto_log_gpu=False, auto_log_cpu=False)

    def log_metrics(self, step: int, row: dict[str, float]) -> None:
        self.run.log(row, step=step)

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        table = self.trackio.Table(columns=list(SAMPLE_COLUMNS),
                                   data=[[row.get(c) for c in SAMPLE_COLUMNS] for row in rows])
        self.run.log({"samples": table}, step=step)

    def close(self) -> None:
        self.run.finish()
