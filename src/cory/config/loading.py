"""Loading a run's config: defaults < the ``method`` preset < the YAML file (and the files
its ``base:`` names) < ``key=value`` overrides, built into the schema of ``cory.config.schema`` and
checked by ``cory.config.validation``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from cory.config.methods import METHOD_PRESETS, METHODS
from cory.config.schema import RunConfig
from cory.config.tree import build, coerce, deep_merge, parse_override, set_dotted
from cory.config.validation import validate
from cory.errors import ConfigError



def read_config_file(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A config file's mapping, merged over the files its ``base:`` key names (paths
    relative to it), so configs of one task can share their common settings."""
    path = Path(path).resolve()
    if path in _seen:
        raise ConfigError(f"base: '{path}' includes itself through base:")
    data = read_yaml(path)
    bases = data.pop("base", None)
    if bases is None:
        return data
    merged: dict[str, Any] = {}
    for base in [bases] if isinstance(bases, str) else bases:
        if not isinstance(base, str):
            raise ConfigError(f"base: expected a file name or a list of them in '{path}', got {base!r}")
        merged = deep_merge(merged, read_config_file(path.parent / base, (*_seen, path)))
    return deep_merge(merged, data)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML mapping from ``path``, with errors that name the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file '{path}' does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise ConfigError(f"config file '{path}' is not valid YAML: {error}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file '{path}' is not UTF-8 text") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file '{path}' must hold a mapping of keys, got {type(data).__name__}")
    return data


def resolve(raw: dict[str, Any]) -> RunConfig:
    """Apply the method preset under ``raw`` and build the validated config."""
    method = coerce(raw.get("method", "ppo"), str, "method")
    if method not in METHOD_PRESETS:
        raise ConfigError(f"method: unknown method {method!r}; choose one of {', '.join(METHODS)}")
    return validate(build(RunConfig, deep_merge(METHOD_PRESETS[method], {**raw, "method": method})))


def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> RunConfig:
    """Defaults < method preset < YAML file at ``path`` < ``key=value`` overrides."""
    raw = read_config_file(path) if path is not None else {}
    for text in overrides:
        parts, value = parse_override(text)
        set_dotted(raw, parts, value)
    return resolve(raw)
