"""Model specs as text: which names are valid, checked without torch.

A spec is a packaged name (``smollm2-135m``, ``gemma3-270m``), a tiny random model
(``tiny-random``, ``tiny-random-gpt2``), a local Hugging Face folder, or a hub id
(``org/name``). ``check_spec_syntax`` needs nothing but the string; ``check_spec`` also
looks at the folder a path names.
"""

from __future__ import annotations

import re
from pathlib import Path

from cory.errors import ConfigError

PACKAGED_NAMES = ("smollm2-135m", "gemma3-270m")
TINY_SPECS = ("tiny-random", "tiny-random-gpt2", "tiny-random-h32")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def describe_specs() -> str:
    """One line listing every kind of valid model spec."""
    names = ", ".join([*PACKAGED_NAMES, *TINY_SPECS])
    return f"{names}, a local model folder (with config.json), or a hub id such as 'org/name'"


def is_path_like(spec: str) -> bool:
    """Whether ``spec`` reads as a filesystem path rather than a name or a hub id."""
    return spec.startswith((".", "/", "~")) or ("/" in spec and not _HUB_ID.match(spec)) or "\\" in spec


def check_spec_syntax(spec: str, key: str = "model") -> None:
    """Raise a ConfigError naming ``key`` unless ``spec`` has the form of a model spec."""
    if spec in PACKAGED_NAMES or spec in TINY_SPECS or _HUB_ID.match(spec) or is_path_like(spec):
        return
    raise ConfigError(f"{key}: unknown model spec '{spec}'. Valid: {describe_specs()} "
                      f"(a folder in the working directory: './{spec}')")


def check_spec(spec: str, key: str = "model") -> None:
    """``check_spec_syntax``, and a folder ``spec`` names must exist and hold a config.json."""
    check_spec_syntax(spec, key)
    if spec in PACKAGED_NAMES or spec in TINY_SPECS:
        return
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ConfigError(f"{key}: folder '{spec}' has no config.json; point it at a saved model")
        return
    if is_path_like(spec):
        raise ConfigError(f"{key}: folder '{spec}' does not exist; point it at a saved model. "
                          f"Valid: {describe_specs()}")
