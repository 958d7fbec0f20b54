"""Shared prompting for math word problems (GSM8K and the generated arithmetic task).

With a chat model the question becomes a user message asking for the final answer after
``####``; otherwise it is a plain ``Question: ... Answer:`` prompt, optionally after solved
few-shot examples. The reward is exact match on the final number.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from cory.config.schema import TaskConfig
from cory.tasks.answers import check_answers
from cory.tasks.base import DEFAULT_REWARDS, Task
from cory.tasks.shown import answer_join_for
from cory.types import Prompt

INSTRUCTION = "Solve the problem step by step. Write the final answer as a number after '####'."
CHAT_OBSERVER = ("{query}\n\nHere is a proposed solution:\n{answers}\n\n"
                 "Check it step by step and write a correct solution. "
                 "Write the final answer as a number after '####'.")
PLAIN_OBSERVER = "{query} {answers}\nThe solution above may be wrong. A checked solution:"
CHAT_REVISE = ("{query}\n\nHere are earlier solutions:\n{answers}\n\n"
               "Check them step by step and write a correct solution. "
               "Write the final answer as a number after '####'.")
PLAIN_REVISE = "{query} {answers}\nThe solutions above may be wrong. A checked solution:"


@dataclass(frozen=True)
class Problem:
    question: str
    solution: str  # a worked solution ending in '#### <answer>'
    answer: str


def wants_chat(config: TaskConfig, tokenizer: PreTrainedTokenizerBase | None) -> bool:
    if config.chat_template is not None:
        return config.chat_template
    return tokenizer is not None and getattr(tokenizer, "chat_template", None) is not None


def format_prompts(problems: list[Problem], shots: list[Problem], chat: bool) -> list[Prompt]:
    """Prompts for ``problems``; ``shots`` are solved examples put in front of each."""
    if chat:
        prefix = "".join(f"{s.question}\n{s.solution}\n\n" for s in shots)
        return [Prompt(f"{prefix}{p.question}\n{INSTRUCTION}", p.answer, p.solution) for p in problems]
    prefix = "".join(f"Question: {s.question}\nAnswer: {s.solution}\n\n" for s in shots)
    return [Prompt(f"{prefix}Question: {p.question}\nAnswer:", p.answer, p.solution) for p in problems]


def math_task(name: str, config: TaskConfig, train: list[Problem], test: list[Problem],
              tokenizer: PreTrainedTokenizerBase | None) -> Task:
    chat = wants_chat(config, tokenizer)
    shots = train[: config.few_shot]
    stop_strings = config.stop_strings if config.stop_strings is not None else ["Question:"]
    return Task(
        name=name,
        train=format_prompts(train[config.few_shot:], shots, chat),
        test=format_prompts(test[: config.n_test], shots, chat),
        default_reward=DEFAULT_REWARDS[name],
        observer_template=config.observer_template or (CHAT_OBSERVER if chat else PLAIN_OBSERVER),
        revise_template=config.revise_template or (CHAT_REVISE if chat else PLAIN_REVISE),
        join=answer_join_for(config, "\n\n", verbatim=False, stop_strings=stop_strings),
        chat=chat,
        checker=check_answers,
        stop_strings=stop_strings,
    )
