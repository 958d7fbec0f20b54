"""The confirmation of a screen: only the selected cell, never a screening seed, the exact
one-sided sign-flip test with Holm over the family, and the "where cooperation pays" table,
on hand-computed numbers."""

import json

import pytest
import yaml

from cory.cli import main
from cory.errors import ConfigError
from cory.experiments.confirmation import confirm, where_cooperation_pays
from cory.experiments.screen import Cell


# "small": best imdb / cory (mean 0.12), pooled sd sqrt((0.0008 + 0.0002) / 2) = 0.02236 -> 5 seeds
# "big": best imdb / cory (mean 0.4), pooled sd sqrt((0.02 + 0.02) / 2) = 0.1414 -> 5 seeds
SCREEN = [Cell("small", "imdb", "cory", [0.10, 0.14], {}, [0, 1]),
          Cell("small", "arith", "refine", [0.05, 0.03], {}, [0, 1]),
          Cell("big", "imdb", "cory", [0.3, 0.5], {}, [0, 1]), Cell("big", "arith", "cory", [0.1, 0.3], {}, [0, 1])]
FRESH = [100, 101, 102, 103, 104]


def test_holm_over_the_family_decides_the_wording():
    small = Cell("small", "imdb", "cory", [0.1, 0.2, 0.05, 0.3, 0.15], {}, FRESH)  # all above: p = 1/32
    # |values| sum 0.75; a sign assignment reaches the observed sum 0.55 only when the flipped
    # values sum to at most 0.1: none flipped, either 0.1, or 0.05 -> 4 of 32
    big = Cell("big", "imdb", "cory", [0.2, -0.1, 0.3, 0.1, 0.05], {}, FRESH)
    first, second = confirm(SCREEN, [small, big])
    assert (first.p, second.p) == pytest.approx((1 / 32, 4 / 32))
    assert (first.holm_p, second.holm_p) == pytest.approx((2 / 32, 4 / 32))  # 0.03125 x 2, then max(0.125, .)
    assert first.verdict == "not shown" and second.verdict == "not shown"
    (alone,) = confirm(SCREEN, [small])  # a family of one: p 0.031 stays below 0.05
    assert alone.holm_p == pytest.approx(1 / 32) and alone.verdict == "higher than PPO"
    assert alone.interval.mean == pytest.approx(0.16)


def test_fewer_seeds_than_planned_read_as_interim():
    (partial,) = confirm(SCREEN, [Cell("big", "imdb", "cory", [0.2, 0.3, 0.1], {}, FRESH[:3])])
    assert partial.verdict == "interim, 3 of 5 planned seeds: not shown"  # 3 seeds: p >= 1/8


def test_only_the_selected_cell_on_fresh_seeds_is_confirmed():
    with pytest.raises(ConfigError, match="selected imdb / cory with 5 seeds"):
        confirm(SCREEN, [Cell("small", "arith", "refine", [0.1] * 5, {}, FRESH)])
    with pytest.raises(ConfigError, match=r"reuses screening seed\(s\) 1; confirmation seeds start at 100"):
        confirm(SCREEN, [Cell("small", "imdb", "cory", [0.1] * 5, {}, [1, 100, 101, 102, 103])])
    nulls = [Cell("none", "imdb", "cory", [-0.1, -0.2], {}, [0, 1])]
    with pytest.raises(ConfigError, match="selected nothing for this model"):
        confirm(nulls, [Cell("none", "imdb", "cory", [0.1] * 5, {}, FRESH)])


def test_the_table_reads_a_confirmed_cell_from_its_confirmation_and_the_rest_from_the_screen():
    confirmations = confirm(SCREEN, [Cell("small", "imdb", "cory", [0.1, 0.2, 0.05, 0.3, 0.15], {}, FRESH)])
    rows = where_cooperation_pays(SCREEN, confirmations)
    small_imdb = next(r for r in rows if "| small | imdb |" in r)
    assert "confirmation, 5 seeds" in small_imdb and "higher than PPO (Holm p 0.0312)" in small_imdb
    assert "100% for the screen's +0.120" in small_imdb  # Phi(0.12 sqrt(5) / 0.02236 - 1.645)
    small_arith = next(r for r in rows if "| small | arith |" in r)
    # (1.645 + 0.842) x 0.02236 / sqrt(2) = 0.039
    assert "not selected (screening only)" in small_arith and "effects ≥ 0.039" in small_arith
    big_imdb = next(r for r in rows if "| big | imdb |" in r)
    assert "selected: confirm with 5 seeds" in big_imdb and "screen, 2 seeds" in big_imdb


def _suite(folder, model, arms):
    """A suite folder whose runs' eval/solo rises from 0 to ``top`` over KL 0 -> 4: the matched-KL
    difference of two runs is half the difference of their tops."""
    runs = []
    for name, tops in arms.items():
        for seed, top in tops.items():
            run = folder / name / f"seed{seed}"
            (run / "final").mkdir(parents=True)
            (run / "final" / "summary.json").write_text(json.dumps({}))
            rows = [{"step": step, "eval/solo/kl": kl, "eval/solo/task_reward": top * kl / 4, "eval/task_reward": 0}
                    for step, kl in ((0, 0), (1, 4))]
            (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            (run / "config.yaml").write_text(yaml.safe_dump({"model": model, "task": {"name": "imdb"}}))
            runs.append({"name": name, "seed": seed, "folder": str(run), "sweep_value": None})
    (folder / "suite.json").write_text(json.dumps({"name": folder.name, "collapse_kl": 10, "runs": runs,
                                                   "analysis": {"trajectory": "eval/solo", "reference": "ppo"}}))
    return str(folder)


def test_cory_screen_confirm_reads_confirmation_folders(tmp_path, capsys):
    screen = _suite(tmp_path / "screen", "smollm2-135m", {"ppo": {0: 1.0, 1: 1.0}, "cory": {0: 1.2, 1: 1.3}})
    fresh = dict(zip(FRESH, (1.2, 1.4, 1.1, 1.3, 1.2)))  # differences 0.1, 0.2, 0.05, 0.15, 0.1
    confirmation = _suite(tmp_path / "confirm", "smollm2-135m", {"ppo": dict.fromkeys(FRESH, 1.0), "cory": fresh})
    assert main(["screen", screen, "--confirm", confirmation]) == 0
    printed = capsys.readouterr().out
    assert "| smollm2-135m | imdb / cory | 100, 101, 102, 103, 104 | +0.100, +0.200, +0.050, +0.150, +0.100 |" \
        in printed
    assert "higher than PPO (Holm p 0.0312)" in printed and "### Where cooperation pays" in printed
