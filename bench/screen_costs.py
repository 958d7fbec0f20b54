"""What a suite will cost before it runs: each arm's seconds per iteration and per evaluation,
measured on this machine, projected onto the suite's own schedule.

    python bench/screen_costs.py configs/suites/screen_smollm2_imdb.yaml [--runs ppo,cory] [--iterations 2]

For each chosen run of the suite (seed 0, the suite's own config) it trains ``--iterations``
iterations with an evaluation before the first and after the last, in a temporary folder,
and reads the logged times: seconds per iteration (the first one, which warms up, left out
when there are two or more), seconds per evaluation (the mean of the two). The projection is
the suite's steps x s/iteration + its number of evaluations x s/evaluation, per seed and for
all of the suite's seeds. Used to fit a screen into its CPU budget (docs/preregistration.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from cory.experiments.suites import PlannedRun, load_suite
from cory.trainer import Trainer


def evaluations(run: PlannedRun) -> int:
    """How many evaluations a run of this config makes: every ``eval_every`` steps from 0, and
    the final one."""
    every = run.config.eval_every
    return (len(range(0, run.config.steps, every)) if every else 0) + 1


def measure(suite_file: str, name: str, iterations: int) -> tuple[float, float]:
    """Seconds per iteration and per evaluation of run ``name`` (seed 0) of the suite."""
    with tempfile.TemporaryDirectory() as out:
        suite = load_suite(suite_file, [f"steps={iterations}", f"eval_every={iterations}", "save_every=0",
                                        "log.tensorboard=false", "log.n_samples=0"])
        run = next(r for r in suite.runs if r.name == name)
        run.config.output_dir = str(Path(out) / name)
        trainer = Trainer(run.config)
        try:
            trainer.train()
        finally:
            trainer.close()
        rows = [json.loads(line) for line in (Path(out) / name / "metrics.jsonl").read_text().splitlines()]
    iteration = [r["time/iteration"] for r in rows if "time/iteration" in r]
    timed = iteration[1:] if len(iteration) > 1 else iteration
    return statistics.mean(timed), statistics.mean(r["time/eval"] for r in rows if "time/eval" in r)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("suite")
    parser.add_argument("--runs", help="comma-separated run names (default: every run of the suite)")
    parser.add_argument("--iterations", type=int, default=2)
    args = parser.parse_args()
    planned = load_suite(args.suite)
    names = args.runs.split(",") if args.runs else list(dict.fromkeys(r.name for r in planned.runs))
    seeds = len(planned.config.seeds)
    print(f"{planned.config.name}: {args.iterations} iteration(s) measured per run, projected on the suite's schedule")
    print("| run | s / iteration | s / evaluation | steps | evaluations | minutes per seed | minutes, all seeds |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    total = 0.0
    for name in names:
        run = next(r for r in planned.runs if r.name == name)
        per_iteration, per_eval = measure(args.suite, name, args.iterations)
        minutes = (run.config.steps * per_iteration + evaluations(run) * per_eval) / 60
        total += minutes * seeds
        print(f"| {name} | {per_iteration:.1f} | {per_eval:.1f} | {run.config.steps} | {evaluations(run)} | "
              f"{minutes:.1f} | {minutes * seeds:.1f} |", flush=True)
    print(f"total of the measured runs over {seeds} seed(s): {total:.0f} min = {total / 60:.2f} h")


if __name__ == "__main__":
    main()
