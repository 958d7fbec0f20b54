"""Where cory keeps what it builds once: converted models, data, trained reward models."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from cory.errors import MissingPackageError

CACHE_ENV = "CORY_CACHE"


def cache_dir(*parts: str) -> Path:
    """``$CORY_CACHE`` (default ``~/.cache/cory``), joined with ``parts``."""
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "cory")
    return root.joinpath(*parts)


def package_folder(module: str, what: str, install: str) -> Path:
    """The installed folder of ``module``, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise MissingPackageError(what, install)
    return Path(next(iter(spec.submodule_search_locations)))
