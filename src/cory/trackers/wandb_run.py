"""Weights & Biases: a run per training run (resumed by id), files under ``<run>/wandb``.

Offline use: ``WANDB_MODE=offline`` (then ``wandb sync`` uploads later).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from cory.trackers.wandb_records import last_offline_step

SAMPLE_COLUMNS = ("step", "phase", "role", "agent", "query", "prompt", "response", "task_reward")


class WandbRun:
    def __init__(self, run_dir: Path, config: dict[str, Any], run_name: str, project: str,
                 tags: list[str], state: dict[str, Any], timeout: float = 30.0) -> None:
        import wandb  # optional: the [wandb] extra

        self.wandb = wandb
        self.dir = Path(run_dir) / "wandb"
        self.resumed = "id" in state
        state.setdefault("id", secrets.token_hex(8))
        self.run = wandb.init(project=project, name=run_name, id=state["id"], resume="allow",
                              dir=str(run_dir), config=config, tags=tags, reinit="create_new",
                              settings=wandb.Settings(init_timeout=timeout))

    def held_step(self) -> int | None:
        if not self.resumed:
            return None
        if self.run.offline:  # earlier sessions wrote their own offline files: read them
            return last_offline_step(self.dir, self.run.id)
        return self.run.step - 1 if self.run.step > 0 else None  # the server's history counter

    def log_metrics(self, step: int, row: dict[str, float]) -> None:
        self.run.log(row, step=step)

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        table = self.wandb.Table(columns=list(SAMPLE_COLUMNS),
                                 data=[[row.get(c) for c in SAMPLE_COLUMNS] for row in rows])
        self.run.log({"samples": table}, step=step)

    def log_model(self, folder: Path) -> bool:
        artifact = self.wandb.Artifact(f"model-{self.run.id}", type="model")
        artifact.add_dir(str(folder))
        self.run.log_artifact(artifact)
        return True

    def close(self) -> None:
        self.run.finish()
