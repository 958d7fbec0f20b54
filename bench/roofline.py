"""How close the update gets to this machine's limit.

    python bench/roofline.py [--threads 2] [--size 2048]

Measures the fp32 matmul peak (``torch.mm`` of two large square matrices), then the FLOP/s
of our PPO update on SmolLM2-135M (forward + backward + AdamW on 16 x (8 + 16) tokens,
counted as 6 x params x tokens) and of a no-grad forward (2 x params x tokens), and the
generation throughput of our sampler against ``model.generate`` on the same batch.
"""

from __future__ import annotations

import argparse
import time

import torch

from cory.models.generation import SamplingSettings, sample
from cory.models.policy import Policy, ValueHead, hidden_size_of
from cory.models.registry import load_model, stop_token_ids


def best_of(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    a, b = torch.randn(args.size, args.size), torch.randn(args.size, args.size)
    peak = 2 * args.size**3 / best_of(lambda: torch.mm(a, b), 5) / 1e9

    loaded = load_model("smollm2-135m")
    policy = Policy(loaded.model, ValueHead(hidden_size_of(loaded.model)))
    params = sum(p.numel() for p in loaded.model.parameters())
    batch, prompt, response = 16, 8, 16
    query = torch.randint(100, 10000, (batch, prompt))
    answer = torch.randint(100, 10000, (batch, response))
    ones_q, ones_r = torch.ones_like(query), torch.ones_like(answer)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6, fused=True)

    def update() -> None:
        out = policy(query, ones_q, answer, ones_r)
        (out.logprobs.mean() + out.values.square().mean()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def forward() -> None:
        with torch.inference_mode():
            policy(query, ones_q, answer, ones_r, with_entropy=False)

    tokens = batch * (prompt + response)
    update_flops = 6 * params * tokens / best_of(update, args.repeats) / 1e9
    forward_flops = 2 * params * tokens / best_of(forward, args.repeats) / 1e9

    settings = SamplingSettings(max_new_tokens=response, min_new_tokens=response)
    ours = best_of(lambda: sample(loaded.model, query, ones_q, settings, stop_token_ids(loaded),
                                  loaded.tokenizer.pad_token_id, torch.Generator().manual_seed(0),
                                  value_head=policy.value_head), args.repeats)
    with torch.inference_mode():
        hf = best_of(lambda: loaded.model.generate(
            input_ids=query, attention_mask=ones_q, do_sample=True, top_k=0, top_p=1.0,
            max_new_tokens=response, min_new_tokens=response,
            pad_token_id=loaded.tokenizer.pad_token_id), args.repeats)
    print(f"{args.threads} threads, SmolLM2-135M ({params / 1e6:.1f}M parameters), batch {batch}, "
          f"{prompt} + {response} tokens")
    print(f"  matmul peak (fp32, {args.size}^2)     {peak:7.1f} GFLOP/s")
    print(f"  update (fwd + bwd + AdamW)          {update_flops:7.1f} GFLOP/s  = {update_flops / peak:5.1%} of peak")
    print(f"  forward (no grad)                   {forward_flops:7.1f} GFLOP/s  = {forward_flops / peak:5.1%} of peak")
    print(f"  generation, ours (+ values, logprobs) {batch * response / ours:7.1f} tokens/s ({ours:.2f} s)")
    print(f"  generation, model.generate          {batch * response / hf:7.1f} tokens/s ({hf:.2f} s)"
          f"  -> ours / generate time = {ours / hf:.2f}")


if __name__ == "__main__":
    main()
