"""Running moments and the score scaling, normalisation and clipping of TRL's PPO."""

from __future__ import annotations

import torch


class RunningMoments:
    """Mean and variance of every value seen so far, merged batch by batch (Chan et al.)."""

    def __init__(self) -> None:
        self.mean = 0.0
        self.var = 1.0
        self.count = 0

    @property
    def std(self) -> float:
        """Bessel-corrected standard deviation of everything seen (1.0 before any data)."""
        if self.count < 2:
            return 1.0
        return (self.var * self.count / (self.count - 1)) ** 0.5

    def update(self, values: torch.Tensor) -> None:
        """Merge a batch of values into the moments."""
        values = values.detach().double().flatten()
        n = values.numel()
        if n == 0:
            return
        batch_mean = values.mean().item()
        batch_var = values.var(unbiased=False).item()
        total = self.count + n
        delta = batch_mean - self.mean
        merged_sq = self.var * self.count + batch_var * n + delta**2 * self.count * n / total
        self.mean += delta * n / total
        self.var = merged_sq / total
        self.count = total

    def state_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.mean, self.var, self.count = float(state["mean"]), float(state["var"]), int(state["count"])


def transform_scores(
    scores: torch.Tensor,
    moments: RunningMoments,
    use_score_scaling: bool,
    use_score_norm: bool,
    score_clip: float | None,
    eps: float = 1e-8,
) -> torch.Tensor:
    """Scale (``/ std``), normalise (``(x - mean) / std``) and clip scores as TRL 0.7 does.

    The running moments are updated with the raw scores first. Normalisation only applies
    together with scaling, as in TRL.
    """
    if use_score_scaling:
        moments.update(scores)
        scale = moments.std + eps
        scores = (scores - moments.mean) / scale if use_score_norm else scores / scale
    if score_clip is not None:
        scores = scores.clamp(-score_clip, score_clip)
    return scores
