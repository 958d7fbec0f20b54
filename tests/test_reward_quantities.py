"""Reward quantities of a multi-agent run and the suite readings built on them: the family of
primary comparisons under Holm, the sensitivity of each verdict to the quantity, restarts."""

import json
import math

import pytest

from cory.experiments.results import RunResult, collect, family, run_rows, sensitivity
from cory.experiments.reward_quantities import QUANTITIES, agents_evaluated_alone, quantity_trajectory



def _pair_rows(agent0, agent1, observer=None):
    """Evaluation rows of a two-agent run from each agent's (kl, reward) points."""
    rows = []
    for i, ((kl0, r0), (kl1, r1)) in enumerate(zip(agent0, agent1)):
        row = {"eval/agent0/solo/kl": kl0, "eval/agent0/solo/task_reward": r0,
               "eval/agent1/solo/kl": kl1, "eval/agent1/solo/task_reward": r1,
               "eval/solo/kl": (kl0 + kl1) / 2, "eval/solo/task_reward": (r0 + r1) / 2, "eval/task_reward": r0}
        if observer:
            row.update({"eval/observer/kl": observer[i][0], "eval/observer/task_reward": observer[i][1]})
        rows.append(row)
    return rows


def test_each_quantity_reads_its_own_points():
    rows = _pair_rows([(0, 0.0), (2, 1.0), (4, 0.5)], [(0, 0.2), (1, 0.4), (3, 0.9)], [(0, 0.1), (5, 0.3), (6, 0.2)])
    assert agents_evaluated_alone(rows) == [0, 1]
    assert quantity_trajectory(rows, "mean of agents", "eval/solo") == [(0, 0.1), (1.5, 0.7), (3.5, 0.7)]
    assert quantity_trajectory(rows, "agent 1", "eval/solo") == [(0, 0.2), (1, 0.4), (3, 0.9)]
    assert quantity_trajectory(rows, "observer", "eval/solo") == [(0, 0.1), (5, 0.3), (6, 0.2)]
    # agent 1 ends higher (0.9 > 0.5): its whole trajectory
    assert quantity_trajectory(rows, "better agent", "eval/solo") == [(0, 0.2), (1, 0.4), (3, 0.9)]
    # per evaluation: agent 1 (0.2 > 0.0), agent 0 (1.0 > 0.4), agent 1 (0.9 > 0.5)
    assert quantity_trajectory(rows, "best of two", "eval/solo") == [(0, 0.2), (2, 1.0), (3, 0.9)]
    with pytest.raises(ValueError, match="unknown reward quantity 'agent'"):
        quantity_trajectory(rows, "agent", "eval/solo")


def test_a_one_agent_run_keeps_its_analysed_trajectory_for_every_quantity():
    rows = [{"eval/solo/kl": kl, "eval/solo/task_reward": r, "eval/agent0/solo/kl": kl,
             "eval/agent0/solo/task_reward": r} for kl, r in [(0, 0.1), (2, 0.5)]]
    assert agents_evaluated_alone(rows) == []
    for quantity in QUANTITIES:
        assert quantity_trajectory(rows, quantity, "eval/solo") == [(0, 0.1), (2, 0.5)]


def _one_agent(name, seed, points):
    evals = [{"eval/solo/kl": kl, "eval/solo/task_reward": r, "eval/task_reward": r} for kl, r in points]
    return RunResult(name, seed, None, [], evals, {})


def test_sensitivity_recomputes_the_primary_measure_with_each_quantity():
    # PPO rises 0 -> 1 over KL 0 -> 4. The pair: agent 0 on PPO's line, agent 1 0.4 above it at
    # every KL, so at the pair's matched KL (levels 1, 2, 3): agent 0 +0, agent 1 +0.4, mean +0.2
    ppo = [(0, 0.0), (4, 1.0)]
    agent0, agent1 = [(0, 0.0), (4, 1.0)], [(0, 0.4), (4, 1.4)]
    results = []
    for seed in range(5):
        results.append(_one_agent("ppo", seed, ppo))
        results.append(RunResult("cory", seed, None, [], _pair_rows(agent0, agent1), {}))
    description = {"analysis": {"trajectory": "eval/solo", "reference": "ppo"},
                   "runs": [{"name": "ppo"}, {"name": "cory"}]}
    rows = {row["reward quantity"]: row for row in sensitivity(description, results)}
    assert list(rows) == list(QUANTITIES)
    assert rows["agent 0"]["difference"].mean == pytest.approx(0.0)
    # agent 1 and the mean start above PPO: the pair's levels begin at the higher start
    assert rows["agent 1"]["difference"].mean == pytest.approx(0.4)
    assert rows["mean of agents"]["difference"].mean == pytest.approx(0.2)
    assert rows["better agent"]["difference"].mean == pytest.approx(0.4)
    assert rows["agent 1"]["verdict"] == "shown: higher" and rows["agent 1"]["p (a > b)"] == f"{1 / 32:.3f}"
    assert rows["observer"]["seeds"] == 0  # the pair never evaluated an observer
    # a suite of one-agent runs has nothing to recompute
    assert sensitivity(description, [r for r in results if r.name == "ppo"]) == []


def test_the_family_of_primary_comparisons_is_holm_corrected():
    # five seeds each: 'up' is above PPO in all (one-sided p 1/32, two-sided 2/32), 'down'
    # below in all, 'mixed' splits; Holm over three: 2/32 x 3 = 0.1875 for the smallest
    results = []
    for seed in range(5):
        results.append(_one_agent("ppo", seed, [(0, 0.0), (4, 1.0)]))
        results.append(_one_agent("up", seed, [(0, 0.0), (4, 1.5)]))
        results.append(_one_agent("down", seed, [(0, 0.0), (4, 0.5)]))
        results.append(_one_agent("mixed", seed, [(0, 0.0), (4, 1.5 if seed % 2 else 0.5)]))
    description = {"analysis": {"trajectory": "eval/solo", "reference": "ppo"},
                   "runs": [{"name": n} for n in ("ppo", "up", "down", "mixed")]}
    rows = {row["comparison"]: row for row in family(description, results)}
    assert rows["up - ppo"]["p (a > b)"] == f"{1 / 32:.3f}" and rows["down - ppo"]["p (a < b)"] == f"{1 / 32:.3f}"
    assert rows["up - ppo"]["Holm p (two-sided)"] == f"{2 / 32 * 3:.3f}"
    # one-sided a > b: up's 1/32 is the smallest of the three, so x 3
    assert rows["up - ppo"]["Holm p (a > b)"] == f"{3 / 32:.3f}"
    assert all(row["verdict (Holm, two-sided)"] == "not shown" for row in rows.values())
    # with one comparison there is no family
    assert family({**description, "runs": [{"name": "ppo"}, {"name": "up"}]},
                  [r for r in results if r.name in ("ppo", "up")]) == []


def test_restarts_are_read_from_the_environment_record_and_shown_per_run(tmp_path):
    folder = tmp_path / "cory" / "seed0"
    (folder / "final").mkdir(parents=True)
    (folder / "final" / "summary.json").write_text("{}")
    rows = [{"step": 0, "task_reward": 0.1, "time/iteration": 1.0, "eval/task_reward": 0.1, "eval/kl": 0.0}]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "environment.jsonl").write_text(json.dumps({"step": 0, "threads": 1}) + "\n"
                                              + json.dumps({"step": 5, "threads": 1}) + "\n")
    description = {"name": "s", "collapse_kl": 10, "analysis": {"trajectory": "eval"},
                   "runs": [{"name": "cory", "seed": 0, "folder": str(folder), "sweep_value": None}]}
    (tmp_path / "suite.json").write_text(json.dumps(description))
    _, results = collect(tmp_path)
    assert results[0].starts == [(0, 1), (5, 1)]
    table, columns = run_rows(description, results)
    assert table[0][columns[-1]] == "0: 1, 5: 1" and columns[-1] == "starts (step: threads)"
    assert math.isfinite(float(table[0]["minutes"]))
