"""The precondition probe: which answer each condition shows, its numbers on a constructed
model, and the command end to end on the tiny model."""

from __future__ import annotations

import json

import pytest

from cory.answers import extract_answer
from cory.cli import main
from cory.config import TaskConfig
from cory.loading import resolve
from cory.probe import run_probe, shown_answers
from cory.rewards.exact_match import ExactMatchReward
from cory.tasks.arithmetic import build_arithmetic
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


def test_the_probe_measures_a_model_that_copies_what_it_is_shown(tmp_path):
    """A stand-in model that repeats the last number of a shown solution and otherwise
    answers 0: right 100 %, wrong 0 %, nothing as often as the answer is 0."""
    config = resolve({"model": "tiny-random", "task": {"name": "arithmetic", "n_test": 12},
                      "eval": {"n_prompts": 12, "samples_per_prompt": 2}, "output_dir": str(tmp_path)})
    task = build_arithmetic(TaskConfig(name="arithmetic", n_train=30, n_test=12, few_shot=0, chat_template=False))
    asked: list[str] = []

    def copy_the_shown_answer(prompts: list[str]) -> list[str]:
        asked.extend(prompts)
        return [f"#### {extract_answer(p.split('Answer:')[-1]) or 0}" for p in prompts]

    rows = {row.condition: row for row in run_probe(config, copy_the_shown_answer, task, ExactMatchReward())}
    zeros = sum(q.answer == "0" for q in task.test) / len(task.test)
    assert rows["nothing"].accuracy == pytest.approx(zeros)
    assert rows["right"].accuracy == 1.0 and rows["wrong"].accuracy == 0.0
    assert rows["right"].difference == pytest.approx(1.0 - zeros)
    assert rows["right"].low <= rows["right"].difference <= rows["right"].high
    assert rows["wrong"].difference == pytest.approx(-zeros)
    assert len(asked) == 3 * 12 * 2  # three conditions, each query twice
    assert all(q.solution in p for q, p in zip(task.test, asked[24:48:2]))  # the observer saw the gold solution


def test_cory_probe_runs_on_the_tiny_model_and_writes_its_table(tmp_path, capsys):
    config = tmp_path / "probe.yaml"
    config.write_text("model: tiny-random\ndevice: cpu\ntask: {name: toy, n_test: 8, n_train: 32}\n"
                      "generation: {max_new_tokens: 4}\neval: {n_prompts: 4}\n")
    assert main(["probe", str(config), f"output_dir={tmp_path / 'run'}", "--out", str(tmp_path / "probe")]) == 0
    rows = json.loads((tmp_path / "probe.json").read_text())["rows"]
    assert [row["condition"] for row in rows] == ["nothing", "high", "low"]
    assert all(0.0 <= row["reward"] <= 1.0 for row in rows)
    assert "| high: its highest-reward answer of 4 to the plain query |" in (tmp_path / "probe.md").read_text()
    assert "tiny-random on toy" in capsys.readouterr().out
