"""Deterministic seeds derived from the run seed and where they are used.

Every random draw of a run (data order, sampling, mini-batch order) uses a generator seeded
from ``(seed, step, who, what)``, so iteration ``s`` draws the same numbers whether the run
got there uninterrupted or resumed from a checkpoint.
"""

from __future__ import annotations

import hashlib
import random

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
