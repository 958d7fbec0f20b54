"""What CORY costs over PPO: iteration time and peak memory (RSS) on the same batch.

    python bench/cory_cost.py [--iterations 3]

Each configuration runs in a fresh process (so its peak RSS is its own): single-agent PPO,
two independent PPO agents on the same prompts (the MoE baseline: what two agents cost when
the second one's prompts are as short as the first one's), CORY with two full models (one
shared frozen reference), CORY whose observer sees only the query and the pioneer's answer
(``cory_bare``: the shortest observer prompt the method allows, a lower bound on its cost),
and CORY with LoRA adapters on one shared base (the reference is
the base with adapters off), plus PPO with LoRA. All on
the IMDB task with SmolLM2-135M, batch 16, 16 new tokens, 4 epochs, 2 threads; one warm-up
iteration, then ``--iterations`` timed ones.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile

from settings import THROUGHPUT_SETTINGS

CASES = {
    "ppo": ["configs/imdb/ppo.yaml"],
    "two_ppo": ["configs/imdb/moe.yaml"],
    "cory": ["configs/imdb/cory.yaml"],
    "cory_bare": ["configs/imdb/cory.yaml", "task.observer_template={query}{answers}"],
    "ppo_lora": ["configs/imdb/ppo.yaml", "agents.lora.enabled=true", "ppo.learning_rate=2e-4"],
    "cory_lora": ["configs/imdb/cory_lora.yaml"],
}
COMMON = [*THROUGHPUT_SETTINGS, "threads=2", "eval_every=0", "generation.min_new_tokens=16", "generation.max_new_tokens=16",
          "log.tensorboard=false", "log.progress=false", "log.n_samples=0"]


def measure(case: str, iterations: int) -> None:
    """Child process: time iterations of one case, print JSON with the peak RSS."""
    from cory.config.loading import load_config
    from cory.trainer import Trainer

    path, *extra = CASES[case]
    with tempfile.TemporaryDirectory() as out:
        config = load_config(path, [*COMMON, *extra, f"output_dir={out}", f"steps={iterations + 1}"])
        trainer = Trainer(config)
        rows = [trainer.run_iteration(step) for step in range(iterations + 1)][1:]
        trainer.close()
    keys = ["time/iteration", "time/generate", "time/reference", "time/update"]
    summary = {key: statistics.mean(r[key] for r in rows) for key in keys}
    for role in ("policy", "pioneer", "observer", "role0", "role1"):
        if f"{role}/prompt_length" in rows[0]:
            summary[f"{role} prompt+response tokens"] = statistics.mean(
                r[f"{role}/prompt_length"] + r[f"{role}/response_length"] for r in rows)
    summary["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps(summary))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES),
                        help="which cases to run (ppo, the baseline of the ratios, always runs)")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        measure(args.case, args.iterations)
        return
    results = {}
    for case in dict.fromkeys(["ppo", *args.cases]):
        out = subprocess.run([sys.executable, __file__, "--case", case, "--iterations", str(args.iterations)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"{case} failed:\n{out.stderr[-3000:]}")
        results[case] = json.loads(out.stdout.strip().splitlines()[-1])
    base = results["ppo"]
    print(f"IMDB, SmolLM2-135M, batch 16, 16 new tokens, 4 epochs, 2 threads; mean of {args.iterations} "
          "iterations after a warm-up; ratios against single-agent PPO (full model)")
    print(f"  {'case':<10} {'iter (s)':>9} {'x PPO':>6} {'per token':>9} {'gen':>6} {'ref':>6} {'update':>7} "
          f"{'peak RSS (GB)':>14} {'x PPO':>6}  tokens per sequence")
    for case, r in results.items():
        tokens = {k.split()[0]: v for k, v in r.items() if k.endswith("tokens")}
        per_token = (r["time/iteration"] / sum(tokens.values())) / (base["time/iteration"] / sum(
            v for k, v in base.items() if k.endswith("tokens")))
        print(f"  {case:<10} {r['time/iteration']:9.2f} {r['time/iteration'] / base['time/iteration']:6.2f} "
              f"{per_token:9.2f} {r['time/generate']:6.2f} {r['time/reference']:6.2f} {r['time/update']:7.2f} "
              f"{r['peak_rss_gb']:14.2f} {r['peak_rss_gb'] / base['peak_rss_gb']:6.2f}  "
              + ", ".join(f"{role} {n:.0f}" for role, n in tokens.items()))
    print("per token: seconds per prompt+response token processed (summed over roles), x PPO's")


if __name__ == "__main__":
    main()
