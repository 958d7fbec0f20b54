"""Rule-based rewards: the fraction of a target token, the VADER lexicon, user functions."""

from __future__ import annotations

import importlib
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
            from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer
        except ImportError:
            raise MissingPackageError("The VADER lexicon (vaderSentiment)",
                                      "pip install vaderSentiment==3.3.2") from None
        self.analyzer = SentimentIntensityAnalyzer()

    def __call__(self, prompts: list[Prompt], responses: list[str]) -> list[float]:
        return [self.analyzer.polarity_scores(p.query + r)["compound"]
                for p, r in zip(prompts, responses)]


class PythonReward:
    """A user function ``f(queries: list[str], responses: list[str]) -> list[float]``.

    Named as ``'module:function'`` in the config (``reward.function``); nothing else is
    ever imported or executed on behalf of a config.
    """

    def __init__(self, dotted: str) -> None:
        module_name, _, attr = dotted.partition(":")
        if not module_name or not attr:
            raise ConfigError(f"reward.function: expected 'module:function', got {dotted!r}")
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise ConfigError(f"reward.function: cannot import module {module_name!r} ({error}); "
                              "is it on PYTHONPATH?") from None
        function = getattr(module, attr, None)
        if not callable(function):
            raise ConfigError(f"reward.function: {module_name!r} has no callable {attr!r}")
        self.function: Callable[[list[str], list[str]], list[float]] = function

    def __call__(self, prompts: list[Prompt], responses: list[str]) -> list[float]:
        return self.function([p.query for p in prompts], responses)
