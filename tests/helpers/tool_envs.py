"""Environments for tests/test_envs.py, importable by ``env.class`` (``helpers.tool_envs:...``)."""

from __future__ import annotations

from cory.envs.base import Step
from cory.types import Prompt


class Counter:
    """TRL's environment_factory style: public methods are tools, reset may return text."""

    def __init__(self, start: int = 0) -> None:
        self.start = start
        self.value = start

    def reset(self, prompt: str) -> str:
        self.value = self.start
        return f"Count to 3. Task: {prompt}"

    def increment(self, by: int = 1) -> int:
        """Add ``by`` to the counter."""
        self.value += by
        return self.value

    def get_reward(self) -> float:
        return 1.0 if self.value == 3 else 0.0


class ThreeTurns:
    """cory's protocol: done after the third action, rewarded at the end only."""

    def reset(self, prompt: Prompt) -> str:
        self.turns = 0
        return " [3 turns]"

    def step(self, action: str) -> Step:
        self.turns += 1
        return Step(f"turn {self.turns} seen", reward=1.0 if self.turns == 3 else 0.0, done=self.turns == 3)


class Broken:
    """Fails on a reply that says 'boom', and answers with the wrong type on 'wrong'."""

    def reset(self, prompt: Prompt) -> str:
        return ""

    def step(self, action: str):
        if "boom" in action:
            raise RuntimeError("exploded")
        if "wrong" in action:
            return "not a Step"
        return Step("fine", done=True, reward=1.0)
