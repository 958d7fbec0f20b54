"""Final answers of math word problems: extract the number a solution ends on, compare it.

Extraction survives real model output: ``#### 42``, ``\\boxed{42}``, "the answer is $1,234.50",
"42 apples.", "-3", "3/4", trailing units and punctuation. Preference order: the last
``####`` answer, then the last ``\\boxed{}``, then the last "answer is / answer:" phrase,
then the last number anywhere.
"""

from __future__ import annotations

import re
from fractions import Fraction

from cory.types import Prompt

_NUMBER = r"-?\$?\s*(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?|-?\$?\s*\.\d+"
_NUMBER_RE = re.compile(_NUMBER)
_HASHES = re.compile(r"####\s*(" + _NUMBER + ")")
_BOXED = re.compile(r"\\boxed\s*\{\s*(?:\\text\{)?\s*(" + _NUMBER + ")")
_PHRASE = re.compile(r"answer(?:\s+is)?\s*[:=]?\s*(?:\*\*)?\s*(" + _NUMBER + ")", re.IGNORECASE)


def normalise_number(text: str) -> str | None:
    """A canonical string for a number (``'$1,234.50'`` -> ``'1234.5'``), or None."""
    cleaned = text.replace("$", "").replace(",", "").replace(" ", "").strip()
    try:
        value = Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None
    return str(value.numerator) if value.denominator == 1 else format(float(value), ".10g")


def extract_answer(text: str) -> str | None:
    """The final numeric answer of a model's solution, normalised, or None."""
    text = text.replace("\u2212", "-")  # a typographic minus sign
    for pattern in (_HASHES, _BOXED, _PHRASE):
        matches = pattern.findall(text)
        if matches:
            return normalise_number(matches[-1])
    numbers = _NUMBER_RE.findall(text)
    return normalise_number(numbers[-1]) if numbers else None


def answers_match(predicted: str | None, gold: str) -> bool:
    """Numeric equality of two answers (to 1e-6)."""
    if predicted is None:
        return False
    gold_norm = normalise_number(gold)
    if gold_norm is None:
        return predicted.strip() == gold.strip()
    return abs(float(Fraction(predicted)) - float(Fraction(gold_norm))) < 1e-6


def gold_answer(solution: str) -> str | None:
    """The answer after ``####`` in a GSM8K reference solution."""
    found = _HASHES.findall(solution)
    return normalise_number(found[-1]) if found else None


def check_answers(prompts: list[Prompt], responses: list[str]) -> list[bool]:
    """Whether each response's extracted answer equals its prompt's gold answer."""
    return [answers_match(extract_answer(r), p.answer or "") for p, r in zip(prompts, responses)]
