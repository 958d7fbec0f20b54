"""A generated GSM8K-format task a 135M model can learn on CPU: one- and two-step
addition / subtraction word problems with small numbers, exact-answer reward.

SmolLM2-135M solves almost no GSM8K problem, so this is the CPU-scale objective task:
same prompt format, same answer extraction, same Pass@k, a base accuracy in reach.
"""

from __future__ import annotations

import random

from transformers import PreTrainedTokenizerBase

from cory.config.schema import TaskConfig
from cory.tasks.base import Task
from cory.tasks.math import Problem, math_task

NAMES = ["Tom", "Anna", "Sam", "Lily", "Ben", "Mia", "Max", "Zoe", "Leo", "Ella"]
ITEMS = ["apples", "books", "coins", "marbles", "stickers", "pencils", "cookies", "cards"]


def make_problem(rng: random.Random, max_operand: int) -> Problem:
    """One problem; the answer is never negative."""
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = rng.randint(1, max_operand), rng.randint(1, max_operand)
    kind = rng.choice(["add", "subtract", "two_step"])
    if kind == "add":
        question = f"{name} has {a} {item}. {name} gets {b} more {item}. How many {item} does {name} have now?"
        solution = f"{name} has {a} + {b} = {a + b} {item}.\n#### {a + b}"
        answer = a + b
    elif kind == "subtract":
        a, b = max(a, b), min(a, b)
        question = f"{name} has {a} {item}. {name} gives away {b} {item}. How many {item} does {name} have left?"
        solution = f"{name} has {a} - {b} = {a - b} {item} left.\n#### {a - b}"
        answer = a - b
    else:
        c = rng.randint(1, a + b)
        question = (f"{name} has {a} {item} and buys {b} more, then loses {c}. "
                    f"How many {item} does {name} have?")
        solution = f"{a} + {b} = {a + b}, and {a + b} - {c} = {a + b - c}.\n#### {a + b - c}"
        answer = a + b - c
    return Problem(question, solution, str(answer))


def build_arithmetic(config: TaskConfig, tokenizer: PreTrainedTokenizerBase | None = None) -> Task:
    train_rng, test_rng = random.Random(1), random.Random(2)
    train = [make_problem(train_rng, config.max_operand) for _ in range(config.n_train)]
    test = [make_problem(test_rng, config.max_operand) for _ in range(config.n_test)]
    return math_task("arithmetic", config, train, test, tokenizer)
