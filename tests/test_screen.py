"""The screen across suites: cells against PPO, the pooled spread, and the pre-registered
selection rule (docs/preregistration.md) on constructed numbers."""

import json
import math

import pytest
import yaml

from cory.cli import main
from cory.experiments.results import RunResult
from cory.experiments.screen import Cell, pooled_sd, power_with, seeds_for_power, select, suite_cells



def _run(name, seed, top, final=None):
    """A run whose eval/solo rises from 0 to ``top`` over KL 0 -> 4."""
    evals = [{"eval/solo/kl": kl, "eval/solo/task_reward": top * kl / 4, "eval/task_reward": 0.0} for kl in (0, 4)]
    return RunResult(name, seed, None, [], evals, final or {})


def test_each_arm_is_paired_with_the_reference_and_its_diagnostics_averaged():
    results = [_run("ppo", s, 1.0) for s in (0, 1)]
    results += [_run("cory", s, 1.0 + 0.4 * (s + 1), {"eval/observer/transfer_gain": 0.1 * s,
                                                       "eval/round1/flip_right_wrong": 0.5 + 0.1 * s}) for s in (0, 1)]
    description = {"name": "x", "analysis": {"trajectory": "eval/solo", "reference": "ppo",
                                             "rows": ["eval/observer/transfer_gain", "eval/uses_right"]}}
    (cell,) = suite_cells(description, results, "smollm2-135m", "imdb")
    # matched-KL levels 1, 2, 3: differences 0.1 x level (seed 0) and 0.2 x level (seed 1), averaged
    assert cell.differences == pytest.approx([0.2, 0.4]) and cell.mean == pytest.approx(0.3)
    # the suite's rows and the headline transfer diagnostics the arm logged (uses_right: not logged)
    assert cell.diagnostics == pytest.approx({"observer/transfer_gain": 0.05, "round1/flip_right_wrong": 0.55})


def test_pooled_sd_weights_each_cell_by_its_degrees_of_freedom():
    cells = [Cell("m", "t", "a", [0.0, 0.2], {}), Cell("m", "t", "b", [1.0, 1.0, 1.6], {}), Cell("m", "t", "c", [5.0], {})]
    # variances 0.02 (1 dof) and 0.12 (2 dof); a one-seed cell adds nothing
    assert pooled_sd(cells) == pytest.approx(math.sqrt((0.02 + 2 * 0.12) / 3))
    assert math.isnan(pooled_sd([cells[2]]))


def test_seeds_and_power_by_hand():
    # (1.6449 + 0.8416)^2 = 6.183: sd/d = 1 -> 7 seeds; sd/d = 2 -> 25
    assert seeds_for_power(0.1, 0.1) == 7 and seeds_for_power(0.1, 0.2) == 25
    assert power_with(7, 0.1, 0.1) == pytest.approx(0.8416, abs=1e-3)  # Phi(sqrt(7) - 1.645) = Phi(1.001)
    assert power_with(10, 0.1, 0.2) == pytest.approx(0.475, abs=0.005)  # Phi(1.581 - 1.645)


def test_the_rule_picks_the_best_cell_per_model_and_sizes_or_refuses_it():
    cells = [Cell("small", "imdb", "cory", [0.10, 0.14], {}), Cell("small", "arith", "refine", [0.05, 0.03], {}),
             Cell("big", "imdb", "cory", [-0.1, -0.2], {}),
             Cell("wide", "imdb", "cory", [0.05, 0.45], {}), Cell("wide", "arith", "cory", [-0.3, 0.1], {}),
             Cell("close", "imdb", "cory", [0.29, 0.31], {})]
    by_model = {s.model: s for s in select(cells)}
    small = by_model["small"]  # best 0.12, pooled sd 0.02: 80 % power needs 1 seed -> the floor of 5
    assert small.best.arm == "cory" and small.seeds == 5 and small.verdict.startswith("confirm with 5 seeds")
    assert by_model["big"].seeds is None and by_model["big"].verdict.startswith("nothing to confirm")
    wide = by_model["wide"]  # best 0.25, pooled sd 0.283: (2.486 x 1.131)^2 = 7.9 -> 8 seeds
    assert wide.seeds == 8
    cells.append(Cell("noisy", "imdb", "cory", [-0.5, 0.6], {}))  # mean 0.05, sd 0.78 -> ~1500 seeds
    noisy = {s.model: s for s in select(cells)}["noisy"]
    assert noisy.seeds is None and noisy.verdict.startswith("not testable here: needs")
    assert by_model["close"].seeds == 5


def test_cory_screen_reads_suite_folders(tmp_path, capsys):
    suite = tmp_path / "cell"
    runs = []
    for name, top in (("ppo", 1.0), ("cory", 1.4)):
        for seed in (0, 1):
            folder = suite / name / f"seed{seed}"
            (folder / "final").mkdir(parents=True)
            (folder / "final" / "summary.json").write_text(json.dumps({}))
            rows = [{"step": 0, **_run(name, seed, top).evals[0]}, {"step": 1, **_run(name, seed, top).evals[1]}]
            (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            (folder / "config.yaml").write_text(yaml.safe_dump({"model": "smollm2-135m", "task": {"name": "imdb"}}))
            runs.append({"name": name, "seed": seed, "folder": str(folder), "sweep_value": None})
    (suite / "suite.json").write_text(json.dumps({"name": "cell", "collapse_kl": 10, "runs": runs,
                                                   "analysis": {"trajectory": "eval/solo", "reference": "ppo"}}))
    out = tmp_path / "screen.md"
    assert main(["screen", str(suite), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| smollm2-135m | imdb | cory | 2 | +0.200, +0.200 | +0.200 |" in printed
    assert "not sized: no spread between seeds to pool" in printed and out.read_text() == printed
    assert main(["screen", str(tmp_path / "nowhere")]) == 2
    assert "holds no suite.json" in capsys.readouterr().err


def test_the_four_screen_suites_share_one_schedule_and_the_same_arms():
    """docs/preregistration.md: every arm of every cell on the same shortened schedule, seeds 0
    and 1; a Gemma suite differs from its SmolLM2 twin only in the model and its chunking."""
    from pathlib import Path

    suites = Path(__file__).resolve().parents[1] / "configs" / "suites"
    loaded = {f"{m}_{t}": yaml.safe_load((suites / f"screen_{m}_{t}.yaml").read_text())
              for m in ("smollm2", "gemma") for t in ("imdb", "arithmetic")}
    for name, suite in loaded.items():
        assert suite["seeds"] == [0, 1] and list(suite["runs"]) == ["ppo", "cory", "cory_difference", "refine"]
        assert {k: suite["overrides"][k] for k in ("steps", "eval_every", "ppo.batch_size")} == \
            {"steps": 16, "eval_every": 8, "ppo.batch_size": 8}, name
        assert suite["analysis"]["reference"] == "ppo" and suite["analysis"]["trajectory"] == "eval/solo"
    for task in ("imdb", "arithmetic"):
        gemma, smollm2 = loaded[f"gemma_{task}"], loaded[f"smollm2_{task}"]
        assert gemma["overrides"] == {**smollm2["overrides"], "model": "gemma3-270m", "generation.rows_per_call": 64}
        assert gemma["runs"] == smollm2["runs"] and gemma["analysis"] == smollm2["analysis"]


def test_the_screen_table_shows_raw_diagnostics_unsigned_under_a_legend():
    """Differences from PPO carry a sign; an arm's own values do not, and a legend says which is which."""
    from cory.experiments.screen import cells_report

    cell = Cell("smollm2-135m", "arithmetic", "refine", [0.013, 0.059],
                {"observer/transfer_gain": -0.031, "copy_rate": 0.06, "uses_right": 0.231})
    report = cells_report([cell])
    assert "| smollm2-135m | arithmetic | refine | 2 | +0.013, +0.059 | +0.036 | -0.031 | 0.060 | 0.231 |" in report
    assert "not differences" in report and "`uses_right`: P(right | an answer shown was right)" in report
    assert "`observer/transfer_gain`: a turn's reward minus its agent's reward on the plain query" in report
