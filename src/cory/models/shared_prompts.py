"""A batch whose rows repeat prompts (a group of samples per prompt: GRPO, RLOO) runs each
distinct prompt through the model once: its keys and values are computed once and gathered
to every row that shares it, and only the responses run per row. The results equal the
one-pass forward's to float rounding (tests/test_shared_prompts.py)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DistinctPrompts:
    """``first[d]``: a row holding distinct prompt ``d``; ``of_row[r]``: row ``r``'s prompt."""

    first: torch.Tensor
    of_row: torch.Tensor

    @classmethod
    def of(cls, query_ids: torch.Tensor, query_mask: torch.Tensor) -> DistinctPrompts | None:
        """The distinct prompts of a left-padded batch; None when no two rows share one."""
        rows = torch.cat([query_ids, query_mask.to(query_ids.dtype)], dim=1)
        distinct, of_row = torch.unique(rows, dim=0, return_inverse=True)
        if distinct.shape[0] == rows.shape[0]:
            return None
        order = torch.arange(rows.shape[0], device=rows.device)
        first = torch.full((distinct.shape[0],), rows.shape[0], dtype=torch.long, device=rows.device)
        first = first.scatter_reduce(0, of_row, order, reduce="amin")
        return cls(first, of_row)
