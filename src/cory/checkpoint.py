"""Atomic checkpoints of a whole run, and finding the latest good one.

A checkpoint is a folder ``checkpoints/step-NNNNNNNN`` holding tensors as safetensors and
everything else as JSON / YAML, plus ``manifest.json`` with the size and SHA-256 of every
file. It is written into a temporary folder, fsynced, then renamed into place, so a crash
leaves either the complete folder or none. A folder that fails its manifest is reported
and skipped in favour of the previous good one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from cory.errors import CoryError

CRASH_ENV = "CORY_CRASH_AT"  # fault injection for tests: "checkpoint:<step>" dies mid-write
FORMAT = "cory-checkpoint"
VERSION = 1
MANIFEST = "manifest.json"
_STEP_DIR = re.compile(r"^step-(\d{8})$")


class DiskWriteError(CoryError):
    """A checkpoint or final model could not be written (disk full, no permission)."""


@contextmanager
def writing_into(scratch: Path, what: str) -> Iterator[None]:
    """Turn a failed write into ``scratch`` into a DiskWriteError, removing the half-written
    folder: what was saved before stays intact and a rerun with ``resume=auto`` continues."""
    try:
        yield
    except (OSError, SafetensorError) as error:
        shutil.rmtree(scratch, ignore_errors=True)
        free_gib = shutil.disk_usage(scratch.parent).free / 2**30
        raise DiskWriteError(
            f"could not write {what} into {scratch.parent} ({error}; {free_gib:.1f} GiB free). "
            "Earlier checkpoints are intact: free disk space (or lower keep_last) and rerun "
            "with resume=auto.") from error


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class Checkpoint:
    """A verified checkpoint: its JSON state and text files; tensor files stay on disk for
    their owners (the agents) to read."""

    path: Path
    step: int
    state: dict[str, Any]
    texts: dict[str, str]

    def tensors(self, name: str) -> dict[str, torch.Tensor]:
        return load_file(str(self.path / f"{name}.safetensors"))


def checkpoints_dir(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def step_dir(run_dir: Path, step: int) -> Path:
    """Where the checkpoint after ``step`` iterations lives."""
    return checkpoints_dir(run_dir) / f"step-{step:08d}"


def save_tensors(folder: Path, name: str, tensors: dict[str, torch.Tensor]) -> None:
    """Write ``name.safetensors`` into a checkpoint folder being built."""
    save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()},
              str(folder / f"{name}.safetensors"))


def save_checkpoint(run_dir: Path, step: int, texts: dict[str, str],
                    write: Callable[[Path], dict[str, Any]], keep_last: int) -> Path:
    """Write a checkpoint after ``step`` finished iterations.

    ``write(folder)`` writes the tensor files (each agent writes its own, so that weights
    never leave the process that holds them) and returns the JSON state; the texts, the
    state and the manifest are added here.
    """
    root = checkpoints_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = step_dir(run_dir, step)
    scratch = root / f".partial-{step:08d}-{uuid.uuid4().hex}"
    scratch.mkdir()
    with writing_into(scratch, f"the checkpoint of step {step}"):
        state = write(scratch)
        if os.environ.get(CRASH_ENV) == f"checkpoint:{step}":
            os.kill(os.getpid(), signal.SIGKILL)  # as a crash would: tensors written, no manifest
        for name, text in {**texts, "state.json": json.dumps(state)}.items():
            (scratch / name).write_text(text, encoding="utf-8")
        files = sorted(p for p in scratch.iterdir() if p.is_file())
        manifest = {
            "format": FORMAT, "version": VERSION, "step": step,
            "files": {p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in files},
        }
        (scratch / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        for path in [*files, scratch / MANIFEST]:
            _fsync_file(path)
        _fsync_dir(scratch)
    if final.exists():
        shutil.rmtree(final)
    scratch.rename(final)
    _fsync_dir(root)
    prune(root, keep_last)
    return final


def prune(root: Path, keep_last: int) -> None:
    """Delete all but the newest ``keep_last`` checkpoints, and stale partial folders."""
    for stale in root.glob(".partial-*"):
        shutil.rmtree(stale, ignore_errors=True)
    for old in sorted(step_dirs(root))[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)


def step_dirs(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and _STEP_DIR.match(p.name))


def verify(path: Path) -> str | None:
    """None if the checkpoint at ``path`` is complete and intact, else what is wrong."""
    manifest_path = path / MANIFEST
    if not manifest_path.exists():
        return "no manifest.json (incomplete write)"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "manifest.json is corrupted"
    if manifest.get("format") != FORMAT:
        return "not a cory checkpoint"
    if manifest.get("version") != VERSION:
        return f"checkpoint format version {manifest.get('version')} (this cory reads {VERSION})"
    for name, expected in manifest.get("files", {}).items():
        file = path / name
        if not file.exists():
            return f"{name} is missing"
        if file.stat().st_size != expected["bytes"]:
            return f"{name} has {file.stat().st_size} bytes, expected {expected['bytes']}"
        if _sha256(file) != expected["sha256"]:
            return f"{name} fails its checksum"
    return None


def latest_good(run_dir: Path, report: Callable[[str], None] = print) -> Path | None:
    """The newest checkpoint of ``run_dir`` that verifies; bad ones are reported."""
    for path in reversed(step_dirs(checkpoints_dir(run_dir))):
        problem = verify(path)
        if problem is None:
            return path
        report(f"skipping checkpoint {path}: {problem}")
    return None


def load_checkpoint(path: Path) -> Checkpoint:
    """Load a verified checkpoint (raises ValueError for a bad one)."""
    problem = verify(path)
    if problem is not None:
        raise ValueError(f"checkpoint {path} is not usable: {problem}")
    manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    texts = {name: (path / name).read_text(encoding="utf-8") for name in manifest["files"]
             if not name.endswith(".safetensors") and name != "state.json"}
    state = json.loads((path / "state.json").read_text(encoding="utf-8"))
    return Checkpoint(path, int(manifest["step"]), state, texts)
