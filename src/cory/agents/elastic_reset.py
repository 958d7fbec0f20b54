"""Elastic Reset (Noukhovitch et al., NeurIPS 2023): an EMA of the policy and periodic resets.

After every optimiser step (``elastic_reset.ema_every: optimizer_step``, the Elastic Reset
authors' code) or once per iteration (``iteration``), ``ema = decay * ema + (1 - decay) *
online``. Every ``reset_freq``
iterations the online policy is reset to the EMA and the EMA to the initial weights. The
value head is not averaged or reset (as in the authors' code).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch


class ElasticReset:
    """EMA and reset over a named set of trainable parameters."""

    def __init__(self, params: dict[str, torch.nn.Parameter], decay: float, reset_freq: int) -> None:
        self.params = params
        self.decay = decay
        self.reset_freq = reset_freq
        self.initial = {name: p.detach().clone() for name, p in params.items()}
        self.ema = {name: p.detach().clone() for name, p in params.items()}
        self.resets = 0

    @torch.no_grad()
    def update_ema(self) -> None:
        for name, param in self.params.items():
            self.ema[name].mul_(self.decay).add_(param.detach(), alpha=1.0 - self.decay)

    def due(self, iteration: int) -> bool:
        """Whether to reset after (0-based) ``iteration``: at reset_freq, 2 * reset_freq, ..."""
        return iteration > 0 and iteration % self.reset_freq == 0

    @torch.no_grad()
    def reset(self) -> None:
        """Online <- EMA, then EMA <- initial weights."""
        for name, param in self.params.items():
            param.copy_(self.ema[name])
            self.ema[name].copy_(self.initial[name])
        self.resets += 1

    @contextlib.contextmanager
    def ema_weights(self) -> Iterator[None]:
        """Temporarily run the policy with the EMA weights (for a KL against the EMA)."""
        with torch.no_grad():
            saved = {name: p.detach().clone() for name, p in self.params.items()}
            for name, param in self.params.items():
                param.copy_(self.ema[name])
        try:
            yield
        finally:
            with torch.no_grad():
                for name, param in self.params.items():
                    param.copy_(saved[name])

    def tensors(self) -> dict[str, torch.Tensor]:
        return {f"ema.{name}": t for name, t in self.ema.items()}

    def load_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for name in self.ema:
                self.ema[name].copy_(tensors[f"ema.{name}"])
