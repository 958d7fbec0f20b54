"""Which training prompts each iteration gets: a pure function of the iteration."""

from __future__ import annotations

import random

from cory.seeding import derive_seed
from cory.types import Prompt


class PromptSampler:
    """Iteration ``s`` gets the prompts at positions ``[s * n, (s + 1) * n)`` of an endless
    stream of seeded epoch permutations: a pure function of ``s``, hence exact on resume."""

    def __init__(self, prompts: list[Prompt], per_step: int, repeat: int, seed: int) -> None:
        self.prompts, self.per_step, self.repeat, self.seed = prompts, per_step, repeat, seed
        self._orders: dict[int, list[int]] = {}

    def _order(self, epoch: int) -> list[int]:
        if epoch not in self._orders:
            order = list(range(len(self.prompts)))
            random.Random(derive_seed("data", self.seed, epoch)).shuffle(order)
            self._orders = {epoch: order}
        return self._orders[epoch]

    def position(self, step: int) -> int:
        return step * self.per_step

    def batch(self, step: int) -> list[Prompt]:
        picked = []
        for position in range(self.position(step), self.position(step) + self.per_step):
            epoch, offset = divmod(position, len(self.prompts))
            picked.append(self.prompts[self._order(epoch)[offset]])
        return [p for p in picked for _ in range(self.repeat)]
