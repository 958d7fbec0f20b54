"""The precondition probe: which answer each condition shows, its numbers on a constructed
model, and the command end to end on the tiny model."""

from __future__ import annotations

import json

import pytest

from cory.cli import main
from cory.config.loading import resolve
from cory.config.schema import TaskConfig
from cory.experiments.probe import reply_shape, run_probe, shown_answers
from cory.rewards.exact_match import ExactMatchReward
from cory.tasks.answers import extract_answer
from cory.tasks.arithmetic import build_arithmetic
from cory.tasks.shown import AnswerJoin
from cory.types import Prompt



def test_a_task_with_solutions_is_shown_the_gold_one_and_another_problems():
    queries = [Prompt("q0", "1", "s0 #### 1"), Prompt("q1", "1", "s1 #### 1"), Prompt("q2", "5", "s2 #### 5")]
    shown = shown_answers(queries, [], [])
    assert shown["right"][1] == ["s0 #### 1", "s1 #### 1", "s2 #### 5"]
    # the next query with a different final answer: q0 -> q2, q1 -> q2, q2 -> q0
    assert shown["wrong"][1] == ["s2 #### 5", "s2 #### 5", "s0 #### 1"]


def test_a_task_without_solutions_is_shown_its_own_best_and_worst_answer():
    queries = [Prompt("a"), Prompt("b")]
    shown = shown_answers(queries, [["x", "y", "z"], ["u", "v", "w"]], [[0.1, 0.9, -0.3], [2.0, 1.0, 3.0]])
    assert shown["high"][1] == ["y", "w"]
    assert shown["low"][1] == ["z", "v"]


def arithmetic_probe(tmp_path, problems: int, samples: int):
    """A probe config and an arithmetic task of ``problems`` held-out problems (no example)."""
    config = resolve({"model": "tiny-random", "task": {"name": "arithmetic", "n_test": problems},
                      "eval": {"n_prompts": problems, "samples_per_prompt": samples}, "output_dir": str(tmp_path)})
    task = build_arithmetic(TaskConfig(name="arithmetic", n_train=30, n_test=problems, few_shot=0,
                                       chat_template=False))
    return config, task


def shown_number(prompt: str) -> str:
    """The last number of the answer a prompt shows, '0' when it shows none."""
    return extract_answer(prompt.split("Answer:")[-1]) or "0"


def test_the_probe_measures_a_model_that_copies_what_it_is_shown(tmp_path):
    """A stand-in model that repeats the last number of a shown solution and otherwise
    answers 0: right 100 %, wrong 0 %, nothing as often as the answer is 0."""
    config, task = arithmetic_probe(tmp_path, problems=12, samples=2)
    asked: list[str] = []

    def copy_the_shown_answer(prompts: list[str]) -> list[str]:
        asked.extend(prompts)
        return [f"#### {shown_number(p)}" for p in prompts]

    rows = {row.condition: row for row in run_probe(config, copy_the_shown_answer, task, ExactMatchReward())}
    zeros = sum(q.answer == "0" for q in task.test) / len(task.test)
    assert rows["nothing"].accuracy == pytest.approx(zeros)
    assert rows["right"].accuracy == 1.0 and rows["wrong"].accuracy == 0.0
    assert rows["right"].difference == pytest.approx(1.0 - zeros)
    assert rows["right"].low <= rows["right"].difference <= rows["right"].high
    assert rows["wrong"].difference == pytest.approx(-zeros)
    assert len(asked) == 4 * 12 * 2  # nothing, right, wrong, own; each query twice
    assert all(q.solution in p for q, p in zip(task.test, asked[24:48:2]))  # the observer saw the gold solution
    # own: shown its plain answer ('#### 0'), it repeats it: right exactly where the answer is 0
    assert rows["own"].accuracy == pytest.approx(zeros) and rows["own"].difference == pytest.approx(0.0)
    assert rows["own"].fixes_wrong == 0.0
    assert rows["own"].uses_right == (1.0 if zeros else None)


def test_the_probe_shows_the_gold_solution_as_a_reply_would_carry_it_under_each_join(tmp_path):
    """A stand-in model whose replies carry what generation leaves (a leading space, the blank
    lines before the stop string): the gold solution is shown wearing the same, and the
    verbatim join passes it on while the clean join removes it, on the same draws."""
    config, task = arithmetic_probe(tmp_path, problems=6, samples=1)
    asked: list[str] = []

    def answer_with_leftovers(prompts: list[str]) -> list[str]:
        asked.extend(prompts)
        return [f" It is {shown_number(p)}.\n#### {shown_number(p)}\n\n" for p in prompts]

    verbatim = AnswerJoin(separator="\n\n", verbatim=True)
    rows = run_probe(config, answer_with_leftovers, task, ExactMatchReward(), [verbatim])
    assert [(row.condition, row.join) for row in rows] == [
        ("nothing", ""), ("right", "clean"), ("wrong", "clean"), ("own", "clean"),
        ("right", "verbatim"), ("wrong", "verbatim"), ("own", "verbatim")]
    first = task.test[0]
    clean_right, verbatim_right = asked[6], asked[24]
    assert clean_right == (f"{first.query} {first.solution}\n"
                           "The solution above may be wrong. A checked solution:")
    assert verbatim_right == (f"{first.query}  {first.solution}\n\n\n"
                              "The solution above may be wrong. A checked solution:")
    assert asked[18] == (f"{first.query} It is 0.\n#### 0\n"
                         "The solution above may be wrong. A checked solution:")  # own, clean


def test_reply_shape_is_the_most_common_white_space_at_each_end():
    assert reply_shape([" a\n\n", " b\n\n", "c", " d \n\n"]) == (" ", "\n\n")
    assert reply_shape([]) == ("", "")


def test_cory_probe_runs_on_the_tiny_model_and_writes_its_table(tmp_path, capsys):
    config = tmp_path / "probe.yaml"
    config.write_text("model: tiny-random\ndevice: cpu\ntask: {name: toy, n_test: 8, n_train: 32}\n"
                      "generation: {max_new_tokens: 4}\neval: {n_prompts: 4}\n")
    assert main(["probe", str(config), f"output_dir={tmp_path / 'run'}", "--out", str(tmp_path / "probe")]) == 0
    rows = json.loads((tmp_path / "probe.json").read_text())["rows"]
    assert [row["condition"] for row in rows] == ["nothing", "high", "low", "own"]
    assert all(0.0 <= row["reward"] <= 1.0 for row in rows)
    assert "| high: its highest-reward answer of 4 to the plain query |" in (tmp_path / "probe.md").read_text()
    assert "tiny-random on toy" in capsys.readouterr().out
