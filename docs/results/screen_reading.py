"""The screen re-read (issue 58, item 1), from the exported suites; numbers, not a new verdict.

    .venv/bin/python docs/results/screen_reading.py

Prints, per cell: PPO's held-out trajectory per seed (eval/solo at iterations 0, 8, 16 with its
KL), how many pairs read an iteration after 8; per model: the sd of paired differences pooled
over both tasks (as pre-registered) and within arithmetic only, with the seeds each would ask
for the model's best cell; and per arm: the pre-registered matched-KL difference beside the same
reading with each run's trajectory measured from its own iteration-0 reward.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from cory.experiments.results import LEVEL_FRACTIONS, matched_kl_difference
from cory.experiments.screen import MIN_SEEDS, pooled_sd, screen_cells, seeds_for_power
from cory.experiments.stats import common_levels

RESULTS = Path(__file__).parent
CELLS = ["smollm2_imdb", "smollm2_arithmetic", "gemma_imdb", "gemma_arithmetic"]
ARMS = ["cory", "cory_difference", "refine"]


def trajectory(cell: str, arm: str, seed: int) -> list[tuple[float, float]]:
    rows = [json.loads(line) for line in (RESULTS / f"screen_{cell}" / arm / f"seed{seed}" / "metrics.jsonl").open()]
    return [(r["eval/solo/kl"], r["eval/solo/task_reward"]) for r in rows if "eval/solo/task_reward" in r]


def main() -> None:
    for cell in CELLS:
        ppo = [" -> ".join(f"{r:.3f} (KL {k:.1f})" for k, r in trajectory(cell, "ppo", seed)) for seed in (0, 1)]
        late = sum(any(max(path[0][0], path[1][0]) < level for path in (a, b)
                       for level in common_levels([a, b], 0, LEVEL_FRACTIONS))
                   for arm in ARMS for seed in (0, 1)
                   for a, b in [(trajectory(cell, arm, seed), trajectory(cell, "ppo", seed))])
        print(f"{cell}: PPO seed 0 {ppo[0]}; seed 1 {ppo[1]}; pairs reading iteration 16: {late} of 6")
    cells = screen_cells([RESULTS / f"screen_{cell}" for cell in CELLS])
    for model in ("smollm2-135m", "gemma3-270m"):
        own = [c for c in cells if c.model == model]
        best = max((c for c in own if c.arm != "ppo"), key=lambda c: c.mean)
        both, arithmetic = pooled_sd(own), pooled_sd([c for c in own if c.task == "arithmetic"])
        print(f"{model}: best {best.task}/{best.arm} {best.mean:+.3f}; sd pooled over both tasks {both:.3f} -> "
              f"{seeds_for_power(best.mean, both)} seeds; within arithmetic {arithmetic:.3f} -> "
              f"{max(MIN_SEEDS, seeds_for_power(best.mean, arithmetic))} seeds (at least {MIN_SEEDS})")
    for cell in CELLS:
        for arm in ARMS:
            raw, own_start = [], []
            for seed in (0, 1):
                a, b = trajectory(cell, arm, seed), trajectory(cell, "ppo", seed)
                raw.append(matched_kl_difference(a, b))
                own_start.append(matched_kl_difference([(k, r - a[0][1]) for k, r in a],
                                                       [(k, r - b[0][1]) for k, r in b]))
            print(f"{cell} {arm}: pre-registered {raw[0]:+.3f}, {raw[1]:+.3f} (mean {np.mean(raw):+.3f}); "
                  f"from each run's own start {own_start[0]:+.3f}, {own_start[1]:+.3f} (mean {np.mean(own_start):+.3f})")


if __name__ == "__main__":
    main()
