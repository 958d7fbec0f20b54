"""What an agent learns with besides its weights, as one object that saves and restores itself.

The trainable parameters and the value head, the optimiser and its LR schedule, the KL
controller, the score moments, the REINFORCE baseline, the Elastic-Reset EMA and whether
dropout acts. ``state_dict`` gives whole tensors (a sharded agent's are gathered: every rank
must call it) and JSON-able metadata; ``load_state_dict`` restores them, sharding each tensor
as its parameter is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from cory.agents.elastic_reset import ElasticReset
from cory.algorithms.kl import FixedKLController
from cory.algorithms.normalize import RunningMoments
from cory.algorithms.reinforce import MovingAverageBaseline
from cory.distributed.sharding import full, shaped_like


@dataclass
class LearnerState:
    trainable: dict[str, torch.nn.Parameter]
    value_head: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    kl_ctl: FixedKLController
    moments: RunningMoments
    baseline: MovingAverageBaseline | None = None
    elastic: ElasticReset | None = None
    dropout_active: bool = False  # agents.dropout: trl -- train mode from the first update

    def state_dict(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Whole tensors (``param.*``, ``value_head.*``, ``optim.<index>.<slot>``, the EMA's)
        and the metadata of the rest."""
        tensors = {f"param.{name}": full(p.detach()) for name, p in self.trainable.items()}
        tensors.update({f"value_head.{k}": full(v) for k, v in self.value_head.state_dict().items()})
        optimizer = self.optimizer.state_dict()
        for index, slots in optimizer["state"].items():
            for key, value in slots.items():
                tensors[f"optim.{index}.{key}"] = full(value)
        if self.elastic is not None:
            tensors.update(self.elastic.tensors())
        meta = {
            "param_groups": optimizer["param_groups"],
            "scheduler": self.scheduler.state_dict(),
            "kl_ctl": self.kl_ctl.state_dict(),
            "moments": self.moments.state_dict(),
            "baseline": self.baseline.state_dict() if self.baseline else None,
            "elastic_resets": self.elastic.resets if self.elastic else 0,
            "dropout_active": self.dropout_active,
        }
        return tensors, meta

    def load_state_dict(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
        with torch.no_grad():
            for name, param in self.trainable.items():
                param.copy_(shaped_like(param, tensors[f"param.{name}"].to(param.device)))
            for name, param in self.value_head.named_parameters():
                param.copy_(shaped_like(param, tensors[f"value_head.{name}"].to(param.device)))
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        slots: dict[int, dict[str, torch.Tensor]] = {}
        for key, value in tensors.items():
            if key.startswith("optim."):
                _, index, name = key.split(".", 2)
                param = params[int(index)]
                # moments are sharded as their parameter; the step count stays a plain scalar
                sharded = value.shape == param.shape and value.dim() > 0
                slots.setdefault(int(index), {})[name] = shaped_like(param, value.to(param.device)) if sharded else value
        self.optimizer.load_state_dict({"state": slots, "param_groups": meta["param_groups"]})
        self.scheduler.load_state_dict(meta["scheduler"])
        self.kl_ctl.load_state_dict(meta["kl_ctl"])
        self.moments.load_state_dict(meta["moments"])
        if self.baseline is not None:
            self.baseline.load_state_dict(meta["baseline"])
        if self.elastic is not None:
            self.elastic.load_tensors(tensors)
            self.elastic.resets = int(meta["elastic_resets"])
        self.dropout_active = bool(meta.get("dropout_active", False))  # absent before agents.dropout
