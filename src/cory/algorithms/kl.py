"""Per-token KL estimators and the KL-coefficient controllers (fixed and adaptive)."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

KLEstimator = Literal["kl", "abs", "mse", "full"]
KL_ESTIMATORS: tuple[str, ...] = ("kl", "abs", "mse", "full")


def kl_per_token(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    kind: KLEstimator = "kl",
    full_logprobs: torch.Tensor | None = None,
    full_ref_logprobs: torch.Tensor | None = None,
) -> torch.Tensor:
    """Estimate KL(policy || reference) at each sampled token.

    ``kl``: log p - log q (the unbiased k1 estimator); ``abs``: its absolute value;
    ``mse``: half its square; ``full``: the exact KL over the vocabulary, which needs the
    full log-distributions ``[batch, tokens, vocab]`` of both models.
    """
    if kind == "kl":
        return logprobs - ref_logprobs
    if kind == "abs":
        return (logprobs - ref_logprobs).abs()
    if kind == "mse":
        return 0.5 * (logprobs - ref_logprobs).square()
    if kind == "full":
        if full_logprobs is None or full_ref_logprobs is None:
            raise ValueError("kl_penalty='full' needs the full log-distributions of both models")
        return F.kl_div(full_ref_logprobs, full_logprobs, log_target=True, reduction="none").sum(-1)
    raise ValueError(f"unknown KL estimator {kind!r}; choose one of {KL_ESTIMATORS}")


class FixedKLController:
    """A constant KL coefficient."""

    def __init__(self, value: float) -> None:
        self.value = float(value)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Nothing to adapt."""

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


class AdaptiveKLController(FixedKLController):
    """Proportional controller of Ziegler et al. (2019) that steers the KL towards ``target``.

    ``value *= 1 + clip(kl / target - 1, -0.2, 0.2) * n_steps / horizon``
    """

    def __init__(self, init_value: float, target: float, horizon: float) -> None:
        super().__init__(init_value)
        self.target = float(target)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon
