"""A model's weights in one shared-memory file that a second process maps once.

The trainer writes every tensor of its policy into the file after an update; the engine's
process, which mapped the same file at start, reads them from there without a copy through
a pipe. Only torch and the standard library are imported: the engine's process may run in
another environment (vLLM's own virtual environment) that holds no other cory dependency.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch

_ALIGN = 64  # bytes: every tensor starts on a cache line


@dataclass(frozen=True)
class Slot:
    """Where one tensor lies in the file: its name, dtype name, shape and byte offset."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=_dtype(self.dtype)).element_size()


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name.removeprefix("torch."))


def _shared_folder() -> str:
    """/dev/shm where it exists (memory, not disk), else the temporary folder."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def layout(tensors: dict[str, torch.Tensor]) -> list[Slot]:
    """The slots of ``tensors``, in order, each aligned to 64 bytes."""
    slots, offset = [], 0
    for name, tensor in tensors.items():
        slot = Slot(name, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), offset)
        slots.append(slot)
        offset += -(-slot.nbytes // _ALIGN) * _ALIGN
    return slots


def _size(slots: list[Slot]) -> int:
    return max((slot.offset + slot.nbytes for slot in slots), default=0) or 1


def _mapped(path: str, size: int) -> torch.Tensor:
    return torch.from_file(path, shared=True, size=size, dtype=torch.uint8)


def _view(buffer: torch.Tensor, slot: Slot) -> torch.Tensor:
    return buffer[slot.offset:slot.offset + slot.nbytes].view(_dtype(slot.dtype)).view(slot.shape)


class SharedWeights:
    """The writing side: a file sized for ``slots``, removed by ``close``."""

    def __init__(self, slots: list[Slot], prefix: str = "cory-weights-") -> None:
        self.slots = slots
        handle, self.path = tempfile.mkstemp(prefix=prefix, dir=_shared_folder())
        os.close(handle)
        self._buffer = _mapped(self.path, _size(slots))

    def write(self, tensors: dict[str, torch.Tensor]) -> None:
        """Copy ``tensors`` (the names and shapes of the layout) into the file."""
        for slot in self.slots:
            _view(self._buffer, slot).copy_(tensors[slot.name].detach())

    def close(self) -> None:
        self._buffer = torch.empty(0, dtype=torch.uint8)
        Path(self.path).unlink(missing_ok=True)


def as_slot(slot: Slot | dict) -> Slot:
    """A slot back from its dict form (how vLLM's RPC passes dataclasses on)."""
    if isinstance(slot, Slot):
        return slot
    return Slot(slot["name"], slot["dtype"], tuple(slot["shape"]), slot["offset"])


def read_shared(path: str, slots: list[Slot] | list[dict]) -> Iterator[tuple[str, torch.Tensor]]:
    """The reading side: ``(name, tensor)`` views into the file at ``path``."""
    slots = [as_slot(slot) for slot in slots]
    buffer = _mapped(path, _size(slots))
    for slot in slots:
        yield slot.name, _view(buffer, slot)
