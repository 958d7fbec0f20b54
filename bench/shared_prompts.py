"""Time a GRPO iteration on arithmetic with and without shared prompts, beside PPO.

    python bench/shared_prompts.py [--iterations 2] [--threads 2]

SmolLM2-135M on configs/arithmetic/grpo.yaml (8 problems x 8 samples, one pass in mini-batches
of 16): three runs on the same machine, one after the other, each one warm-up iteration and
then ``--iterations`` timed ones: GRPO with ``ppo.share_prompts`` off, on, and PPO over the same
64 responses (64 problems, one sample each, one pass, mini-batches of 16). Prints each run's
mean seconds per stage and the ratios issue 56 sets targets for: shared / not shared
(<= 0.7) and shared / PPO (<= 1.1).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from cory.config.loading import load_config
from cory.trainer import Trainer

STAGES = ("time/generate", "time/reference", "time/score", "time/update", "time/iteration")


def timed(overrides: list[str], iterations: int, threads: int) -> dict[str, float]:
    """Mean seconds per stage over the timed iterations of one run."""
    with tempfile.TemporaryDirectory() as out:
        config = load_config("configs/arithmetic/grpo.yaml", [
            *overrides, f"steps={iterations + 1}", f"output_dir={out}", f"threads={threads}", "eval_every=0",
            "eval.n_prompts=1", "log.tensorboard=false", "log.progress=false", "log.n_samples=0"])
        trainer = Trainer(config)
        try:
            trainer.train()
        finally:
            trainer.close()
        rows = [r for r in trainer.rows if "time/iteration" in r][1:]
    return {stage: statistics.mean(r.get(stage, 0.0) for r in rows) for stage in STAGES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    runs = {
        "grpo, prompts not shared": ["ppo.share_prompts=false"],
        "grpo, prompts shared": ["ppo.share_prompts=true"],
        "ppo, 64 problems x 1": ["method=ppo", "ppo.share_prompts=false"],
    }
    seconds = {name: timed(overrides, args.iterations, args.threads) for name, overrides in runs.items()}
    print(f"SmolLM2-135M, arithmetic, 64 responses per iteration, {args.threads} threads, "
          f"mean of {args.iterations} iterations after 1 warm-up (seconds):")
    print(f"  {'run':<26}" + "".join(f"{stage.removeprefix('time/'):>11}" for stage in STAGES))
    for name, stages in seconds.items():
        print(f"  {name:<26}" + "".join(f"{stages[stage]:11.2f}" for stage in STAGES))
    whole = {name: stages["time/iteration"] for name, stages in seconds.items()}
    print(f"shared / not shared: {whole['grpo, prompts shared'] / whole['grpo, prompts not shared']:.2f} (target <= 0.7); "
          f"shared / ppo: {whole['grpo, prompts shared'] / whole['ppo, 64 problems x 1']:.2f} (target <= 1.1)")


if __name__ == "__main__":
    main()
