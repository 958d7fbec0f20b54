"""What a second round costs: CORY iterations in one and two rounds on the same batch.

    python bench/rounds.py [--iterations 3] [--threads 2] [--task imdb|arithmetic]

Runs, in one process and on the same prompts, CORY (one round), ``refine`` (CORY's pair over
two rounds, sum credit) and ``refine`` with difference credit; SmolLM2-135M, batch 16, 16 new
tokens (always 16: EOS is suppressed, so every turn costs the same decode), 4 epochs. One
warm-up iteration, then ``--iterations`` timed ones; prints the mean seconds per stage and
the ratio of each iteration to CORY's. The target (issue 41): a 2-round iteration costs at
most 2.2x a 1-round one.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from cory.config.loading import load_config
from cory.trainer import Trainer

from settings import THROUGHPUT_SETTINGS

CASES = {
    "cory (1 round)": ["method=cory"],
    "refine (2 rounds, sum)": ["method=refine"],
    "refine (2 rounds, difference)": ["method=refine", "collective.credit=difference"],
}
STAGES = ("time/generate", "time/reference", "time/rollout", "time/counterfactual", "time/score",
          "time/update", "time/iteration")


def measure(overrides: list[str], args: argparse.Namespace) -> list[dict[str, float]]:
    config_file = "configs/imdb/cory.yaml" if args.task == "imdb" else "configs/arithmetic/cory.yaml"
    with tempfile.TemporaryDirectory() as out:
        config = load_config(config_file, [
            *THROUGHPUT_SETTINGS, *overrides, f"threads={args.threads}", f"steps={args.iterations + 1}",
            f"output_dir={out}", "eval_every=0", "generation.min_new_tokens=16", "generation.max_new_tokens=16",
            "ppo.batch_size=16", "ppo.mini_batch_size=16", "ppo.ppo_epochs=4", "log.tensorboard=false",
            "log.progress=false", "log.n_samples=0"])
        trainer = Trainer(config)
        try:
            rows = [trainer.run_iteration(step) for step in range(args.iterations + 1)][1:]
        finally:
            trainer.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--task", default="imdb", choices=["imdb", "arithmetic"])
    args = parser.parse_args()
    results = {case: measure(overrides, args) for case, overrides in CASES.items()}
    baseline = statistics.mean(r["time/iteration"] for r in results["cory (1 round)"])
    print(f"{args.task}, SmolLM2-135M, batch 16, 16 new tokens, 4 epochs, {args.threads} threads, "
          f"mean of {args.iterations} iterations after 1 warm-up (seconds)")
    print("| case | " + " | ".join(s.removeprefix("time/") for s in STAGES) + " | x CORY |")
    print("|---" * (len(STAGES) + 2) + "|")
    for case, rows in results.items():
        cells = [f"{statistics.mean(r[s] for r in rows):.2f}" if s in rows[0] else "-" for s in STAGES]
        ratio = statistics.mean(r["time/iteration"] for r in rows) / baseline
        print(f"| {case} | " + " | ".join(cells) + f" | {ratio:.2f} |")


if __name__ == "__main__":
    main()
