"""The transfer diagnostics over training of a suite: means over seeds at each evaluation and
over the training iterations between evaluations, and their plot."""

from cory.experiments.diagnostics import diagnostics_over_training
from cory.experiments.plots import draw_diagnostics
from cory.experiments.results import RunResult


DESCRIPTION = {"name": "demo", "runs": [{"name": "ppo"}, {"name": "cory"}]}


def _cory(seed, eval_gains, train_copies):
    """A multi-agent run evaluated at steps 0, 2 and 4 and trained for steps 0 to 3."""
    evals = [{"step": step, "eval/task_reward": 0.1, "eval/solo/task_reward": 0.1 * step, "eval/solo/kl": step,
              "eval/transfer_gain": gain} for step, gain in zip((0, 2, 4), eval_gains)]
    train = [{"step": step, "task_reward": 0.0, "copy_rate": copy} for step, copy in enumerate(train_copies)]
    return RunResult("cory", seed, None, train, evals, {})


def test_means_over_seeds_at_each_evaluation_and_between_evaluations():
    ppo = RunResult("ppo", 0, None, [{"step": 0, "task_reward": 0.0}],
                    [{"step": s, "eval/task_reward": 0.0, "eval/solo/task_reward": 0.0, "eval/solo/kl": 0.0}
                     for s in (0, 2, 4)], {})
    results = [ppo, _cory(0, [0.1, -0.2, 0.3], [0.0, 0.5, 1.0, 0.0]),
               _cory(1, [0.3, 0.0, 0.1], [0.5, 0.5, 0.0, 0.0])]
    rows = diagnostics_over_training(DESCRIPTION, results, "eval/solo")
    # ppo has no diagnostic: no rows; columns only for what was logged
    assert [(r["run"], r["step"]) for r in rows] == [("cory", 0), ("cory", 2), ("cory", 4)]
    assert list(rows[0]) == ["run", "step", "seeds", "reward", "KL", "eval transfer_gain", "train copy_rate"]
    assert rows[0]["seeds"] == 2 and rows[1]["reward"] == 0.2 and rows[2]["KL"] == 4.0
    assert [r["eval transfer_gain"] for r in rows] == [0.2, -0.1, 0.2]
    # step 0 has no training before it; step 2 averages steps 0-1: seed 0 0.25, seed 1 0.5;
    # step 4 steps 2-3: seed 0 0.5, seed 1 0.0
    assert [r["train copy_rate"] for r in rows] == [None, 0.375, 0.25]


def test_the_plot_is_drawn_only_when_a_diagnostic_was_logged(tmp_path):
    results = [_cory(0, [0.1, -0.2, 0.3], [0.0, 0.5, 1.0, 0.0])]
    assert draw_diagnostics(tmp_path / "d.png", DESCRIPTION, results)
    assert (tmp_path / "d.png").stat().st_size > 1000
    plain = [RunResult("ppo", 0, None, [{"step": 0, "task_reward": 0.0}],
                       [{"step": 0, "eval/task_reward": 0.0}], {})]
    assert not draw_diagnostics(tmp_path / "none.png", DESCRIPTION, plain)
    assert not (tmp_path / "none.png").exists()
