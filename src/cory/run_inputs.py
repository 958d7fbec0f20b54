"""What a run made with the Python API was trained on, kept in its folder: the reward
callable's import path (or that it had none) and the prompts with their SHA-256. ``cory eval``
of such a folder uses them, or refuses and names what it needs."""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cory.errors import ConfigError
from cory.tasks.base import Task
from cory.types import Prompt

INPUTS_FILE = "api_inputs.json"
PROMPTS_FILE = "prompts.jsonl"


def import_path(function: Callable[..., Any]) -> str | None:
    """``module:qualname`` when importing it gives back ``function``, else None (a lambda, a
    function defined inside another or in ``__main__``, a callable object)."""
    module, name = getattr(function, "__module__", None), getattr(function, "__qualname__", None)
    if not module or not name or module == "__main__" or "<" in name:
        return None
    try:
        found: Any = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return f"{module}:{name}" if found is function else None


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def record_inputs(run_dir: Path, reward: Callable[..., Any] | None, task: Task | None) -> None:
    """Write ``api_inputs.json`` (and ``prompts.jsonl`` for the caller's own prompts) into
    ``run_dir``: what the config alone cannot say."""
    run_dir.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {}
    if reward is not None:
        record["reward"] = {"function": import_path(reward),
                            "callable": f"{getattr(reward, '__qualname__', type(reward).__name__)} in "
                                        f"{getattr(reward, '__module__', '?')}"}
    if task is not None:
        rows = [{"split": split, "query": p.query, "answer": p.answer, "solution": p.solution}
                for split, prompts in (("train", task.train), ("eval", task.test)) for p in prompts]
        text = "".join(json.dumps(row) + "\n" for row in rows)
        _write_atomically(run_dir / PROMPTS_FILE, text)
        record["prompts"] = {"file": PROMPTS_FILE, "sha256": hashlib.sha256(text.encode()).hexdigest(),
                             "train": len(task.train), "eval": len(task.test)}
    _write_atomically(run_dir / INPUTS_FILE, json.dumps(record, indent=1) + "\n")


def read_inputs(run_dir: Path) -> dict[str, Any]:
    """The record of ``run_dir`` ({} for a run made from a config alone)."""
    path = run_dir / INPUTS_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def recorded_prompts(run_dir: Path, record: dict[str, Any]) -> tuple[list[Prompt], list[Prompt]] | None:
    """The training and evaluation prompts the run was given, checked against their hash;
    None when it used its config's task."""
    if "prompts" not in record:
        return None
    path = run_dir / record["prompts"]["file"]
    if not path.exists():
        raise ConfigError(f"eval: run '{run_dir}' was trained on its own prompts, and {path.name} is missing; "
                          "restore the file or evaluate with cory.train's eval_prompts in Python")
    text = path.read_text(encoding="utf-8")
    if hashlib.sha256(text.encode()).hexdigest() != record["prompts"]["sha256"]:
        raise ConfigError(f"eval: {path} is not the file the run was trained on (its SHA-256 differs from "
                          f"{INPUTS_FILE}'s); restore it")
    rows = [json.loads(line) for line in text.splitlines() if line]
    split = {name: [Prompt(r["query"], r["answer"], r["solution"]) for r in rows if r["split"] == name]
             for name in ("train", "eval")}
    return split["train"], split["eval"]


def check_recorded_reward(run_dir: Path, record: dict[str, Any], function: str | None) -> None:
    """Refuse a run trained with an unnamed callable unless ``reward.function`` names one."""
    reward = record.get("reward")
    if reward is not None and reward["function"] is None and not function:
        raise ConfigError(f"eval: run '{run_dir}' was trained with a Python reward that cannot be imported "
                          f"({reward['callable']}); pass reward.name=python reward.function=module:function")
