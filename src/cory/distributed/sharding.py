"""One agent sharded over the ranks of its own process group with FSDP2 (``agents.shards``).

Every rank holds 1/k of each decoder layer's weights and of the rest of the policy (LM head,
embeddings, value head); optimiser slots are sharded alike. What each rank does:

- sampling: every rank gathers the whole policy once (``gathered``) and samples the *whole*
  batch with the same seeded generator, so every rank holds the same rollout (and the same
  lengths: ranks never wait on each other mid-sequence). The frozen reference is replicated.
- update: each mini-batch is split by rows (rank r takes rows r, r+k, ...). A rank's loss is
  its token mean times its share of the mini-batch's tokens times k, and FSDP averages the
  gradients over the k ranks, so the step equals one process's on the whole mini-batch
  (gloo cannot sum: ``set_force_sum_reduction_for_comms`` left the average in place).
  Statistics are token-weighted means over every rank.
- checkpoints and exports hold full tensors, written by rank 0 in the one-process format:
  a sharded run resumes into a plain one and the other way round.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

from cory.errors import CoryError


@dataclass(frozen=True)
class Shards:
    """This process's place among the ranks that hold one agent."""

    rank: int
    world: int

    @classmethod
    def of_process_group(cls, expected: int) -> Shards:
        if not dist.is_available() or not dist.is_initialized():
            raise CoryError(f"agents.shards: {expected} ranks per agent need a process group; run with "
                            "backend: ray (one worker group per agent), which starts it")
        if dist.get_world_size() != expected:
            raise CoryError(f"agents.shards: {expected}, but this process group has "
                            f"{dist.get_world_size()} ranks")
        return cls(dist.get_rank(), dist.get_world_size())

    @property
    def writes(self) -> bool:
        """Whether this rank writes files (rank 0 only)."""
        return self.rank == 0

    def rows(self, rows: torch.Tensor) -> torch.Tensor:
        """This rank's rows of a mini-batch."""
        return rows[self.rank::self.world]

    def from_first(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank (any picklable object; the others pass None)."""
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def total(self, value: float) -> float:
        """The sum of ``value`` over every rank (on the GPU under NCCL, which has no CPU path)."""
        device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
        summed = torch.tensor([value], dtype=torch.float64, device=device)
        dist.all_reduce(summed)
        return summed.item()


def decoder_layers(lm: nn.Module) -> list[nn.Module]:
    """The repeated blocks of a Hugging Face model (its ``_no_split_modules`` classes)."""
    names = set(getattr(lm, "_no_split_modules", None) or [])
    base = getattr(lm, "get_base_model", lambda: lm)()  # peft wraps the model
    names |= set(getattr(base, "_no_split_modules", None) or [])
    layers = [m for m in lm.modules() if type(m).__name__ in names]
    if not layers:
        raise CoryError(f"agents.shards: cannot find the decoder layers of {type(base).__name__} "
                        "(it names no _no_split_modules)")
    return layers


def shard_policy(policy: nn.Module) -> None:
    """FSDP2 over each decoder layer and the whole policy (LM head, embeddings, value head).
    FSDP averages gradients over the ranks; the loss carries each rank's share times the
    number of ranks (``Shards.loss_weight``), so the average is the whole mini-batch's gradient."""
    from torch.distributed.fsdp import FSDPModule, fully_shard  # loaded only when an agent is sharded

    for layer in decoder_layers(cast(nn.Module, policy.lm)):
        fully_shard(layer)
    fully_shard(policy)
    # FSDP sets itself up on the root's first forward; sampling calls the LM directly, so
    # make that first forward a one-token pass through the root.
    device = next(policy.parameters()).device
    token = torch.zeros(1, 1, dtype=torch.long, device=device)
    with torch.no_grad():
        policy(token, torch.ones_like(token), token, torch.ones_like(token), with_entropy=False)
    for module in policy.modules():  # the root keeps its weights gathered after a forward
        if isinstance(module, FSDPModule):
            module.reshard()


@contextlib.contextmanager
def gathered(policy: nn.Module) -> Iterator[None]:
    """Every sharded module's full weights held for the block (sampling calls the LM's own
    forward, which the root's hooks do not see), resharded after."""
    from torch.distributed.fsdp import FSDPModule  # loaded only when an agent is sharded

    modules = [m for m in policy.modules() if isinstance(m, FSDPModule)]
    for module in modules:
        module.unshard()
        module.set_reshard_after_forward(False)
    try:
        yield
    finally:
        for module in modules:
            module.set_reshard_after_forward(True)
            module.reshard()


def full(tensor: torch.Tensor) -> torch.Tensor:
    """A sharded tensor gathered whole (a collective: every rank must call it); others as they
    are. The gathered tensor is copied out of FSDP's padded buffer, which safetensors refuses."""
    return tensor.full_tensor().clone() if isinstance(tensor, DTensor) else tensor


def shaped_like(template: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """``value`` (whole) sharded as ``template`` is; unchanged where ``template`` is not sharded."""
    if isinstance(template, DTensor):
        return distribute_tensor(value.to(template.dtype), template.device_mesh, template.placements)
    return value
