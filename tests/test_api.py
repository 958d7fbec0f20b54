"""The Python API as a notebook user calls it: own reward, own prompts, twice in one process."""

from __future__ import annotations

import json

import datasets
import pytest

import cory
from cory.errors import ConfigError
from cory.rewards.base import RewardError

SETTINGS = {"model": "tiny-random", "steps": 2, "seed": 0, "device": "cpu", "threads": 1, "eval_every": 1,
            "task": {"name": "toy", "n_test": 4}, "generation": {"max_new_tokens": 4},
            "ppo": {"batch_size": 4, "mini_batch_size": 4, "ppo_epochs": 1, "learning_rate": 1e-2},
            "eval": {"n_prompts": 4}, "log": {"tensorboard": False, "progress": False}}
PROMPTS = [f"prompt number {i}" for i in range(16)]


def count_a(prompts, responses):
    return [r.count("a") / max(1, len(r)) for r in responses]


def test_train_takes_a_callable_and_a_list_and_runs_twice_in_one_process(tmp_path):
    first = cory.train({**SETTINGS, "output_dir": str(tmp_path / "one")}, reward_fn=count_a, prompts=PROMPTS)
    second = cory.train({**SETTINGS, "output_dir": str(tmp_path / "two")}, reward_fn=count_a, prompts=PROMPTS)
    assert isinstance(first, cory.TrainResult) and first.output_dir == tmp_path / "one"
    assert first.final_models == [tmp_path / "one" / "final" / "agent0"]
    assert (first.final_models[0] / "config.json").exists()
    assert [r["step"] for r in first.rows] == [0, 1, 2]
    # same seed, same data: the second run in this process is the first one again
    stable = lambda metrics: {k: v for k, v in metrics.items() if not k.startswith("time/")}
    assert stable(second.metrics) == stable(first.metrics)


def test_a_dataset_with_answers_reaches_the_reward_as_labels(tmp_path):
    seen_labels: list[str] = []

    def graded(prompts, responses, labels):
        seen_labels.extend(labels)
        return [float(len(r) > 0) for r in responses]

    rows = datasets.Dataset.from_dict({"prompt": PROMPTS, "answer": [str(i) for i in range(16)]})
    config = cory.load_config(None, [f"{k}={v}" for k, v in
                                     {"model": "tiny-random", "steps": 1, "threads": 1, "eval_every": 0,
                                      "ppo.batch_size": 4, "ppo.mini_batch_size": 4, "eval.n_prompts": 2,
                                      "generation.max_new_tokens": 3, "log.tensorboard": False,
                                      "log.progress": False, "output_dir": tmp_path / "run"}.items()])
    result = cory.train(config, reward_fn=graded, prompts=rows, eval_prompts=[{"query": "q", "label": "gold"}] * 2,
                        overrides=["seed=3"])
    assert set(seen_labels) <= {str(i) for i in range(16)} | {"gold"} and "gold" in seen_labels
    assert len([label for label in seen_labels if label != "gold"]) == 4  # one training batch
    assert "eval/task_reward" in result.metrics


def test_bad_prompts_and_a_missing_reward_name_the_argument(tmp_path):
    config = {**SETTINGS, "output_dir": str(tmp_path / "run")}
    with pytest.raises(ConfigError, match=r"prompts: no prompts given"):
        cory.train(config, reward_fn=count_a, prompts=[])
    with pytest.raises(ConfigError, match=r"prompts\[1\]: a row needs a text column named one of prompt"):
        cory.train(config, reward_fn=count_a, prompts=[{"prompt": "x"}, {"body": "y"}])
    with pytest.raises(ConfigError, match=r"reward_fn: expected a function"):
        cory.train(config, reward_fn=3, prompts=PROMPTS)
    with pytest.raises(ConfigError, match=r"reward_fn: your own prompts need a reward"):
        cory.train(config, prompts=PROMPTS)


def test_a_reward_that_returns_text_is_refused_with_the_rows_index(tmp_path):
    config = {**SETTINGS, "output_dir": str(tmp_path / "run")}
    with pytest.raises(RewardError, match=r"returned '1.5' \(str\) for response 0; return numbers, not text"):
        cory.train(config, reward_fn=lambda prompts, responses: ["1.5"] * len(responses), prompts=PROMPTS)


def test_a_run_that_failed_before_its_first_iteration_can_be_rerun_in_the_same_folder(tmp_path, capsys):
    """A notebook user whose reward raised fixes it and runs the cell again: no resume=auto."""
    config = {**SETTINGS, "output_dir": str(tmp_path / "run")}

    def broken(prompts, responses):
        raise ValueError("typo in my reward")

    with pytest.raises(RewardError, match="typo in my reward"):
        cory.train(config, reward_fn=broken, prompts=PROMPTS)
    assert (tmp_path / "run" / "config.yaml").exists()  # the failed start left its folder
    result = cory.train(config, reward_fn=count_a, prompts=PROMPTS)
    assert [r["step"] for r in result.rows] == [0, 1, 2]
    assert "stopped before its first iteration ended" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="already holds a run; pass resume=auto"):
        cory.train(config, reward_fn=count_a, prompts=PROMPTS)  # a finished run is never overwritten


def test_holding_out_part_of_the_prompts_is_said_at_the_start(tmp_path, capsys):
    config = {**SETTINGS, "steps": 1, "eval": {"n_prompts": 8}, "output_dir": str(tmp_path / "run")}
    cory.train(config, reward_fn=count_a, prompts=[f"prompt {i}" for i in range(8)])
    out = capsys.readouterr().out
    assert "8 given and no eval_prompts: training on 6, evaluating on 2 held out" in out
    assert "eval.n_prompts = 8, but only 2 evaluation prompts exist" in out


def test_the_api_hides_transformers_bars_during_a_run_and_restores_them(tmp_path, capfd):
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()
    cory.train({**SETTINGS, "steps": 1, "output_dir": str(tmp_path / "run")}, reward_fn=count_a, prompts=PROMPTS)
    assert "Writing model shards" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()  # the notebook's own setting is back


def test_a_run_of_the_api_records_its_reward_and_prompts_and_cory_eval_uses_them(tmp_path, capsys):
    """cory eval of the folder evaluates the run's own reward on its own held-out prompts."""
    import yaml

    from cory.cli import main
    from helpers.rewards import length_reward

    run = tmp_path / "named"
    cory.train({**SETTINGS, "steps": 1, "output_dir": str(run)}, reward_fn=length_reward, prompts=PROMPTS)
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["reward"] == {**saved["reward"], "name": "python", "function": "helpers.rewards:length_reward"}
    inputs = json.loads((run / "api_inputs.json").read_text())
    assert inputs["prompts"]["train"] + inputs["prompts"]["eval"] == len(PROMPTS)
    assert main(["eval", str(run)]) == 0
    evaluated = json.loads((run / "eval.json").read_text())
    held_out = [json.loads(line)["query"] for line in (run / "prompts.jsonl").read_text().splitlines()
                if json.loads(line)["split"] == "eval"]
    assert {s["query"] for s in evaluated["samples"]} <= set(held_out)  # its own prompts, not the toy task's
    assert all(s["task_reward"] == pytest.approx(len(s["response"]) / 10.0) for s in evaluated["samples"])
    capsys.readouterr()


def test_cory_eval_refuses_a_run_whose_reward_cannot_be_imported_and_names_the_fix(tmp_path, capsys):
    run = tmp_path / "lambda"
    cory.train({**SETTINGS, "steps": 1, "output_dir": str(run)}, reward_fn=lambda p, r: [0.0] * len(r),
               prompts=PROMPTS)
    from cory.cli import main

    assert main(["eval", str(run)]) == 2
    assert "pass reward.name=python reward.function=module:function" in capsys.readouterr().err
    assert main(["eval", str(run), "reward.name=python", "reward.function=helpers.rewards:length_reward"]) == 0
    (run / "prompts.jsonl").write_text((run / "prompts.jsonl").read_text().replace("prompt number 1", "edited"))
    assert main(["eval", str(run), "reward.name=python", "reward.function=helpers.rewards:length_reward"]) == 2
    assert "is not the file the run was trained on" in capsys.readouterr().err
