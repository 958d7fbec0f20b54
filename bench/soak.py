"""Soak test: a long CORY run on SmolLM2, killed three times and resumed, must end with the
metrics of an uninterrupted run, and its memory must stay flat.

    python bench/soak.py [--steps 200] [--kills 3] [--seed 0] [--threads 2]

Both runs use CORY with LoRA adapters on one shared SmolLM2-135M base (batch 4, 8 new
tokens, 2 PPO epochs), ``save_every=10``. The interrupted run is SIGKILLed at three random
moments (seeded) and resumed with ``resume=auto`` each time. Compared: every metrics row
(timings and memory excepted) and the final weights; reported: resident memory per
iteration of the uninterrupted run (first, last and maximum after warm-up).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from cory.logging import read_jsonl_rows

from settings import THROUGHPUT_SETTINGS

OVERRIDES = [*THROUGHPUT_SETTINGS, "method=cory", "agents.lora.enabled=true", "ppo.learning_rate=2e-4", "ppo.batch_size=4",
             "ppo.mini_batch_size=4", "ppo.ppo_epochs=2", "generation.max_new_tokens=8",
             "generation.min_new_tokens=2", "save_every=10", "keep_last=2", "eval_every=50",
             "eval.n_prompts=16", "log.progress=false", "log.tensorboard=false"]
VOLATILE = ("time/", "memory/")


def train(out: Path, steps: int, threads: int, extra: list[str] = ()) -> subprocess.Popen:
    command = [sys.executable, "-m", "cory", "train", "configs/imdb/cory.yaml", *OVERRIDES,
               f"threads={threads}", f"steps={steps}", f"output_dir={out}", *extra]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def rows_of(out: Path) -> list[dict]:
    return read_jsonl_rows(out / "metrics.jsonl")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/soak")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of each run")
    args = parser.parse_args()
    root = Path(args.out)
    reference, killed = root / "uninterrupted", root / "killed"
    for folder in (reference, killed):
        if folder.exists():
            raise SystemExit(f"{folder} exists; remove it or pass --out")
    started = time.time()
    process = train(reference, args.steps, args.threads)
    if process.wait() != 0:
        raise SystemExit(process.stderr.read()[-3000:])
    uninterrupted_seconds = time.time() - started

    rng = random.Random(args.seed)
    kill_rows = sorted(rng.sample(range(5, args.steps - 5), args.kills))
    print(f"killing the second run after {kill_rows} metrics rows")
    for number, at in enumerate(kill_rows):
        process = train(killed, args.steps, args.threads, [] if number == 0 else ["resume=auto"])
        while process.poll() is None and len(rows_of(killed)) < at:
            time.sleep(0.2)
        time.sleep(rng.uniform(0.0, 3.0))  # land anywhere in the iteration, checkpoint writes included
        process.send_signal(signal.SIGKILL)
        process.wait()
        print(f"  killed at {len(rows_of(killed))} rows")
    process = train(killed, args.steps, args.threads, ["resume=auto"])
    if process.wait() != 0:
        raise SystemExit(process.stderr.read()[-3000:])

    def stable(rows):
        return [{k: v for k, v in r.items() if not any(part in k for part in VOLATILE)} for r in rows]
    same_rows = stable(rows_of(reference)) == stable(rows_of(killed))
    same_weights = True
    for agent in ("agent0", "agent1"):
        for name in ("model.safetensors", "value_head.safetensors"):
            a = load_file(reference / "final" / agent / name)
            b = load_file(killed / "final" / agent / name)
            same_weights &= all(torch.equal(a[k], b[k]) for k in a)
    memory = [r["memory/rss_gb"] for r in rows_of(reference) if "memory/rss_gb" in r]
    warm = memory[10:]
    print(f"uninterrupted run: {args.steps} iterations in {uninterrupted_seconds / 60:.1f} min")
    print(f"metrics rows identical after {args.kills} SIGKILLs and resumes: {same_rows}")
    print(f"final weights bit-identical: {same_weights}")
    print(f"resident memory (GB): iteration 10 {warm[0]:.3f}, last {warm[-1]:.3f}, max {max(warm):.3f}, "
          f"growth {warm[-1] - warm[0]:+.3f}")
    sys.exit(0 if same_rows and same_weights else 1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
