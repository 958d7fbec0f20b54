"""An agent's learning state in a checkpoint folder: ``<name>.safetensors`` and metadata."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from safetensors.torch import load_file

from cory.agents.learner import LearnerState
from cory.checkpoint import save_tensors


def write_learner_state(learner: LearnerState, folder: Path, name: str, writes: bool = True) -> dict[str, Any]:
    """Write ``learner``'s tensors as ``<name>.safetensors`` into checkpoint folder ``folder``
    (only if ``writes``: rank 0 of a sharded agent; every rank gathers); return its metadata."""
    tensors, meta = learner.state_dict()
    if writes:
        save_tensors(Path(folder), name, tensors)
    return meta


def read_learner_state(learner: LearnerState, folder: Path, name: str, meta: dict[str, Any]) -> None:
    """Restore from checkpoint folder ``folder`` and the metadata ``write_learner_state`` returned."""
    learner.load_state_dict(load_file(str(Path(folder) / f"{name}.safetensors")), meta)
