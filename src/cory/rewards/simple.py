"""Rule-based rewards: the fraction of a target token, the VADER lexicon, user functions."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Callable

from cory.errors import ConfigError, MissingPackageError
from cory.types import Prompt


class TargetFraction:
    """Share of the response's characters covered by copies of ``target`` (0 to 1)."""

    def __init__(self, target: str) -> None:
        if not target:
            raise ConfigError("task.target: the target token must not be empty")
        self.target = target

    def __call__(self, prompts: list[Prompt], responses: list[str]) -> list[float]:
        return [response.count(self.target) * len(self.target) / max(1, len(response))
                for response in responses]


class VaderReward:
    """VADER's compound sentiment (-1 to 1) of query + response (Hutto & Gilbert, 2014)."""

    def __init__(self) -> None:
        try:
            from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer  # only for reward: vader
        except ImportError:
            raise MissingPackageError("The VADER lexicon (vaderSentiment)",
                                      "pip install vaderSentiment==3.3.2") from None
        self.analyzer = SentimentIntensityAnalyzer()

    def __call__(self, prompts: list[Prompt], responses: list[str]) -> list[float]:
        return [self.analyzer.polarity_scores(p.query + r)["compound"]
                for p, r in zip(prompts, responses)]


class CallableReward:
    """A user function as a reward: ``f(prompts: list[str], responses: list[str]) ->
    list[float]``, given the gold answers too as ``labels=`` (one string per prompt, "" where
    there is none) when it takes a ``labels`` argument or ``**kwargs``, as TRL's and
    OpenRLHF's reward functions are."""

    def __init__(self, function: Callable[..., list[float]], name: str = "reward_fn") -> None:
        if not callable(function):
            raise ConfigError(f"{name}: expected a function (prompts, responses) -> scores, got "
                              f"{type(function).__name__}")
        self.function = function
        self.takes_labels = _accepts_keyword(function, "labels")

    def __call__(self, prompts: list[Prompt], responses: list[str]) -> list[float]:
        queries = [p.query for p in prompts]
        if self.takes_labels:
            return self.function(queries, responses, labels=[p.answer or "" for p in prompts])
        return self.function(queries, responses)


def _accepts_keyword(function: Callable[..., object], keyword: str) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: positional only
        return False
    return any(p.kind is p.VAR_KEYWORD or (p.name == keyword and p.kind is not p.POSITIONAL_ONLY)
               for p in parameters)


class PythonReward(CallableReward):
    """A user function named as ``'module:function'`` in the config (``reward.function``);
    nothing else is ever imported or executed on behalf of a config."""

    def __init__(self, dotted: str) -> None:
        module_name, _, attr = dotted.partition(":")
        if not module_name or not attr:
            raise ConfigError(f"reward.function: expected 'module:function', got {dotted!r}")
        if os.getcwd() not in sys.path:  # the console script does not put the working folder there
            sys.path.append(os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise ConfigError(f"reward.function: cannot import module {module_name!r} ({error}); "
                              "run from the folder that holds it or add that folder to PYTHONPATH") from None
        function = getattr(module, attr, None)
        if not callable(function):
            raise ConfigError(f"reward.function: {module_name!r} has no callable {attr!r}")
        super().__init__(function, "reward.function")
