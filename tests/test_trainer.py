"""The trainer end to end on tiny models: logs, checkpoints, learning, CLI."""


import re

import pytest

from cory.cli import main
from cory.errors import ConfigError
from cory.logging import progress_status, read_jsonl_rows
from cory.trainer import Trainer
from helpers.training import run_trainer


def train(config):
    trainer = run_trainer(config)
    return trainer, trainer.final


def test_run_writes_metrics_samples_and_final_model(make_config):
    config = make_config()
    _, final = train(config)
    run = config.output_dir
    rows = read_jsonl_rows(__import__("pathlib").Path(run) / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    for key in ("task_reward", "task_reward_std", "kl", "kl_coef", "entropy", "clip_fraction", "approx_kl",
                "value_loss", "explained_variance", "response_length", "time/generate", "time/score",
                "time/update", "agent0/task_reward", "policy/task_reward"):
        assert key in rows[0], key
    assert "eval/task_reward" in rows[0] and "eval/kl" in rows[2] and "eval/task_reward" in rows[3]
    assert "eval/task_reward" in final
    from pathlib import Path
    final_dir = Path(run) / "final" / "agent0"
    assert (final_dir / "config.json").exists() and (final_dir / "value_head.safetensors").exists()
    samples = read_jsonl_rows(Path(run) / "samples.jsonl")
    assert {"query", "response", "task_reward"} <= set(samples[0])
    assert (Path(run) / "config.yaml").exists()


def test_ppo_raises_the_toy_reward(make_config):
    config = make_config(steps=40, eval_every=0, ppo__batch_size=16, ppo__mini_batch_size=8,
                         generation__max_new_tokens=8)
    trainer, _ = train(config)
    rows = [r for r in trainer.rows if "task_reward" in r]
    first = sum(r["task_reward"] for r in rows[:5]) / 5
    last = sum(r["task_reward"] for r in rows[-5:]) / 5
    assert last > first + 0.2, (first, last)


def test_refuses_to_overwrite_a_finished_run(make_config):
    config = make_config(steps=1)
    train(config)
    with pytest.raises(ConfigError, match="already holds a run"):
        Trainer(config).train()


def test_cli_train_end_to_end(tmp_path, capsys):
    config = tmp_path / "toy.yaml"
    config.write_text(
        "model: tiny-random\nsteps: 2\ndevice: cpu\neval_every: 0\n"
        "task: {name: toy, n_test: 4, n_train: 16}\ngeneration: {max_new_tokens: 4}\n"
        "ppo: {batch_size: 4, mini_batch_size: 4, ppo_epochs: 1}\neval: {n_prompts: 4}\n"
        "log: {tensorboard: true, progress: true}\n")
    out = tmp_path / "out"
    assert main(["train", str(config), f"output_dir={out}"]) == 0
    said = capsys.readouterr()
    assert "results:" in said.out
    # not a terminal: one plain line per iteration, with how far the run is and how fast it goes
    lines = [line for line in said.err.splitlines() if line.startswith("step ")]
    assert re.fullmatch(r"step 0: reward [-+][\d.]+  kl [-\d.]+  \[1/2 done, [\d.]+ s/it, \d+ s left\]", lines[0])
    assert re.fullmatch(r"step 1: .*\[2/2 done, [\d.]+ s/it, 0 s left\]", lines[1])
    assert len(read_jsonl_rows(out / "metrics.jsonl")) == 3
    assert any((out / "tensorboard").iterdir())
    assert (out / "final" / "agent0" / "model.safetensors").exists()


def test_a_long_console_line_stays_one_line_when_the_output_is_not_a_terminal(tmp_path, capsys):
    from cory.logging import RunLogger

    logger = RunLogger(tmp_path, total_steps=20)
    team = {"step": 10, "task_reward": 0.2, "kl": 3.0, "eval/task_reward": 0.102, "eval/system/task_reward": 0.031,
            "eval/solo/task_reward": 0.05, "eval/agent1/solo/task_reward": 0.04}
    logger.metrics(10, team)
    logger.close()
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(line) > 80 and line.startswith("step 10: reward +0.200") and line.endswith(" s left]")


def test_progress_shows_training_rows_and_the_final_evaluation_row_without_nan():
    status, label, done = progress_status(4, {"step": 4, "task_reward": 0.5, "kl": 1.25, "eval/task_reward": 0.25})
    # the console names a row by its step, as metrics.jsonl, events and errors do (from 0)
    assert (status, label, done) == ("reward +0.500  kl 1.250  eval +0.250", "step 4", 5)
    status, label, done = progress_status(25, {"step": 25, "eval/task_reward": 0.9})
    assert (status, label, done) == ("eval +0.900", "final evaluation (step 25, after 25 iterations)", 25)
    # several agents: the system's answer first, then each agent alone, then every turn's mean
    team = {"step": 10, "task_reward": 0.2, "kl": 3.0, "eval/task_reward": 0.102, "eval/system/task_reward": 0.031,
            "eval/solo/task_reward": 0.05, "eval/agent1/solo/task_reward": 0.04}
    assert progress_status(10, team)[0] == "reward +0.200  kl 3.000  eval system +0.031  solo +0.050  all turns +0.102"
    # a faulted iteration is a step whose update was skipped, never "the final evaluation"
    status, label, done = progress_status(3, {"step": 3, "fault": 1.0, "fault_reason": "non-finite reward"})
    assert (status, label, done) == ("fault: non-finite reward (update skipped)", "step 3", 4)


def test_the_pace_counts_from_where_this_process_started():
    from cory.logging import Pace, duration

    now = [100.0]
    pace = Pace(total=20, start=5, clock=lambda: now[0])  # resumed at iteration 5
    assert pace.describe(5) == "5/20 done"
    now[0] += 30.0  # two iterations in 30 s
    assert pace.describe(7) == "7/20 done, 15.0 s/it, 3.2 min left"
    assert [duration(s) for s in (42, 450, 9000)] == ["42 s", "7.5 min", "2.5 h"]
