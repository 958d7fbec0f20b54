"""How earlier answers appear in a later turn's prompt: the one place that turns the replies a
turn is shown into the text its model reads (every task's observer and revise templates, plain
and chat).

A reply as the pipeline keeps it is the decoded response cut at the first stop string, so it
carries what generation left around the answer: the leading space a model writes after
``Answer:``, the blank lines before the ``Question:`` it was cut at, or the start of a stop
string where the length limit cut it. The ``clean`` join shows each answer without them:

- white space at both ends is removed, and so is a trailing line that is the start of a stop
  string (``"#### 8\\n\\nQuest"`` shows as ``"#### 8"``);
- an answer left empty shows as ``EMPTY_ANSWER``, so a template never carries a hole;
- answers are joined with one separator (``task.answer_separator``; by default a blank line
  for tasks whose answers are paragraphs, a line break for one-line continuations).

The ``verbatim`` join shows replies exactly as generated. IMDB uses it: the authors' template
``"{query}{answers}"`` continues the review, so the response's leading space belongs to it;
so does toy, whose answers are token strings. Every task was joined verbatim with a line
break before 2026-12-07; ``task.answer_join=verbatim task.answer_separator='\n'`` reproduces
runs made then.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from cory.config.schema import TaskConfig

EMPTY_ANSWER = "(no answer)"
JOINS = ("clean", "verbatim")


def _without_stop_remnant(text: str, stop_strings: Sequence[str]) -> str:
    """``text`` without a last line that is a proper start of a stop string (what a length
    limit leaves when it cuts a stop string in the middle)."""
    for stop in stop_strings:
        bare = stop.lstrip()
        line_start = text.rfind("\n") + 1
        last_line = text[line_start:]
        if line_start and last_line and len(last_line) < len(bare) and bare.startswith(last_line):
            return text[:line_start]
    return text


@dataclass(frozen=True)
class AnswerJoin:
    """Turns the answers a turn is shown into the text of its template's ``{answers}``."""

    separator: str = "\n\n"
    verbatim: bool = False
    stop_strings: tuple[str, ...] = field(default_factory=tuple)

    def show(self, answer: str) -> str:
        """One answer as a prompt shows it."""
        if self.verbatim:
            return answer
        text = _without_stop_remnant(answer.rstrip(), self.stop_strings).strip()
        return text or EMPTY_ANSWER

    def join(self, answers: Sequence[str]) -> str:
        """Every shown answer, in order, separated by ``separator``."""
        return self.separator.join(self.show(answer) for answer in answers)


def answer_join_for(config: TaskConfig, separator: str, verbatim: bool, stop_strings: Sequence[str]) -> AnswerJoin:
    """The task's join under ``config``'s ``answer_separator`` and ``answer_join`` (each null:
    the task's ``separator`` and ``verbatim``)."""
    chosen = verbatim if config.answer_join is None else config.answer_join == "verbatim"
    return AnswerJoin(separator if config.answer_separator is None else config.answer_separator,
                      chosen, tuple(stop_strings))
