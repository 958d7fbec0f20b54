"""Experiment suites on tiny models: runs x seeds, table, plots, resume, early errors."""

import csv

import pytest
import yaml

from cory.errors import ConfigError
from cory.experiments.results import best_before_collapse
from cory.experiments.running import run_suite
from cory.experiments.suites import load_suite


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
    said: list[str] = []
    results = run_suite(suite, log=said.append)
    starts = [m for m in said if "training ->" in m]  # seed 1 is done: the two seed-0 runs are left
    assert starts[0].startswith("[1/4] ppo seed 0") and starts[0].endswith("(run 1 of 2 to train here)")
    assert starts[1].startswith("[2/4] cory seed 0") and "(run 2 of 2 to train here; suite ~" in starts[1]
    table = results.read_text()
    assert "| ppo |" in table and "| cory |" in table and "bootstrap interval" in table
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [r["run"] for r in rows] == ["ppo", "cory"] and rows[0]["seeds"] == "2"
    assert (out / "curves.png").stat().st_size > 1000 and (out / "reward_kl.png").exists()
    messages = []
    stamp = (out / "ppo" / "seed0" / "final" / "summary.json").stat().st_mtime
    run_suite(load_suite(write_suite(tmp_path)), log=messages.append)
    assert sum("skipped" in m for m in messages) == 4
    assert (out / "ppo" / "seed0" / "final" / "summary.json").stat().st_mtime == stamp


def test_a_suite_that_keeps_no_checkpoints_drops_them_once_a_run_is_exported(tmp_path):
    (tmp_path / "saving.yaml").write_text(yaml.safe_dump({**BASE, "save_every": 1}))
    path = write_suite(tmp_path, keep_checkpoints=False, runs={"ppo": {"method": "ppo", "base": "saving.yaml"}})
    messages: list[str] = []
    run_suite(load_suite(path), log=messages.append, seeds=[0])
    run = tmp_path / "out" / "ppo" / "seed0"
    assert (run / "final" / "summary.json").exists() and not (run / "checkpoints").exists()
    assert any("checkpoints removed" in m for m in messages)
    assert "| ppo |" in (tmp_path / "out" / "results.md").read_text()  # the results need no checkpoint
    kept = write_suite(tmp_path, runs={"ppo": {"method": "ppo", "base": "saving.yaml"}}, output_dir=str(tmp_path / "kept"))
    run_suite(load_suite(kept), log=lambda _: None, seeds=[0])
    assert (tmp_path / "kept" / "ppo" / "seed0" / "checkpoints").is_dir()  # the default keeps them


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


def test_best_before_collapse():
    trajectory = [(0.0, 0.0), (2.0, 1.0), (12.0, 3.0)]
    assert best_before_collapse(trajectory, 10.0) == pytest.approx(1.0)


def test_suite_compares_arms_paired_by_seed_on_each_agents_solo_evaluation(tmp_path):
    path = write_suite(tmp_path, seeds=[0, 1, 2], runs={"ppo": {"method": "ppo"}, "cory": {"method": "cory"},
                                                        "zero_sum": {"method": "cory", "collective.lambda": -1}},
                       analysis={"trajectory": "eval/solo", "reference": "ppo", "pairs": [["cory", "zero_sum"]],
                                 "rows": ["eval/agent0/solo/task_reward", "eval/solo/distinct_2"],
                                 "resamples": 500})
    results = run_suite(load_suite(path), log=lambda _: None)
    table = results.read_text()
    assert "Paired differences" in table and "| cory - ppo | final task reward |" in table
    assert "| cory - zero_sum | final KL |" in table and "| zero_sum - ppo |" in table
    assert "agent0/solo/task_reward" in table and "solo/distinct_2" in table
    comparisons = list(csv.DictReader((tmp_path / "out" / "comparisons.csv").open()))
    assert all(row["seeds"].startswith(("3", "2", "1", "0")) for row in comparisons)
    primary = [row for row in comparisons if "(primary)" in row["measure"]]
    assert len(primary) == 3  # one per comparison, and only those carry a verdict
    assert all(row["verdict"].startswith("not shown") for row in primary)  # 3 seeds cannot reach p <= 0.05
    assert all(row["verdict"] == "" for row in comparisons if row not in primary)
    assert {row["seeds"] for row in comparisons if row["measure"] == "final KL"} == {"3"}
    for row in comparisons:
        if row["difference mean"] not in ("", "nan"):
            assert float(row["difference low"]) <= float(row["difference mean"]) <= float(row["difference high"])
    summary = yaml.safe_load((tmp_path / "out" / "cory" / "seed0" / "final" / "summary.json").read_text())
    for key in ("eval/agent0/solo/task_reward", "eval/agent1/solo/kl", "eval/solo/hit_length_limit",
                "eval/observer/distinct_1", "eval/pioneer/task_reward"):
        assert key in summary
    # The pioneer answered the plain query: its solo metrics are its role's.
    pioneer = summary["eval/pioneer/task_reward"]
    assert pioneer in (summary["eval/agent0/solo/task_reward"], summary["eval/agent1/solo/task_reward"])


def test_runs_may_start_from_their_own_base_train_a_subset_of_seeds_and_be_selected(tmp_path):
    (tmp_path / "other.yaml").write_text(yaml.safe_dump({**BASE, "steps": 1}))
    path = write_suite(tmp_path, runs={"ppo": {"method": "ppo"},
                                       "cory": {"base": "other.yaml", "method": "cory", "seeds": [1]}})
    suite = load_suite(path)
    assert [(r.name, r.seed, r.config.steps) for r in suite.runs] == [("ppo", 0, 2), ("ppo", 1, 2), ("cory", 1, 1)]
    run_suite(suite, log=lambda _: None, names=["cory"])
    assert (tmp_path / "out" / "cory" / "seed1" / "final").exists() and not (tmp_path / "out" / "ppo").exists()
    with pytest.raises(ConfigError, match=r"--runs: \['dpo'\] not among"):
        run_suite(suite, log=lambda _: None, names=["dpo"])
    bad = write_suite(tmp_path, runs={"cory": {"method": "cory", "seeds": [5]}})
    with pytest.raises(ConfigError, match=r"suite.runs.cory.seeds: \[5\] must be among"):
        load_suite(bad)


def test_export_copies_what_the_analysis_needs_and_redraws_from_it(tmp_path):
    from cory.experiments.report import export_suite

    run_suite(load_suite(write_suite(tmp_path, seeds=[0])), log=lambda _: None)
    results = export_suite(tmp_path / "out", tmp_path / "published")
    published = tmp_path / "published"
    assert results == published / "results.md" and (published / "reward_kl.png").exists()
    assert (published / "cory" / "seed0" / "metrics.jsonl").exists()
    assert not list(published.rglob("*.safetensors")) and not (published / "cory" / "seed0" / "checkpoints").exists()
    assert results.read_text() == (tmp_path / "out" / "results.md").read_text()


def _run(name, seed, points):
    from cory.experiments.results import RunResult

    evals = [{"eval/kl": kl, "eval/task_reward": reward} for kl, reward in points]
    return RunResult(name, seed, None, [], evals, {"eval/kl": points[-1][0], "eval/task_reward": points[-1][1]})


def test_pair_levels_belong_to_the_pair_alone():
    from cory.experiments.suites import AnalysisConfig
    from cory.experiments.results import PRIMARY_MEASURE, pair_differences

    a, b = _run("a", 0, [(0, 0), (2, 1), (4, 2)]), _run("b", 0, [(0, 0), (4, 1)])
    got = pair_differences(a, b, AnalysisConfig(trajectory="eval"))
    # KL levels: from 0 (both start) to 4 (both peak): 1, 2, 3. a: 0.5, 1, 1.5; b: 0.25, 0.5, 0.75
    assert got["reward at the pair's KL level 25%"] == pytest.approx(0.25)
    assert got["reward at the pair's KL level 75%"] == pytest.approx(0.75)
    assert got[PRIMARY_MEASURE] == pytest.approx(0.5) and next(iter(got)) == PRIMARY_MEASURE
    # reward levels from 0 to 1 (b's peak): 0.5 -> KL 1 for a, 2 for b
    assert got["KL at the pair's reward level 50%"] == pytest.approx(-1.0)
    assert got["final task reward"] == 1.0 and got["final KL"] == 0.0


def test_a_third_run_never_removes_a_seed_from_a_pair(tmp_path):
    from cory.experiments.results import PRIMARY_MEASURE, comparisons

    results = [_run(name, seed, points) for seed in range(5) for name, points in
               (("ppo", [(0, 0), (4, 1)]), ("cory", [(0, 0), (2, 1), (4, 2)]),
                ("flat", [(0, 0)] if seed == 3 else [(0, 0), (1, 0.1)]))]
    description = {"analysis": {"trajectory": "eval", "reference": "ppo"},
                   "runs": [{"name": n} for n in ("ppo", "cory", "flat")]}
    rows = comparisons(description, results)
    primary = {row["comparison"]: row for row in rows if row["measure"].startswith(f"**{PRIMARY_MEASURE}")}
    # 'flat' never moves in seed 3: only its own pair loses that seed
    assert primary["cory - ppo"]["seeds"] == 5 and primary["cory - ppo"]["verdict"] == "shown: higher"
    assert primary["cory - ppo"]["p (a > b)"] == f"{1 / 32:.3f}"
    assert primary["flat - ppo"]["seeds"] == "4 (no value: seed 3)"
    assert primary["flat - ppo"]["verdict"].startswith("not shown (too few seeds")


def test_a_verdict_before_every_planned_seed_is_marked_interim():
    from cory.experiments.results import PRIMARY_MEASURE, comparisons

    results = [_run(name, seed, points) for seed in range(5) for name, points in
               (("ppo", [(0, 0), (4, 1)]), ("cory", [(0, 0), (2, 1), (4, 2)]))]
    planned = [{"name": name, "seed": seed} for seed in range(8) for name in ("ppo", "cory")]
    description = {"analysis": {"trajectory": "eval", "reference": "ppo"}, "runs": planned}
    primary = [row for row in comparisons(description, results) if row["measure"].startswith(f"**{PRIMARY_MEASURE}")]
    assert primary[0]["verdict"] == "interim, 5 of 8 planned seeds: shown: higher"
    description["runs"] = planned[:10]  # seeds 0-4 are all the suite plans
    primary = [row for row in comparisons(description, results) if row["measure"].startswith(f"**{PRIMARY_MEASURE}")]
    assert primary[0]["verdict"] == "shown: higher"


def test_every_run_row_shows_its_trajectory_end_indicators_and_times():
    from cory.experiments.results import RunResult, run_rows

    def run(name, seed, steps):
        rows = [{"step": s, "task_reward": 0.0, "time/iteration": 2.0} for s in range(steps[-1])]
        rows.append({"step": steps[-1]})  # the final evaluation has a row of its own
        for s in steps:  # an evaluation at a training step shares that step's row
            rows[s].update({"eval/solo/task_reward": s / 10, "eval/solo/kl": s / 4, "time/eval": 30.0,
                            "eval/solo/distinct_2": 0.9, "eval/solo/response_length": 7.3,
                            "eval/solo/hit_length_limit": 1.0})
        train, evals = [r for r in rows if "task_reward" in r], [r for r in rows if "eval/solo/kl" in r]
        return RunResult(name, seed, None, train, evals, {})

    description = {"analysis": {"trajectory": "eval/solo"}, "runs": [{"name": "ppo"}, {"name": "cory"}]}
    steps = list(range(0, 41, 5))  # 9 evaluations: 5 shown, first and last included
    rows, columns = run_rows(description, [run("cory", 0, steps), run("ppo", 1, steps), run("ppo", 0, steps)])
    assert [(r["run"], r["seed"]) for r in rows] == [("ppo", 0), ("ppo", 1), ("cory", 0)]
    reward, kl = columns[2], columns[3]
    assert reward == "`eval/solo` reward at iterations 0, 10, 20, 30, 40"
    assert rows[0][reward] == "+0.00 → +1.00 → +2.00 → +3.00 → +4.00"
    assert rows[0][kl] == "0.0 → 2.5 → 5.0 → 7.5 → 10.0"
    assert rows[0]["response_length (end)"] == "7.3" and rows[0]["hit_length_limit (end)"] == "1.00"
    # 40 iterations of 2 s and 9 evaluations of 30 s, each counted once
    assert rows[0]["s / iteration"] == "2.0" and rows[0]["minutes"] == f"{(80 + 270) / 60:.1f}"

    rows, columns = run_rows(description, [run("ppo", 0, [0, 5, 10]), run("cory", 0, [0, 10])])
    assert columns[2] == "`eval/solo` reward" and rows[1][columns[2]] == "0: +0.00 → 10: +1.00"
