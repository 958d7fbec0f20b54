"""A task: training and test prompts, the default reward, and the templates of a turn that is
shown earlier answers (the observer's, and the revise template of later rounds)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from cory.errors import CoryError
from cory.tasks.shown import AnswerJoin
from cory.types import Prompt


GENERIC_REVISE_TEMPLATE = "{query}\nEarlier answers:\n{answers}\nA better answer:\n"

DEFAULT_REWARDS = {"imdb": "sentiment", "gsm8k": "exact_match", "arithmetic": "exact_match",
                   "hh": "reward_model", "toy": "target_fraction"}


@dataclass
class Task:
    """What the trainer needs from a task."""

    name: str
    train: list[Prompt]
    test: list[Prompt]
    default_reward: str
    observer_template: str
    join: AnswerJoin = field(default_factory=AnswerJoin)  # how earlier answers appear in a prompt
    chat: bool = False  # whether prompts are chat messages (formatted by each agent's template)
    checker: Callable[[list[Prompt], list[str]], list[bool]] | None = None  # correct answers
    stop_strings: list[str] = field(default_factory=list)  # a response ends at any of these
    revise_template: str = GENERIC_REVISE_TEMPLATE  # rounds > 0: {answers} holds the earlier answers

    def __post_init__(self) -> None:
        if not self.train:
            raise CoryError(f"task '{self.name}': no training prompts; check task.source")
        if not self.test:
            raise CoryError(f"task '{self.name}': no test prompts; lower task.n_test or add data")

    def prompt_for(self, prompt: Prompt, answers: list[str], revising: bool = False) -> str:
        """The prompt of a turn shown ``answers`` to ``prompt``: the plain query when it is
        shown none, else the observer template (first round) or the revise template (later
        rounds, ``revising``)."""
        if not answers:
            return prompt.query
        template = self.revise_template if revising else self.observer_template
        return template.format(query=prompt.query, answers=self.join.join(answers))


def split_train_test(items: list, n_test: int, seed: int = 0) -> tuple[list, list]:
    """Deterministic split: shuffle with ``seed``, keep ``n_test`` (at most a third) for test."""
    shuffled = list(items)
    random.Random(seed).shuffle(shuffled)
    n_test = min(n_test, len(shuffled) // 3) if len(shuffled) > 1 else 0
    return shuffled[n_test:], shuffled[:n_test]
