"""Exact-answer reward for math word problems (the answer extraction is ``cory.tasks.answers``)."""

from __future__ import annotations

from cory.tasks.answers import answers_match, extract_answer
from cory.types import Prompt


class ExactMatchReward:
    """1 for a correct final answer, else 0; plus ``format_weight`` when any answer parses."""

    def __init__(self, format_weight: float = 0.0) -> None:
        self.format_weight = format_weight

    def __call__(self, prompts: list[Prompt], responses: list[str]) -> list[float]:
        scores = []
        for prompt, response in zip(prompts, responses):
            predicted = extract_answer(response)
            correct = answers_match(predicted, prompt.answer or "")
            scores.append(float(correct) + (self.format_weight if predicted is not None else 0.0))
        return scores
