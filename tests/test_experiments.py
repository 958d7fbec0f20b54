"""Experiment suites on tiny models: runs x seeds, table, plots, resume, early errors."""

import csv

import pytest
import yaml

from cory.errors import ConfigError
from cory.experiments import load_suite, reward_at_kl, best_before_collapse, run_suite

BASE = {
    "model": "tiny-random", "steps": 2, "device": "cpu", "eval_every": 1,
    "task": {"name": "toy", "n_test": 4, "n_train": 32}, "generation": {"max_new_tokens": 4},
    "ppo": {"learning_rate": 1e-2, "batch_size": 4, "mini_batch_size": 4, "ppo_epochs": 1},
    "eval": {"n_prompts": 4}, "log": {"tensorboard": False, "progress": False, "n_samples": 0},
}


def write_suite(tmp_path, **extra):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    suite = {"name": "tiny", "base": "base.yaml", "output_dir": str(tmp_path / "out"), "seeds": [0, 1],
             "runs": {"ppo": {"method": "ppo"}, "cory": {"method": "cory"}}, **extra}
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    return path


def test_suite_runs_writes_table_and_plots_and_resumes(tmp_path):
    suite = load_suite(write_suite(tmp_path))
    assert len(suite.runs) == 4
    out = tmp_path / "out"
    run_suite(suite, log=lambda _: None, seeds=[1])  # one process's share of the seeds
    assert not (out / "ppo" / "seed0").exists()
    assert [r["seeds"] for r in csv.DictReader((out / "results.csv").open())] == ["1", "1"]
    results = run_suite(suite, log=lambda _: None)
    table = results.read_text()
    assert "| ppo |" in table and "| cory |" in table and "±" in table
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [r["run"] for r in rows] == ["ppo", "cory"] and rows[0]["seeds"] == "2"
    assert (out / "curves.png").stat().st_size > 1000 and (out / "reward_kl.png").exists()
    messages = []
    stamp = (out / "ppo" / "seed0" / "final" / "summary.json").stat().st_mtime
    run_suite(load_suite(write_suite(tmp_path)), log=messages.append)
    assert sum("skipped" in m for m in messages) == 4
    assert (out / "ppo" / "seed0" / "final" / "summary.json").stat().st_mtime == stamp


def test_seeds_outside_the_suite_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"--seeds: \[7\] not among the suite's seeds \[0, 1\]"):
        run_suite(load_suite(write_suite(tmp_path)), log=lambda _: None, seeds=[7])


def test_sweep_expands_one_run_per_value(tmp_path):
    path = write_suite(tmp_path, runs={}, seeds=[0],
                       sweep={"name": "lambda", "key": "collective.lambda", "values": [-1, 0, 1],
                              "run": {"method": "cory"}})
    suite = load_suite(path)
    assert [r.name for r in suite.runs] == ["lambda=-1", "lambda=0", "lambda=1"]
    assert [r.config.collective.lambda_ for r in suite.runs] == [-1.0, 0.0, 1.0]
    run_suite(suite, log=lambda _: None)
    assert (tmp_path / "out" / "sweep.png").exists()


def test_unknown_method_fails_before_any_run(tmp_path):
    path = write_suite(tmp_path, runs={"ppo": {"method": "ppo"}, "bad": {"method": "dpo"}})
    with pytest.raises(ConfigError, match=r"suite run 'bad' \(seed 0\): method: unknown method 'dpo'"):
        load_suite(path)
    assert not (tmp_path / "out").exists()


def test_unknown_suite_key_is_an_error(tmp_path):
    path = write_suite(tmp_path, seed=[3])
    with pytest.raises(ConfigError, match="suite.seed: unknown key. Did you mean 'seeds'"):
        load_suite(path)


def test_reward_at_matched_kl_and_best_before_collapse():
    evals = [{"eval/kl": 0.0, "eval/task_reward": 0.0}, {"eval/kl": 2.0, "eval/task_reward": 1.0},
             {"eval/kl": 12.0, "eval/task_reward": 3.0}]
    assert reward_at_kl(evals, 1.0) == pytest.approx(0.5)
    assert reward_at_kl(evals, 50.0) == pytest.approx(3.0)
    assert best_before_collapse(evals, 10.0) == pytest.approx(1.0)
