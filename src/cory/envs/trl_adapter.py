"""Environments written for TRL's ``GRPOTrainer(environment_factory=...)``: a class whose
public methods are tools, a ``reset`` that may return text, and optionally ``get_reward``.

The agent calls a tool by writing ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
(the JSON convention chat templates render for tool calls) and is shown
``<tool_response>result</tool_response>``. A reply without a call is the agent's last turn:
the episode ends with ``get_reward()`` if the class has it, else 0. A tool that raises, an
unknown tool or unreadable JSON is shown to the agent as an error, as TRL does."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from typing import Any

from cory.envs.base import Step
from cory.types import Prompt

CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
NOT_TOOLS = {"reset", "get_reward"}


def tools_of(environment: object) -> dict[str, Callable[..., Any]]:
    """The public methods TRL would expose as tools."""
    return {name: method for name, method in inspect.getmembers(environment, callable)
            if not name.startswith("_") and name not in NOT_TOOLS and inspect.ismethod(method)}


class ToolEnvironment:
    """A TRL-style environment class behind cory's protocol."""

    def __init__(self, wrapped: object) -> None:
        self.wrapped = wrapped
        self.tools = tools_of(wrapped)

    def reset(self, prompt: Prompt) -> str:
        reset = getattr(self.wrapped, "reset", None)
        if reset is None:
            return ""
        accepted = inspect.signature(reset).parameters
        offered = {"prompt": prompt.query, "answer": prompt.answer}
        shown = reset(**{key: value for key, value in offered.items() if key in accepted})
        return shown if isinstance(shown, str) else ""

    def step(self, action: str) -> Step:
        calls = CALL.findall(action)
        if not calls:
            get_reward = getattr(self.wrapped, "get_reward", None)
            return Step("", reward=float(get_reward()) if get_reward is not None else 0.0, done=True)
        return Step(f"<tool_response>{self._call(calls[-1])}</tool_response>", info={"tool_calls": 1.0})

    def _call(self, text: str) -> str:
        try:
            call = json.loads(text)
            name, arguments = call["name"], call.get("arguments", {})
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
            return 'error: a tool call is {"name": ..., "arguments": {...}} in JSON'
        tool = self.tools.get(name)
        if tool is None:
            return f"error: no tool {name!r}; the tools are {', '.join(sorted(self.tools))}"
        try:
            return str(tool(**arguments))
        except Exception as error:  # the agent sees what went wrong and may try again
            return f"error: {type(error).__name__}: {error}"
