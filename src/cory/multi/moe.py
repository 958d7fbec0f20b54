"""MoE baseline (CORY rebuttal R1-2): keep, per query, the answer with the higher value."""

from __future__ import annotations

import torch


def select_by_value(values: torch.Tensor) -> torch.Tensor:
    """For ``[n_agents, batch]`` value estimates, the winning agent of each query."""
    return values.argmax(0)


def gather_selected(per_agent: torch.Tensor, winners: torch.Tensor) -> torch.Tensor:
    """Pick ``per_agent[winner[b], b]`` for each query ``b``."""
    return per_agent[winners, torch.arange(per_agent.shape[1], device=per_agent.device)]
