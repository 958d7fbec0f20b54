"""Our sampler against a vLLM engine: tokens per second, and the cost of a weight push.

    python bench/vllm_sampler.py [--model smollm2-135m] [--threads 2] [--repeats 2] [--shapes 16x16 128x128]

For each batch size x response length (16/128 x 16/128) both samplers answer the same IMDB
prompts with every row forced to the full length (``min_new_tokens`` = budget), after one
warm-up call; the best of ``--repeats`` timed calls is printed. Then the policy's weights
are pushed into the running engine a few times (the per-update cost). Needs vLLM
(``make vllm``).
"""

from __future__ import annotations

import argparse
import time

import torch

from cory.agents.factory import build_agents
from cory.agents.sampling import sampling_settings
from cory.config.loading import load_config
from cory.models.generation import sample
from cory.tasks import build_task

SHAPES = ["16x16", "128x16", "16x128", "128x128"]


def timed(call, repeats: int) -> float:
    call()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--shapes", nargs="+", default=SHAPES, help="batch x tokens")
    parser.add_argument("--kv-cache-gib", type=int, default=3,
                        help="vLLM's CPU KV cache; 128 x 128 needs more than 1 GiB for SmolLM2")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = load_config("configs/imdb/ppo.yaml", [f"model={args.model}", f"threads={args.threads}",
                                                    "device=cpu", "generation.engine=vllm", "generation.penalise_padding=false", "agents.dropout=off",
                                                    "generation.max_new_tokens=128", "output_dir=/tmp/unused",
                                                    f"generation.vllm.cpu_kv_cache_gib={args.kv_cache_gib}"])
    (agent,) = build_agents(config, indices=[0])
    prompts = [p.query for p in build_task(config.task, agent.tokenizer).train[:128]]
    try:
        print(f"model {args.model}, threads {args.threads}; tokens/s (best of {args.repeats} warm calls)")
        print("batch x tokens   ours     vLLM   speed-up")
        for batch, tokens in (map(int, shape.split("x")) for shape in args.shapes):
            encoded = agent.prompts.encode(prompts[:batch], agent.device)
            settings = sampling_settings(config.generation, greedy=False)
            settings = type(settings)(**{**settings.__dict__, "max_new_tokens": tokens, "min_new_tokens": tokens})
            generator = torch.Generator().manual_seed(0)
            ours = timed(lambda: sample(agent.policy.lm, encoded.ids, encoded.mask, settings, agent.stop_ids,
                                        agent.tokenizer.pad_token_id, generator=generator), args.repeats)
            engine = timed(lambda: agent.engine.sample(encoded.ids, encoded.mask, settings, agent.stop_ids,
                                                       agent.tokenizer.pad_token_id, list(range(batch)),
                                                       [tokens] * batch, []), args.repeats)
            count = batch * tokens
            print(f"{batch:5d} x {tokens:<5d} {count / ours:8.0f} {count / engine:8.0f} {ours / engine:8.2f}x")
        pushes = []
        for _ in range(3):
            agent.engine.current = False
            agent.engine.push_weights()
            pushes.append(agent.engine.seconds_loading)
        size = sum(p.numel() * p.element_size() for p in agent.policy.lm.parameters()) / 2**20
        print(f"weight push ({size:.0f} MiB): {min(pushes):.2f}-{max(pushes):.2f} s; "
              f"engine start {agent.engine.seconds_starting:.0f} s")
    finally:
        agent.close()


if __name__ == "__main__":
    main()
