"""Helpers of the TRL comparisons: a separate virtual environment per TRL version, and a
copy of the packaged SmolLM2 that old transformers releases can read."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from cory.models.packaged import converted_folder

ROOT = Path(__file__).resolve().parents[1]


def ensure_venv(folder: Path, requirements: list[str]) -> Path:
    """Create ``folder`` with torch 2.13.0 (the wheel on this disk) and ``requirements``."""
    python = folder / "bin" / "python"
    stamp = folder / ".installed"
    wanted = " ".join(requirements)
    if stamp.exists() and stamp.read_text() == wanted:
        return python
    print(f"creating {folder} with {wanted} (once; a few minutes)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    subprocess.run(pip + ["torch==2.13.0"], check=True)
    subprocess.run(pip + requirements, check=True)
    stamp.write_text(wanted)
    return python


def legacy_model_folder(target: Path, name: str = "smollm2-135m") -> Path:
    """The cached fp32 model with a config and ``tokenizer.json`` in the older formats
    (transformers 4.38 reads neither ``rope_parameters`` nor BPE merges as pairs)."""
    source = converted_folder(name)
    target.mkdir(parents=True, exist_ok=True)
    weights = target / "model.safetensors"
    if not weights.exists():
        os.symlink(source / "model.safetensors", weights)
    config = json.loads((source / "config.json").read_text())
    rope = config.pop("rope_parameters", {}) or {}
    config["rope_theta"] = rope.get("rope_theta", 10000.0)
    config["rope_scaling"] = None
    config["torch_dtype"] = config.pop("dtype", "float32")
    (target / "config.json").write_text(json.dumps(config, indent=1))
    shutil.copyfile(source / "generation_config.json", target / "generation_config.json")
    tokenizer = json.loads((source / "tokenizer.json").read_text())
    model = tokenizer["model"]
    model.pop("ignore_merges", None)
    model["merges"] = [" ".join(pair) if isinstance(pair, list) else pair for pair in model["merges"]]
    (target / "tokenizer.json").write_text(json.dumps(tokenizer))
    special = json.loads((source / "tokenizer_config.json").read_text())
    tokens = {k: special[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token") if k in special}
    (target / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 8192, **tokens}))
    (target / "special_tokens_map.json").write_text(json.dumps(tokens))
    return target


def run_worker(python: Path, script: str, payload: dict) -> dict:
    """Run ``script`` (Python source) in another environment; it prints one JSON line."""
    worker = ROOT / ".bench-worker.py"
    worker.write_text(script)
    try:
        result = subprocess.run([str(python), str(worker), json.dumps(payload)], capture_output=True,
                                text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    finally:
        worker.unlink(missing_ok=True)
    if result.returncode != 0:
        raise RuntimeError(f"the TRL worker failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])
