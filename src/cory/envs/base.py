"""The environment protocol: an episode starts from a query; after each action the
environment answers with an observation, a reward (per turn, or only at the end) and whether
the episode is done.

    class Echo:                                   # the smallest environment there is
        def reset(self, prompt: Prompt) -> str:
            self.target = prompt.answer or ""
            return ""                             # nothing to add to the query
        def step(self, action: str) -> Step:
            done = self.target in action
            return Step("" if done else "Say it again.", reward=float(done), done=done)

An environment instance serves one episode at a time; ``reset`` starts the next.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from cory.errors import ConfigError
from cory.types import Prompt


@dataclass(frozen=True)
class Step:
    """What the environment says after an action: the text the agent is shown next, this
    turn's reward, whether the episode is over, and counts worth logging (``invalid``,
    ``tool_calls``, ...)."""

    observation: str
    reward: float = 0.0
    done: bool = False
    info: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class Environment(Protocol):
    def reset(self, prompt: Prompt) -> str:
        """Start an episode on ``prompt``; return text to show after the query ("" for none)."""
        ...

    def step(self, action: str) -> Step:
        """Take the agent's action (its whole reply this turn)."""
        ...


def checked_step(environment: Environment, action: str) -> Step:
    """``environment.step(action)``, refusing a result that is not a ``Step`` with a finite
    reward, with a message that names the environment and what it returned."""
    result = environment.step(action)
    name = type(environment).__name__
    if not isinstance(result, Step):
        raise TypeError(f"{name}.step returned {type(result).__name__}, not cory.envs.base.Step")
    reward = result.reward
    if not isinstance(reward, (int, float)) or reward != reward or abs(reward) == float("inf"):
        raise TypeError(f"{name}.step returned the reward {result.reward!r}; return a finite number")
    if not isinstance(result.observation, str):
        raise TypeError(f"{name}.step returned the observation {result.observation!r}; return text")
    return result


def class_named(path: str, key: str = "env.class") -> Callable[..., Any]:
    """The class ``module:Class`` names, with a message naming ``key`` when it cannot be found."""
    module_name, _, class_name = path.partition(":")
    if not module_name or not class_name:
        raise ConfigError(f"{key}: {path!r} is not 'module:Class' (e.g. my_envs:Maze)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigError(f"{key}: cannot import module {module_name!r} ({error}); is it on PYTHONPATH?") from None
    found = getattr(module, class_name, None)
    if found is None or not callable(found):
        raise ConfigError(f"{key}: module {module_name!r} has no class {class_name!r}")
    return found
