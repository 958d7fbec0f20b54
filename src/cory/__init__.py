"""cory: multi-agent RL fine-tuning of language models (CORY, NeurIPS 2024) and its baselines.

The Python API (``cory.api``): ``load_config``, ``train``, ``Trainer``, ``TrainResult``;
imported on first use, so ``import cory`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"
__all__ = ["RunConfig", "TrainResult", "Trainer", "load_config", "train"]

_LAZY = {"load_config": "cory.config.loading", "RunConfig": "cory.config.schema", "train": "cory.api",
         "TrainResult": "cory.api", "Trainer": "cory.trainer"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:  # the API loads torch: only when asked for
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'cory' has no attribute {name!r}")
