"""Decode throughput of the sampler's loops: dynamic cache (today's default), static cache,
static cache with the step compiled (``generation.compile``), and vLLM where it is installed.

    python bench/decode.py [--model smollm2-135m] [--threads 2] [--shapes 16x16,128x16,16x128] [--no-vllm]

Each shape is ``batch x new tokens``: IMDB-like prompts (8 tokens), every row forced to the
full budget (EOS suppressed), sampled at temperature 1. Each loop runs once to warm up (the
compiled one compiles there; its compile time is printed), then three timed runs; the table
gives new tokens per second (batch x tokens / seconds, the median run). On a GPU the same
script measures CUDA-graph capture (``mode="reduce-overhead"``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from cory.models.generation import Decoder, SamplingSettings, sample
from cory.models.registry import load_model

PROMPT = "This movie was one of the"


def timed(run: Callable[[], object], repeats: int = 3) -> tuple[float, float]:
    """(first run's seconds, median of ``repeats`` further runs)."""
    started = time.perf_counter()
    run()
    first = time.perf_counter() - started
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return first, statistics.median(times)


def hf_loops(model: str, device: torch.device, shapes: list[tuple[int, int]]) -> dict[str, dict[tuple[int, int], float]]:
    loaded = load_model(model)
    lm = loaded.model.to(device).eval()
    tokenizer = loaded.tokenizer
    results: dict[str, dict[tuple[int, int], float]] = {}
    decoders = {"dynamic": lambda: Decoder(), "static": lambda: Decoder(static=True),
                "static + compiled": lambda: Decoder(compiled=True, device=device)}
    for name, make in decoders.items():
        results[name] = {}
        decoder = make()
        for batch, tokens in shapes:
            encoded = tokenizer([PROMPT] * batch, return_tensors="pt")
            ids, mask = encoded.input_ids.to(device), encoded.attention_mask.to(device)
            settings = SamplingSettings(max_new_tokens=tokens, min_new_tokens=tokens)

            def run() -> object:
                generator = torch.Generator(device=device).manual_seed(0)
                return sample(lm, ids, mask, settings, [], tokenizer.pad_token_id, generator=generator,
                              decoder=decoder)
            first, median = timed(run)
            results[name][(batch, tokens)] = batch * tokens / median
            if name == "static + compiled":
                print(f"  compiled {batch}x{tokens}: first run (compile) {first:.1f} s")
    return results


def vllm_loop(model: str, shapes: list[tuple[int, int]], threads: int) -> dict[tuple[int, int], float]:
    from cory.config.schema import VLLMConfig
    from cory.engines.vllm_engine import VLLMEngine

    loaded = load_model(model)
    tokenizer = loaded.tokenizer
    found: dict[tuple[int, int], float] = {}
    engine = VLLMEngine("bench", loaded.model, tokenizer, VLLMConfig(), 0, 256, torch.device("cpu"), threads)
    try:
        for batch, tokens in shapes:
            encoded = tokenizer([PROMPT] * batch, return_tensors="pt")
            settings = SamplingSettings(max_new_tokens=tokens, min_new_tokens=tokens)

            def run() -> object:
                return engine.sample(encoded.input_ids, encoded.attention_mask, settings, [],
                                     tokenizer.pad_token_id, list(range(batch)), [tokens] * batch, [])
            _, median = timed(run)
            found[(batch, tokens)] = batch * tokens / median
    finally:
        engine.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shapes", default="16x16,128x16,16x128")
    parser.add_argument("--no-vllm", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shapes = [tuple(int(n) for n in shape.split("x")) for shape in args.shapes.split(",")]
    results = hf_loops(args.model, device, shapes)  # type: ignore[arg-type]
    if not args.no_vllm:
        results["vllm"] = vllm_loop(args.model, shapes, args.threads)  # type: ignore[arg-type]
    print(f"{args.model} on {device} ({args.threads} threads): new tokens per second, median of 3 after a warm-up")
    print("| loop | " + " | ".join(f"{b}x{t}" for b, t in shapes) + " |")
    print("|---" * (len(shapes) + 1) + "|")
    for name, row in results.items():
        print(f"| {name} | " + " | ".join(f"{row[shape]:.0f}" for shape in shapes) + " |")


if __name__ == "__main__":
    main()
