"""Time PPO iterations on SmolLM2-135M (batch 16, 16 new tokens), phase by phase.

    python bench/ppo_step.py [--iterations 3] [--threads 2] [--reward sentiment|vader] [--compile]

Runs the real trainer on the IMDB task (one warm-up iteration, then ``--iterations``
timed ones) and prints the mean seconds of generation, reference forward, scoring and the
PPO update (4 epochs), and of the whole iteration. ``--compile`` turns on ``ppo.compile``
(torch.compile of the update's forward); the warm-up iteration then pays the compile, and
its time is printed too.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from cory.config.loading import load_config
from cory.trainer import Trainer

from settings import THROUGHPUT_SETTINGS

PHASES = ("time/generate", "time/reference", "time/score", "time/update", "time/iteration")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reward", default="sentiment", choices=["sentiment", "vader"])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--compile", action="store_true", help="set ppo.compile=true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        config = load_config("configs/imdb/ppo.yaml", [*THROUGHPUT_SETTINGS,
            f"model={args.model}", f"steps={args.iterations + 1}", f"output_dir={out}",
            f"threads={args.threads}", "eval_every=0", "eval.n_prompts=1",
            "generation.max_new_tokens=16", "generation.min_new_tokens=16",
            "ppo.batch_size=16", "ppo.mini_batch_size=16", "ppo.ppo_epochs=4",
            f"reward.name={args.reward}", "log.tensorboard=false", "log.progress=false", "log.n_samples=0",
            f"ppo.compile={str(args.compile).lower()}"])
        trainer = Trainer(config)
        try:
            trainer.train()
        finally:
            trainer.close()
        warm_up, *rows = [r for r in trainer.rows if "time/iteration" in r]
    print(f"PPO iteration, {args.model}, batch 16, 16 new tokens, 4 epochs, {args.threads} threads, "
          f"compile {args.compile}, mean of {len(rows)} after 1 warm-up "
          f"(warm-up update {warm_up['time/update']:.1f} s):")
    for phase in PHASES:
        values = [r[phase] for r in rows]
        print(f"  {phase.removeprefix('time/'):<10} {statistics.mean(values):7.2f} s"
              f"  (min {min(values):.2f}, max {max(values):.2f})")


if __name__ == "__main__":
    main()
