"""One command that checks the GPU path and measures it.

    python bench/gpu_check.py [--models tiny-random smollm2-135m] [--iterations 3]

On a CUDA machine it runs PPO and CORY iterations (the tiny random model, SmolLM2 in fp32,
in bf16 weights and under bf16 autocast), checks that each completes with finite metrics,
checks that a run resumed from a checkpoint repeats the uninterrupted run exactly
(``deterministic: true``), places CORY's two agents on two GPUs when there are two, shards
one agent over every GPU it finds (``agents.shards``, FSDP2; the metrics must match one
process's), trains CORY with rollouts on vLLM where vLLM is installed
(``generation.engine: vllm``; vLLM's log-probs must match the policy's after every weight
push), and prints seconds per phase, tokens per second and the update's model FLOP utilisation
against the matmul peak it measures on the same GPU in the same dtype.

At the shape users train (``--shape``, default ``bench/shapes/llama-3.2-1b.json``: a
Llama-3.2-1B-like config, randomly initialised, no weights downloaded) it measures decode
tokens/s at ``--shape-batch`` x ``--shape-tokens`` (64 x 128) under bf16 autocast, with the
dynamic loop and with the captured one (``generation.compile``: a static cache and CUDA
graphs), then one PPO and one CORY iteration there (bf16 autocast, 4 epochs of mini-batch 16):
seconds per phase, update MFU against the measured bf16 peak, peak GPU memory. Targets: the
captured decode at least 10x the 350 tokens/s the first GPU run measured at SmolLM2's shape
and batch 16 (``--models`` decode lines), the update at least 30 % MFU at the 1B shape.
Any failure exits non-zero. On a machine without CUDA it prints "no CUDA device" and exits 0;
``--allow-cpu`` runs the same checks on the CPU (the test suite does, with the tiny model and
a tiny shape).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

from cory.config.loading import load_config
from cory.models.generation import Decoder, SamplingSettings, sample
from cory.models.registry import load_model
from cory.trainer import Trainer

BASE = "configs/imdb/demo.yaml"
COMMON = ["eval_every=0", "log.tensorboard=false", "log.progress=false", "log.n_samples=0",
          "reward.name=vader", "generation.max_new_tokens=16", "generation.min_new_tokens=16",
          "ppo.batch_size=16", "ppo.mini_batch_size=16", "ppo.ppo_epochs=4", "threads=null"]
PHASES = ("generate", "reference", "score", "update", "iteration")
VOLATILE = ("time/", "memory/")


@dataclass
class Case:
    name: str
    model: str
    method: str
    overrides: list[str] = field(default_factory=list)
    dtype: torch.dtype = torch.float32


def cases(models: list[str], n_gpus: int) -> list[Case]:
    found = []
    for model in models:
        for method in ("ppo", "cory"):
            found.append(Case(f"{model} {method} fp32", model, method))
        if model != "tiny-random":
            found.append(Case(f"{model} ppo bf16 weights", model, "ppo", ["dtype=bfloat16"], torch.bfloat16))
            found.append(Case(f"{model} cory bf16 autocast", model, "cory", ["mixed_precision=bf16"],
                              torch.bfloat16))
        if n_gpus >= 2:
            found.append(Case(f"{model} cory on cuda:0 + cuda:1", model, "cory",
                              ["agents.devices=[cuda:0, cuda:1]"]))
    return found


def train(model: str, method: str, device: str, out: Path, overrides: list[str]) -> Trainer:
    config = load_config(BASE, [*COMMON, f"model={model}", f"method={method}", f"device={device}",
                                f"output_dir={out}", *overrides])
    trainer = Trainer(config)
    try:
        trainer.train()
    finally:
        trainer.close()
    return trainer


def matmul_peak(device: str, dtype: torch.dtype, size: int = 4096) -> float:
    """Measured FLOP/s of a large square matmul (the best of five)."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    best = math.inf
    for _ in range(6):
        synchronise(device)
        started = time.perf_counter()
        torch.mm(a, b)
        synchronise(device)
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best


def synchronise(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(case: Case, device: str, iterations: int, peaks: dict[torch.dtype, float]) -> None:
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as out:
        trainer = train(case.model, case.method, device, Path(out), [*case.overrides, f"steps={iterations + 1}"])
    memory = f"  peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if device.startswith("cuda") else ""
    rows = [r for r in trainer.rows if "time/iteration" in r][1:]  # the first is a warm-up
    for row in rows:
        bad = [k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)]
        if bad or row.get("fault"):
            raise RuntimeError(f"{case.name}: non-finite metrics {bad} or a fault: {row.get('fault_reason')}")
    params = sum(p.numel() for p in trainer.agents.agents[0].policy.lm.parameters())
    agents = range(len(trainer.agents))
    batch, epochs = trainer.config.ppo.batch_size, trainer.config.ppo.ppo_epochs
    mean = {phase: statistics.mean(r[f"time/{phase}"] for r in rows) for phase in PHASES}
    generated = statistics.mean(sum(batch * r[f"agent{a}/response_length"] for a in agents) for r in rows)
    trained = statistics.mean(sum(batch * epochs * (r[f"agent{a}/prompt_length"] + r[f"agent{a}/response_length"])
                                  for a in agents) for r in rows)
    mfu = 6 * params * trained / mean["update"] / peaks[case.dtype]
    phases = "  ".join(f"{p} {mean[p]:.3f}s" for p in PHASES)
    print(f"  {case.name:<34} {phases}  gen {generated / mean['generate']:8.0f} tok/s  "
          f"update {trained / mean['update']:8.0f} tok/s  MFU {mfu:6.1%}{memory}")


def shaped_model(config_file: Path, folder: Path) -> str:
    """A randomly initialised model of the shape ``config_file`` describes, with the tiny BPE
    tokenizer (built in code), saved as a model folder: the cost of the real model, no weights."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from cory.models.tiny import bpe_tokenizer

    tokenizer = bpe_tokenizer()
    settings = json.loads(config_file.read_text())
    settings.update(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                    pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**settings), dtype=torch.bfloat16)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def measure_decode(model: str, device: str, batch: int, tokens: int) -> None:
    """New tokens per second of the dynamic decode loop and the captured one (static cache,
    compiled step), every row forced to ``tokens``; bf16 autocast on a GPU."""
    loaded = load_model(model)
    lm = loaded.model.to(device).eval()
    encoded = loaded.tokenizer(["the movie was"] * batch, return_tensors="pt")
    ids, mask = encoded.input_ids.to(device), encoded.attention_mask.to(device)
    settings = SamplingSettings(max_new_tokens=tokens, min_new_tokens=tokens)
    found = {}
    for name, decoder in (("eager", Decoder()), ("captured", Decoder(compiled=True, device=torch.device(device)))):
        def run() -> None:
            generator = torch.Generator(device=device).manual_seed(0)
            with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=device.startswith("cuda")):
                sample(lm, ids, mask, settings, [], loaded.tokenizer.pad_token_id, generator=generator, decoder=decoder)
            synchronise(device)
        started = time.perf_counter()
        run()  # the captured loop compiles and captures here
        first = time.perf_counter() - started
        started = time.perf_counter()
        run()
        found[name] = (batch * tokens / (time.perf_counter() - started), first)
    print(f"  decode {model.split('/')[-1]} {batch}x{tokens}: eager {found['eager'][0]:.0f} tok/s, captured "
          f"{found['captured'][0]:.0f} tok/s ({found['captured'][0] / found['eager'][0]:.1f}x; its first run, "
          f"compiling and capturing, {found['captured'][1]:.1f} s)")


def check_shape(shape: Path, device: str, batch: int, tokens: int, peaks: dict[torch.dtype, float]) -> None:
    """Decode and one PPO and one CORY iteration at the shape users train (module docstring)."""
    with tempfile.TemporaryDirectory() as folder:
        model = shaped_model(shape, Path(folder) / shape.stem)
        measure_decode(model, device, batch, tokens)
        settings = ["mixed_precision=bf16", f"ppo.batch_size={batch}", f"ppo.mini_batch_size={min(batch, 16)}",
                    f"generation.max_new_tokens={tokens}", f"generation.min_new_tokens={tokens}",
                    "reward.name=vader"]
        for method in ("ppo", "cory"):
            measure(Case(f"{shape.stem} {method} bf16 autocast", model, method, settings, torch.bfloat16),
                    device, 1, peaks)


def check_resume(model: str, device: str) -> None:
    """A run stopped at iteration 2 and resumed must repeat the uninterrupted run exactly."""
    settings = ["deterministic=true", "save_every=2", "keep_last=1"]
    with tempfile.TemporaryDirectory() as out:
        whole = train(model, "cory", device, Path(out) / "whole", [*settings, "steps=4"])
        train(model, "cory", device, Path(out) / "split", [*settings, "steps=2"])
        resumed = train(model, "cory", device, Path(out) / "split", [*settings, "steps=4", "resume=auto"])
    torch.use_deterministic_algorithms(False)
    strip = lambda rows: [{k: v for k, v in r.items() if not any(p in k for p in VOLATILE)} for r in rows]
    if strip(whole.rows) != strip(resumed.rows):
        raise RuntimeError(f"resume on {device} with {model} did not repeat the uninterrupted run")
    print(f"  resume of {model} cory on {device}: exact over 4 iterations")


def check_sharding(model: str, device: str, n_gpus: int) -> None:
    """PPO with the agent sharded over every GPU (FSDP2, a Ray worker group; on the CPU two
    gloo ranks) must give one process's metrics; prints both runs' seconds per iteration."""
    ranks = n_gpus if device == "cuda" else 2
    if ranks < 2:
        print("  sharding: skipped (one GPU; agents.shards needs two)")
        return
    settings = ["steps=3", "ppo.ppo_epochs=2", "ppo.mini_batch_size=8"]
    per_rank = ["ray.num_gpus_per_agent=1", "ray.num_cpus_per_agent=1"] if device == "cuda" else \
        ["ray.num_cpus_per_agent=0.5"]
    with tempfile.TemporaryDirectory() as out:
        one = train(model, "ppo", device, Path(out) / "one", settings)
        sharded = train(model, "ppo", device, Path(out) / "sharded",
                        [*settings, "backend=ray", f"agents.shards={ranks}", *per_rank])
    def worst(pairs) -> tuple[float, str]:
        return max((abs(a[k] - b[k]) / max(abs(a[k]), 1.0), f"{k} at iteration {a['step']}") for a, b in pairs
                   for k in a if isinstance(a[k], float) and not any(p in k for p in VOLATILE)
                   and "clip_fraction" not in k)

    # Differences relative to the value, absolute below 1 (a KL near 0 at iteration 0).
    # Iteration 0 samples the same rollout on both sides, so its update must agree closely;
    # after it, float rounding of the sharded step can flip a sampled token and the runs part.
    first, anywhere = worst([(one.rows[0], sharded.rows[0])]), worst(zip(one.rows, sharded.rows))
    seconds = [statistics.mean(r["time/iteration"] for r in t.rows if "time/iteration" in r) for t in (one, sharded)]
    print(f"  {model} ppo sharded over {ranks} ranks: iteration 0 within {first[0]:.1e} of one process "
          f"(worst: {first[1]}); all 3 iterations within {anywhere[0]:.1e} ({anywhere[1]}); "
          f"{seconds[0]:.2f} s/iteration in one process, {seconds[1]:.2f} sharded")
    if first[0] > 1e-3:
        raise RuntimeError(f"the sharded agent's first update differs from one process's by {first[0]:.1e}")


def check_vllm(device: str) -> None:
    """CORY on tiny-random-h32 with each agent's rollouts on a vLLM engine: after every
    weight push vLLM's sampled log-probs must match the trained policy's."""
    from cory.engines.vllm_engine import engine_python

    python = engine_python("auto")
    probe = subprocess.run([python, "-c", "import vllm"], capture_output=True)
    if probe.returncode != 0:
        print(f"  vllm: skipped (not installed for {python}; make vllm on CPU, pip install vllm on a GPU)")
        return
    with tempfile.TemporaryDirectory() as out:
        trainer = train("tiny-random-h32", "cory", device, Path(out),
                        ["steps=3", "generation.engine=vllm", "agents.dropout=off", "generation.penalise_padding=false"])
    gaps = [r[f"agent{a}/sampler_logprob_gap"] for r in trainer.rows for a in (0, 1)
            if f"agent{a}/sampler_logprob_gap" in r]
    timed = [r["time/generate"] for r in trainer.rows if "time/generate" in r]
    print(f"  vllm: CORY on tiny-random-h32, 3 iterations: largest log-prob gap {max(gaps):.1e} over "
          f"{len(gaps)} rollouts; generation {timed[0]:.1f} s with the engines' start, then "
          f"{statistics.mean(timed[1:]):.2f} s per iteration")
    if max(gaps) > 1e-3:
        raise RuntimeError(f"vLLM's log-probs differ from the policy's by {max(gaps):.1e}: stale weights?")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["tiny-random", "smollm2-135m"])
    parser.add_argument("--iterations", type=int, default=3, help="timed iterations after one warm-up")
    parser.add_argument("--allow-cpu", action="store_true", help="run the checks on the CPU when there is no GPU")
    parser.add_argument("--no-vllm", action="store_true", help="skip the vLLM engine check")
    parser.add_argument("--shape", type=Path, help="model config of the shape users train (default on a GPU: "
                                                   "bench/shapes/llama-3.2-1b.json; on the CPU: none)")
    parser.add_argument("--shape-batch", type=int, default=64)
    parser.add_argument("--shape-tokens", type=int, default=128)
    args = parser.parse_args()
    if torch.cuda.is_available():
        device, n_gpus = "cuda", torch.cuda.device_count()
        print(f"{n_gpus} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    elif args.allow_cpu:
        device, n_gpus = "cpu", 0
        print(f"no CUDA device: running the checks on the CPU ({torch.get_num_threads()} threads)")
    else:
        print("no CUDA device: nothing to check (pass --allow-cpu to run the checks on the CPU)")
        return 0
    peaks = {dtype: matmul_peak(device, dtype, 4096 if device == "cuda" else 1024)
             for dtype in (torch.float32, torch.bfloat16)}
    print("  matmul peak: " + ", ".join(f"{str(d).removeprefix('torch.')} {p / 1e12:.1f} TFLOP/s"
                                        for d, p in peaks.items()))
    shape = args.shape or (Path(__file__).parent / "shapes" / "llama-3.2-1b.json" if device == "cuda" else None)
    failures = 0
    for check in [lambda: check_resume(args.models[0], device),
                  *[lambda m=m: measure_decode(m, device, 16, 16) for m in args.models],
                  lambda: check_shape(shape, device, args.shape_batch, args.shape_tokens, peaks) if shape
                  else print("  shape: skipped (no --shape on the CPU)"),
                  lambda: check_sharding(args.models[0], device, n_gpus),
                  lambda: print("  vllm: skipped (--no-vllm)") if args.no_vllm else check_vllm(device),
                  *[lambda c=c: measure(c, device, args.iterations, peaks) for c in cases(args.models, n_gpus)]]:
        try:
            check()
        except Exception:  # every case runs; any failure makes the exit code non-zero
            failures += 1
            traceback.print_exc()
    print(f"{failures} failure(s)" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
