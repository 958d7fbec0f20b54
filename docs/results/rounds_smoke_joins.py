"""The rounds smoke run's evaluations under the old join and the clean one, side by side (issue 60).

    .venv/bin/python docs/results/rounds_smoke_joins.py cory cory_difference refine

For each arm: the system's reward, the pioneer's reward and KL, each agent alone (``eval/solo``)
and the observer's transfer diagnostics at every evaluation, from the old export
(``arithmetic_rounds_smoke``) and the re-run (``arithmetic_rounds_smoke_clean_join``); with
several rounds also the last round's revision flips. A diagnostic whose condition never occurred
is shown as ``–``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).parent
JOINS = {"old join": "arithmetic_rounds_smoke", "clean join": "arithmetic_rounds_smoke_clean_join"}


def evaluations(folder: str, arm: str) -> list[dict[str, float]]:
    path = RESULTS / folder / arm / "seed0" / "metrics.jsonl"
    return [row for row in map(json.loads, path.open()) if "eval/task_reward" in row]


def cell(row: dict[str, float], *keys: str) -> str:
    return " / ".join(f"{row[k]:.3f}" if k in row else "–" for k in keys)


def table(arm: str) -> list[str]:
    rows = {join: evaluations(folder, arm) for join, folder in JOINS.items()}
    steps = [int(r["step"]) for r in rows["clean join"]]
    lines = [f"| {arm}, evaluation at iteration | " + " | ".join(map(str, steps)) + " |",
             "|---|" + "---|" * len(steps)]
    observer = "observer" if any("eval/observer/transfer_gain" in r for r in rows["clean join"]) else "round1/pioneer"
    for join, found in rows.items():
        lines += [
            f"| {join}: system reward | " + " | ".join(cell(r, "eval/system/task_reward") for r in found) + " |",
            f"| {join}: pioneer reward / KL | " + " | ".join(cell(r, "eval/pioneer/task_reward", "eval/pioneer/kl")
                                                          for r in found) + " |",
            f"| {join}: `eval/solo` reward / KL | " + " | ".join(cell(r, "eval/solo/task_reward", "eval/solo/kl")
                                                              for r in found) + " |",
            f"| {join}: observer `transfer_gain` / `uses_right` / `fixes_wrong` | " + " | ".join(
                cell(r, f"eval/{observer}/transfer_gain", "eval/uses_right", "eval/fixes_wrong") for r in found) + " |",
        ]
        if any("eval/round1/flip_right_wrong" in r for r in found):
            lines.append(f"| {join}: round 1 `flip_right_wrong` / `flip_wrong_right` | " + " | ".join(
                cell(r, "eval/round1/flip_right_wrong", "eval/round1/flip_wrong_right") for r in found) + " |")
    return lines


if __name__ == "__main__":
    for name in sys.argv[1:] or ["cory", "cory_difference", "refine"]:
        print("\n".join(table(name)) + "\n")
