"""TensorBoard: scalars in ``<run>/tensorboard``, the config as hyperparameters and text,
samples as text. Every row is flushed to disk as it is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml


def flat_hparams(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The config as TensorBoard's hyperparameters: dotted keys, numbers and text."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flat_hparams(value, f"{prefix}{key}."))
        elif isinstance(value, (bool, int, float, str)):
            flat[f"{prefix}{key}"] = value
        else:
            flat[f"{prefix}{key}"] = json.dumps(value)
    return flat


class TensorBoardRun:
    def __init__(self, run_dir: Path, config: dict[str, Any], state: dict[str, Any]) -> None:
        from torch.utils.tensorboard import SummaryWriter  # heavy: only when TensorBoard logs
        from torch.utils.tensorboard.summary import hparams  # heavy: only when TensorBoard logs

        last = state.get("last_step")
        # purge_step drops events a crashed run wrote after its last checkpoint
        self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=last + 1 if last is not None else None)
        if last is None:
            experiment, start, end = hparams(flat_hparams(config), {})
            for summary in (experiment, start, end):
                self.writer._get_file_writer().add_summary(summary)
            self.writer.add_text("config", "```\n" + yaml.safe_dump(config, sort_keys=False) + "```", 0)
            self.writer.flush()

    def held_step(self) -> int | None:
        return None  # flushed row by row: it holds what it was sent

    def log_metrics(self, step: int, row: dict[str, float]) -> None:
        for key, value in row.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        self.writer.add_text("samples", "\n\n".join(json.dumps(r, ensure_ascii=False) for r in rows), step)

    def log_model(self, folder: Path) -> bool:
        return False

    def close(self) -> None:
        self.writer.close()
