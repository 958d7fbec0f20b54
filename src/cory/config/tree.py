"""Turning nested dicts (YAML, CLI overrides) into typed dataclasses, with clear errors.

A field may carry bounds in its metadata (``gt``, ``ge``, ``lt``, ``le``) and a ``key``
under which it appears in YAML when its Python name differs (``lambda`` -> ``lambda_``).
Every error names the dotted key and says what would be accepted.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

import yaml

from cory.errors import ConfigError


def option(default: Any = dataclasses.MISSING, *, key: str | None = None, help: str = "",
           **bounds: float) -> Any:
    """A dataclass field with an optional YAML key, bounds and a help text."""
    metadata = {"help": help, "bounds": bounds}
    if key is not None:
        metadata["key"] = key
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    if dataclasses.is_dataclass(default) and isinstance(default, type):
        return dataclasses.field(default_factory=default, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def yaml_key(field: dataclasses.Field) -> str:
    return field.metadata.get("key", field.name)


def _describe(tp: Any) -> str:
    origin = get_origin(tp)
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (list, typing.List):
        return f"a list of {_describe(get_args(tp)[0]).removeprefix('a ').removeprefix('an ')}s"
    if origin in (dict, typing.Dict):
        return "a mapping"
    if _is_optional(tp):
        return _describe(_strip_optional(tp)) + " (or null)"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return str(tp)


def _is_optional(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType) and type(None) in get_args(tp)


def _strip_optional(tp: Any) -> Any:
    rest = [a for a in get_args(tp) if a is not type(None)]
    return rest[0] if len(rest) == 1 else Union[tuple(rest)]


def _type_error(key: str, tp: Any, value: Any) -> ConfigError:
    return ConfigError(f"{key}: expected {_describe(tp)}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class OverrideValue:
    """A CLI value: its raw text, and the text read as YAML. String fields take the raw
    text (``{query}`` is a template, not a YAML mapping); other fields take the YAML."""

    raw: str
    parsed: Any


def _accepts_str(tp: Any) -> bool:
    return tp is str or (_is_optional(tp) and _strip_optional(tp) is str)


def coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against type ``tp``, converting what is safe (``'1e-5'`` -> float)."""
    if isinstance(value, OverrideValue):
        keep_raw = _accepts_str(tp) and value.parsed is not None
        value = value.raw if keep_raw else value.parsed
    if _is_optional(tp):
        if value is None or (isinstance(value, str) and value.lower() in ("null", "none")):
            return None
        return coerce(value, _strip_optional(tp), key)
    origin = get_origin(tp)
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise _type_error(key, tp, value)
    if tp is int:
        if isinstance(value, bool):
            raise _type_error(key, tp, value)
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        raise _type_error(key, tp, value)
    if tp is float:
        if isinstance(value, bool):
            raise _type_error(key, tp, value)
        if isinstance(value, (int, float)):
            result = float(value)
        elif isinstance(value, str):
            try:
                result = float(value)
            except ValueError:
                raise _type_error(key, tp, value) from None
        else:
            raise _type_error(key, tp, value)
        if not math.isfinite(result):
            raise ConfigError(f"{key}: expected a finite number, got {value!r}")
        return result
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise _type_error(key, tp, value)
    if origin is Literal:
        # YAML 1.1 reads a bare off / on as false / true.
        word = ("on" if value else "off") if isinstance(value, bool) else value
        if word in get_args(tp):
            return word
        raise _type_error(key, tp, value)
    if origin in (list, typing.List):
        (item_type,) = get_args(tp)
        if item_type is str and isinstance(value, str):
            value = [value]  # a single name for a list of names (TRL's report_to="wandb")
        if not isinstance(value, (list, tuple)):
            raise _type_error(key, tp, value)
        return [coerce(item, item_type, f"{key}[{i}]") for i, item in enumerate(value)]
    if origin in (dict, typing.Dict):
        if not isinstance(value, dict):
            raise _type_error(key, tp, value)
        return dict(value)
    if dataclasses.is_dataclass(tp):
        return build(typing.cast(type, tp), value, key)
    raise TypeError(f"unsupported config type {tp!r} at {key}")


def _check_bounds(value: Any, bounds: dict[str, float], key: str) -> None:
    if value is None or not bounds:
        return
    items = value if isinstance(value, list) else [value]
    checks = {
        "gt": (lambda v, b: v > b, "greater than"),
        "ge": (lambda v, b: v >= b, "at least"),
        "lt": (lambda v, b: v < b, "less than"),
        "le": (lambda v, b: v <= b, "at most"),
    }
    for item in items:
        for name, bound in bounds.items():
            ok, words = checks[name]
            if not ok(item, bound):
                raise ConfigError(f"{key}: must be {words} {bound:g}, got {item!r}")


def build(cls: type, data: Any, prefix: str = "") -> Any:
    """Build dataclass ``cls`` from mapping ``data``; unknown keys are errors."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping of keys, got {data!r}")
    fields = {yaml_key(f): f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in fields:
            raise unknown_key_error(prefix, str(key), list(fields))
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, field in fields.items():
        if key not in data:
            continue
        dotted = f"{prefix}.{key}" if prefix else key
        value = coerce(data[key], hints[field.name], dotted)
        _check_bounds(value, field.metadata.get("bounds", {}), dotted)
        kwargs[field.name] = value
    return cls(**kwargs)


def unknown_key_error(prefix: str, key: str, valid: list[str]) -> ConfigError:
    dotted = f"{prefix}.{key}" if prefix else key
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return ConfigError(f"{dotted}: unknown key.{hint} Valid keys here: {', '.join(sorted(valid))}")


def to_dict(obj: Any) -> Any:
    """A dataclass tree back to plain data, with YAML keys."""
    if dataclasses.is_dataclass(obj):
        return {yaml_key(f): to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list):
        return [to_dict(v) for v in obj]
    return obj


def parse_override(text: str) -> tuple[list[str], OverrideValue]:
    """``'ppo.learning_rate=1e-5'`` -> ``(['ppo', 'learning_rate'], OverrideValue('1e-5', 1e-05))``."""
    if "=" not in text:
        raise ConfigError(f"override '{text}': expected key=value, e.g. ppo.learning_rate=1e-5")
    key, raw = text.split("=", 1)
    parts = key.strip().split(".")
    if not all(part.strip() for part in parts):
        raise ConfigError(f"override '{text}': the key has an empty part; write a.b.c=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return [part.strip() for part in parts], OverrideValue(raw, value)


def set_dotted(tree: dict, parts: list[str], value: Any) -> None:
    """Set ``tree[a][b][c] = value`` for ``parts = [a, b, c]``, creating mappings as needed."""
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{'.'.join(parts[: i + 1])}: is a value, not a group of keys")
        node = child
    node[parts[-1]] = value


def deep_merge(base: dict, update: dict) -> dict:
    """A new dict: ``base`` with ``update`` merged in, recursively for nested mappings."""
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
