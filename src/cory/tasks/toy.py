"""A toy task for tests and smoke runs: write as many copies of a target token as you can.

Prompts are short random letter strings; the reward is the fraction of the response made
of ``task.target``. A tiny random model starts near zero and PPO raises it within seconds.
"""

from __future__ import annotations

import random
import string

from cory.config.schema import TaskConfig
from cory.tasks.base import DEFAULT_REWARDS, Task
from cory.tasks.shown import answer_join_for
from cory.types import Prompt


def random_prompts(n: int, seed: int) -> list[Prompt]:
    rng = random.Random(seed)
    return [Prompt("".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 8))))
            for _ in range(n)]


def build_toy(config: TaskConfig) -> Task:
    return Task(
        name="toy",
        train=random_prompts(config.n_train, seed=1),
        test=random_prompts(config.n_test, seed=2),
        default_reward=DEFAULT_REWARDS["toy"],
        observer_template=config.observer_template or "{answers}|{query}",
        revise_template=config.revise_template or "{answers}||{query}",
        join=answer_join_for(config, "\n", verbatim=True, stop_strings=config.stop_strings or []),
    )
