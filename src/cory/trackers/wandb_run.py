"""Weights & Biases: a run per training run (resumed by id), files under ``<run>/wandb``.

Offline use: ``WANDB_MODE=offline`` (then ``wandb sync`` uploads later).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

SAMPLE_COLUMNS = ("step", "phase", "role", "agent", "query", "prompt", "response", "task_reward")


class WandbRun:
    def __init__(self, run_dir: Path, config: dict[str, Any], run_name: str, project: str,
                 tags: list[str], state: dict[str, Any]) -> None:
        import wandb

        self.wandb = wandb
        state.setdefault("id", secrets.token_hex(8))
        self.run = wandb.init(project=project, name=run_name, id=state["id"], resume="allow",
                              dir=str(run_dir), config=config, tags=tags, reinit="create_new")

    def log_metrics(self, step: int, row: dict[str, float]) -> None:
        self.run.log(row, step=step)

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        table = self.wandb.Table(columns=list(SAMPLE_COLUMNS),
                                 data=[[row.get(c) for c in SAMPLE_COLUMNS] for row in rows])
        self.run.log({"samples": table}, step=step)

    def close(self) -> None:
        self.run.finish()
