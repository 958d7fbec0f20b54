"""TensorBoard: scalars in ``<run>/tensorboard``, samples as text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class TensorBoardRun:
    def __init__(self, run_dir: Path, state: dict[str, Any]) -> None:
        from torch.utils.tensorboard import SummaryWriter

        last = state.get("last_step")
        # purge_step drops events a crashed run wrote after its last checkpoint
        self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=last + 1 if last is not None else None)

    def log_metrics(self, step: int, row: dict[str, float]) -> None:
        for key, value in row.items():
            self.writer.add_scalar(key, value, step)

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        self.writer.add_text("samples", "\n\n".join(json.dumps(r, ensure_ascii=False) for r in rows), step)

    def close(self) -> None:
        self.writer.close()
