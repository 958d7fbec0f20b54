"""What an agent holds between ``generate`` and ``update``: this iteration's kept rollouts,
one per round in round order, and the largest gap between the rollout engine's log-probs
and the policy's over them."""

from __future__ import annotations

from cory.batches import Rollout
from cory.errors import CoryError


class HeldTurns:
    """The kept turns of one agent's iteration."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.rollouts: list[Rollout] = []
        self.sampler_logprob_gap: float | None = None  # vLLM's log-probs against the policy's

    def keep(self, rollout: Rollout, round_: int, gap: float | None) -> None:
        """Hold ``rollout`` as round ``round_``'s turn (round 0 starts a new iteration's set)."""
        if round_ == 0:
            self.rollouts, self.sampler_logprob_gap = [], None
        elif round_ != len(self.rollouts):
            raise CoryError(f"{self.name}: asked to keep round {round_} while holding {len(self.rollouts)} "
                            "turn(s) of this iteration; turns are kept in round order from 0")
        self.rollouts.append(rollout)
        gaps = [g for g in (self.sampler_logprob_gap, gap) if g is not None]
        self.sampler_logprob_gap = max(gaps, default=None)

    def take(self) -> tuple[Rollout, list[int]]:
        """Every held turn as one batch, with each turn's size; the agent holds nothing after."""
        if not self.rollouts:
            raise CoryError(f"{self.name}: update() called without a rollout; call generate() first")
        sizes = [turn.size for turn in self.rollouts]
        rollout, self.rollouts = Rollout.concat(self.rollouts), []
        return rollout, sizes
