"""Deterministic seeds derived from the run seed and where they are used.

Every random draw of a run (data order, sampling, mini-batch order) uses a generator seeded
from ``(seed, step, who, what)``, so iteration ``s`` draws the same numbers whether the run
got there uninterrupted or resumed from a checkpoint.
"""

from __future__ import annotations

import hashlib
import os
import random
from typing import Any, cast

import numpy as np
import torch


def derive_seed(*parts: object) -> int:
    """A 63-bit seed that depends on every part (stable across processes and machines)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def generator(*parts: object, device: str | torch.device = "cpu") -> torch.Generator:
    """A torch generator seeded by ``derive_seed(*parts)``."""
    return torch.Generator(device=device).manual_seed(derive_seed(*parts))


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (for library code that uses the global generators)."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """Python's and NumPy's global generator states, JSON-able (for checkpoints)."""
    version, internal, gauss = random.getstate()
    np_state = cast(tuple, np.random.get_state(legacy=True))
    return {"python": [version, list(internal), gauss],
            "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])]}


def torch_rng_tensors() -> dict[str, torch.Tensor]:
    """torch's CPU generator state and, once CUDA is in use, every GPU's."""
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        tensors.update({f"cuda.{i}": state for i, state in enumerate(torch.cuda.get_rng_state_all())})
    return tensors


def set_rng_state(state: dict[str, Any], torch_states: dict[str, torch.Tensor]) -> None:
    """Restore what ``rng_state`` and ``torch_rng_tensors`` saved."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch_states["torch"])
    cuda = [torch_states[f"cuda.{i}"] for i in range(len(torch_states)) if f"cuda.{i}" in torch_states]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda[: torch.cuda.device_count()])


def use_deterministic_algorithms() -> None:
    """Deterministic kernels everywhere (``deterministic: true``); the cuBLAS workspace
    setting must be in the environment before cuBLAS starts, so set it first."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
