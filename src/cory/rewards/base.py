"""The reward interface: score each (prompt, response) pair with one number."""

from __future__ import annotations

from typing import Protocol

from cory.errors import CoryError
from cory.types import Prompt


class RewardFunction(Protocol):
    def __call__(self, prompts: list[Prompt], responses: list[str]) -> list[float]: ...


class RewardError(CoryError):
    """A reward function raised; the message names the sample that made it fail."""


def score_safely(reward: RewardFunction, prompts: list[Prompt], responses: list[str]) -> list[float]:
    """Call ``reward``; if it raises, find the first failing sample and name it."""
    try:
        scores = list(reward(prompts, responses))
    except CoryError:
        raise  # says what is wrong itself (e.g. a reward server down or a bad answer)
    except Exception as batch_error:
        for prompt, response in zip(prompts, responses):
            try:
                reward([prompt], [response])
            except Exception as error:
                raise RewardError(
                    f"the reward function failed on query {prompt.query!r} with response "
                    f"{response!r}: {type(error).__name__}: {error}") from error
        raise RewardError(f"the reward function failed on the batch: "
                          f"{type(batch_error).__name__}: {batch_error}") from batch_error
    if len(scores) != len(responses):
        raise RewardError(f"the reward function returned {len(scores)} scores for "
                          f"{len(responses)} responses")
    for index, score in enumerate(scores):
        if not _is_number(score):
            raise RewardError(f"the reward function returned {score!r} ({type(score).__name__}) for "
                              f"response {index}; return numbers, not text")
    return [float(s) for s in scores]


def _is_number(value: object) -> bool:
    """Whether ``float(value)`` reads a number the function meant (a string like "1.5" is text)."""
    if isinstance(value, (str, bytes)):
        return False
    try:
        float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return True
