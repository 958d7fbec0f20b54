"""What a run ran with: library versions, threads, processor, and the SHA-256 of every weight
file it read (each agent's model, the reward model).

One line is appended to the run folder's ``environment.jsonl`` at every start and resume, so a
rerun of a committed config on another machine can tell whether it scored with the same
reward model and started from the same weights before comparing numbers.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cory
from cory.models.packaged import converted_folder
from cory.models.specs import PACKAGED_NAMES, TINY_SPECS, is_path_like

if TYPE_CHECKING:
    import torch

ENVIRONMENT_FILE = "environment.jsonl"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def weights_sha256(folder: str | Path) -> str | None:
    """SHA-256 over the names and bytes of the weight files in ``folder`` (sorted by name);
    None when ``folder`` is not a local folder with weight files (a hub id, a tiny model)."""
    folder = Path(folder).expanduser()
    files = sorted(p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES) if folder.is_dir() else []
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as handle:
            while block := handle.read(1 << 22):
                digest.update(block)
    return digest.hexdigest()


def processor_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` where there is one)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def model_folder(spec: str) -> str | None:
    """The local folder a model spec is read from (None for tiny models and hub ids)."""
    if spec in TINY_SPECS:
        return None
    if spec in PACKAGED_NAMES:
        return str(converted_folder(spec))
    return spec if is_path_like(spec) else None


def describe_device(device: torch.device) -> str:
    """The device a model lives on, with the GPU's name: ``cpu`` or ``cuda:0 (NVIDIA H200)``."""
    import torch  # heavy: reading configs and suite tables needs no torch

    if device.type != "cuda":
        return str(device)
    index = torch.cuda.current_device() if device.index is None else device.index
    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"


def describe_environment(step: int, threads: int, devices: list[str], models: list[str],
                         reward_source: str | None) -> dict[str, Any]:
    """One ``environment.jsonl`` line: when, from which step, on what, with which weights.

    ``devices`` are where the agents actually live (see ``describe_device``), not the
    configured names such as ``auto``.
    """
    import torch  # heavy: reading configs and suite tables needs no torch
    import transformers  # heavy, as torch

    digests = {spec: weights_sha256(folder) if (folder := model_folder(spec)) else None for spec in set(models)}
    weights: dict[str, dict[str, str | None]] = {
        f"agent{index}": {"spec": spec, "sha256": digests[spec]} for index, spec in enumerate(models)}
    if reward_source is not None:
        weights["reward"] = {"source": reward_source, "sha256": weights_sha256(reward_source)}
    return {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "step": step, "cory": cory.__version__,
            "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "threads": threads, "processor": processor_name(),
            "devices": devices, "weights": weights}


def record_environment(run_dir: Path, entry: dict[str, Any]) -> None:
    """Append ``entry`` to the run's ``environment.jsonl``."""
    with (Path(run_dir) / ENVIRONMENT_FILE).open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")


def resident_memory_gb() -> float:
    """This process's current resident memory (peak, where /proc is not available)."""
    try:
        with open("/proc/self/statm") as handle:
            pages = int(handle.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**30
    except (OSError, ValueError):
        import resource  # POSIX only

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
