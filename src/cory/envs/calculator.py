"""A calculator the agent can call while solving a math problem: it writes
``<calc>expression</calc>`` and is shown ``<result>value</result>``. The evaluator reads
numbers, + - * / and parentheses only, bounded in size and depth; anything else gets an
observation that says what was wrong, never an exception."""

from __future__ import annotations

import ast
import re
from fractions import Fraction

from cory.envs.base import Step
from cory.tasks.answers import answers_match, extract_answer
from cory.types import Prompt

CALL = re.compile(r"<calc>(.*?)</calc>", re.DOTALL)
MAX_CHARACTERS = 200
MAX_DEPTH = 20
MAX_MAGNITUDE = 10**12
_OPERATORS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b}


class CalculationError(ValueError):
    """An expression the calculator will not evaluate; the message is shown to the agent."""


def calculate(expression: str) -> str:
    """The value of ``expression`` as text (an integer where exact, else up to 6 decimals)."""
    text = expression.strip().replace("×", "*").replace("÷", "/").replace("−", "-")
    if not text:
        raise CalculationError("empty expression")
    if len(text) > MAX_CHARACTERS:
        raise CalculationError(f"expression longer than {MAX_CHARACTERS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise CalculationError(f"cannot read {text!r}: use numbers, + - * / and parentheses") from None
    value = _value(tree.body, 0)
    return str(value.numerator) if value.denominator == 1 else f"{float(value):.6f}".rstrip("0")


def _value(node: ast.expr, depth: int) -> Fraction:
    if depth > MAX_DEPTH:
        raise CalculationError(f"expression nested deeper than {MAX_DEPTH}")
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return _bounded(Fraction(str(node.value)))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _value(node.operand, depth + 1)
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left, depth + 1), _value(node.right, depth + 1)
        if isinstance(node.op, ast.Div):
            if right == 0:
                raise CalculationError("division by zero")
            return _bounded(left / right)
        operator = _OPERATORS.get(type(node.op))
        if operator is None:
            raise CalculationError("only + - * / are allowed")
        return _bounded(operator(left, right))
    raise CalculationError("only numbers, + - * / and parentheses are allowed")


def _bounded(value: Fraction) -> Fraction:
    if abs(value) > MAX_MAGNITUDE:
        raise CalculationError(f"a value beyond {MAX_MAGNITUDE:.0e}")
    return value


class CalculatorEnvironment:
    """A math problem with a calculator: a turn whose reply calls ``<calc>`` is answered with
    the result; a turn without a call ends the episode, rewarded 1 if its final answer is right."""

    def __init__(self) -> None:
        self.gold = ""

    def reset(self, prompt: Prompt) -> str:
        self.gold = prompt.answer or ""
        return ""

    def step(self, action: str) -> Step:
        calls = CALL.findall(action)
        if not calls:
            right = answers_match(extract_answer(action), self.gold)
            return Step("", reward=float(right), done=True)
        try:
            shown = f"<result>{calculate(calls[-1])}</result>"
            invalid = 0.0
        except CalculationError as error:
            shown, invalid = f"<result>error: {error}</result>", 1.0
        return Step(shown, info={"tool_calls": 1.0, "invalid": invalid})
