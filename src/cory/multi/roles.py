"""Role exchange: which agent plays which role at each iteration.

Exchange moves labels, never weights: agents keep their optimiser state, KL controller,
reward moments and EMA. With N roles the mapping rotates by one every ``swap_every``
iterations; for CORY's two roles that is a swap.
"""

from __future__ import annotations


class RoleSchedule:
    """``agent_for_role(step)[r]`` is the index of the agent playing role ``r``."""

    def __init__(self, n_agents: int, swap_every: int | None) -> None:
        self.n_agents = n_agents
        self.swap_every = swap_every

    def swaps_before(self, step: int) -> int:
        """How many exchanges happened before iteration ``step`` (0-based)."""
        if not self.swap_every or self.n_agents < 2:
            return 0
        return step // self.swap_every

    def exchanges_at(self, step: int) -> bool:
        """Whether roles change hands between iterations ``step - 1`` and ``step``."""
        return step > 0 and self.swaps_before(step) != self.swaps_before(step - 1)

    def agent_for_role(self, step: int) -> list[int]:
        shift = self.swaps_before(step) % self.n_agents
        return [(role + shift) % self.n_agents for role in range(self.n_agents)]
