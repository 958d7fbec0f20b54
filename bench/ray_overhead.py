"""Local backend against the Ray backend (one actor per agent), CORY, per iteration.

    python bench/ray_overhead.py [--iterations 3] [--model smollm2-135m]

Runs CORY on IMDB twice in this process: locally (2 torch threads, agents one after the
other) and on a local Ray cluster of 2 CPUs (one actor per agent, 1 CPU and 1 thread each,
so the two agents' calls run in parallel). Also runs the tiny random model, where the
iteration is almost all overhead. Prints the mean iteration time after a warm-up, and the
ratio Ray / local.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

import ray
import torch

from cory.config.loading import load_config
from cory.trainer import Trainer

from settings import THROUGHPUT_SETTINGS

COMMON = [*THROUGHPUT_SETTINGS, "eval_every=0", "log.tensorboard=false", "log.progress=false", "log.n_samples=0",
          "generation.min_new_tokens=16", "generation.max_new_tokens=16"]


def iteration_seconds(overrides: list[str], iterations: int) -> float:
    with tempfile.TemporaryDirectory() as out:
        config = load_config("configs/imdb/cory.yaml", [*COMMON, *overrides, f"output_dir={out}",
                                                         f"steps={iterations + 1}"])
        trainer = Trainer(config)
        rows = [trainer.run_iteration(step) for step in range(iterations + 1)][1:]
        trainer.close()
    return statistics.mean(r["time/iteration"] for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    print(f"CORY, IMDB, batch 16, 16 new tokens, 4 epochs; mean of {args.iterations} iterations after a warm-up")
    for model, extra in ((args.model, []), ("tiny-random", ["task.name=toy"])):
        torch.set_num_threads(2)
        local = iteration_seconds([f"model={model}", "threads=2", *extra], args.iterations)
        remote = iteration_seconds([f"model={model}", "backend=ray", "threads=1", "ray.num_cpus_per_agent=1",
                                    *extra], args.iterations)
        print(f"  {model:<14} local {local:8.3f} s   ray {remote:8.3f} s   ray / local {remote / local:5.2f}")
    ray.shutdown()


if __name__ == "__main__":
    main()
