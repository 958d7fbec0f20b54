"""Our PPO and group-baseline iterations side by side with TRL's, on identical work.

    python bench/compare_trl.py [--iterations 3] [--skip-grpo]

PPO: SmolLM2-135M fp32, batch 16, mini-batch 16, 4 PPO epochs, exactly 16 new tokens,
top_k 0 / top_p 1 sampling, constant reward, 2 threads; TRL 0.7.10 (``PPOTrainer.generate``
with batch 16 + ``PPOTrainer.step``, the version the CORY authors build on) in its own
virtual environment with transformers 4.38.2. Group baseline: our ``grpo`` against TRL
1.16's ``GRPOTrainer`` (4 prompts x 4 samples, 16 new tokens, one update per batch, KL
coefficient 0.04, length reward, exactly 16 new tokens on both sides, no gradient checkpointing). Each side runs one warm-up iteration, then
``--iterations`` timed ones; the ratios are ours / TRL in this one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trl_env import ROOT, ensure_venv, legacy_model_folder, run_worker  # noqa: E402

from cory.agents.factory import build_agents  # noqa: E402
from cory.config.loading import resolve  # noqa: E402
from cory.config.tree import deep_merge  # noqa: E402
from cory.models.packaged import converted_folder  # noqa: E402
from cory.types import GenerateRequest  # noqa: E402


PROMPTS = ["This movie was", "I really", "The plot of this film", "What a", "The acting is", "Honestly, the",
           "My kids watched", "It is a story", "The director", "Two hours of", "I expected", "A beautiful",
           "The worst", "This is the first", "We rented it", "From the opening"]
TRL_PPO_REQUIREMENTS = ["transformers==4.38.2", "trl==0.7.10", "accelerate==0.31.0", "datasets<3",
                        "numpy<2", "pyarrow<17"]
TRL_GRPO_REQUIREMENTS = ["trl==1.16.0", "transformers==5.24.0", "accelerate==1.16.0", "datasets==5.2.0"]

TRL_PPO_WORKER = r'''
import json, sys, time, torch
torch.set_num_threads(2)
from transformers import AutoTokenizer
from trl import AutoModelForCausalLMWithValueHead, PPOConfig, PPOTrainer
args = json.loads(sys.argv[1])
torch.manual_seed(0)
tokenizer = AutoTokenizer.from_pretrained(args["model"])
tokenizer.pad_token = tokenizer.eos_token
model = AutoModelForCausalLMWithValueHead.from_pretrained(args["model"], torch_dtype=torch.float32)
ref = AutoModelForCausalLMWithValueHead.from_pretrained(args["model"], torch_dtype=torch.float32)
config = PPOConfig(model_name=args["model"], learning_rate=1.41e-5, batch_size=16, mini_batch_size=16,
                   ppo_epochs=4, gradient_accumulation_steps=1, init_kl_coef=0.2, adap_kl_ctrl=True, seed=0)
trainer = PPOTrainer(config, model, ref, tokenizer)
queries = [torch.tensor(ids) for ids in args["query_ids"]]
kwargs = {"min_length": -1, "top_k": 0.0, "top_p": 1.0, "do_sample": True, "max_new_tokens": 16,
          "min_new_tokens": 16, "pad_token_id": tokenizer.eos_token_id}
rows = []
for _ in range(args["iterations"] + 1):
    t0 = time.perf_counter()
    responses = trainer.generate(queries, return_prompt=False, batch_size=16, **kwargs)
    t1 = time.perf_counter()
    trainer.step(queries, responses, [torch.tensor(1.0)] * 16)
    t2 = time.perf_counter()
    rows.append({"generate": t1 - t0, "update": t2 - t1, "tokens": sum(len(r) for r in responses)})
print(json.dumps(rows[1:]))
'''

TRL_GRPO_WORKER = r'''
import json, sys, time, torch
torch.set_num_threads(2)
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer
args = json.loads(sys.argv[1])
prompts = args["prompts"][:4] * (args["iterations"] + 1)
def length_reward(completions, **kwargs):
    return [len(c) / 50.0 for c in completions]
class Clock(TrainerCallback):
    def __init__(self): self.times, self.start = [], None
    def on_step_begin(self, *a, **k): self.start = time.perf_counter()
    def on_step_end(self, *a, **k): self.times.append(time.perf_counter() - self.start)
clock = Clock()
config = GRPOConfig(output_dir=args["out"], per_device_train_batch_size=16, num_generations=4,
                    max_completion_length=16, learning_rate=1e-5, beta=0.04, num_iterations=1,
                    max_steps=args["iterations"] + 1, logging_steps=1, report_to=[], save_strategy="no",
                    temperature=1.0, top_k=0, top_p=1.0, use_cpu=True, bf16=False, seed=0, shuffle_dataset=False,
                    gradient_checkpointing=False, generation_kwargs={"min_new_tokens": 16})
trainer = GRPOTrainer(model=args["model"], reward_funcs=length_reward, args=config,
                      train_dataset=Dataset.from_dict({"prompt": prompts}), callbacks=[clock])
trainer.train()
print(json.dumps([{"iteration": t} for t in clock.times[1:]]))
'''


def our_agent(method: str, **overrides):
    raw = {"method": method, "model": "smollm2-135m", "device": "cpu", "threads": 2, "steps": 100,
           "output_dir": tempfile.mkdtemp(),
           "generation": {"max_new_tokens": 16, "min_new_tokens": 16, "top_k": 0, "top_p": 1.0},
           "ppo": {"batch_size": 16, "mini_batch_size": 16, "ppo_epochs": 4, "learning_rate": 1.41e-5,
                   "init_kl_coef": 0.2}}
    torch.set_num_threads(2)
    (agent,) = build_agents(resolve(deep_merge(raw, overrides)))
    return agent


def time_ours_ppo(iterations: int) -> list[dict]:
    agent = our_agent("ppo")
    rows = []
    for step in range(iterations + 1):
        reply = agent.generate(GenerateRequest(PROMPTS, step))
        started = time.perf_counter()
        agent.update([1.0] * len(PROMPTS), step)
        rows.append({"generate": reply.seconds["generate"],
                     "update": reply.seconds["reference"] + time.perf_counter() - started,
                     "tokens": sum(reply.lengths)})
    return rows[1:]


def time_ours_grpo(iterations: int) -> list[dict]:
    agent = our_agent("grpo", ppo={"ppo_epochs": 1, "init_kl_coef": 0.04, "adap_kl_ctrl": False,
                                   "learning_rate": 1e-5}, algorithm={"group_size": 4})
    prompts = [p for p in PROMPTS[:4] for _ in range(4)]
    rows = []
    for step in range(iterations + 1):
        started = time.perf_counter()
        reply = agent.generate(GenerateRequest(prompts, step))
        agent.update([len(t) / 50.0 for t in reply.texts], step)
        rows.append({"iteration": time.perf_counter() - started})
    return rows[1:]


def mean(rows: list[dict], key: str) -> float:
    return statistics.mean(r[key] for r in rows)


def report(title: str, ours: list[dict], theirs: list[dict], keys: list[str]) -> None:
    print(f"\n{title}")
    print(f"  {'phase':<10} {'ours (s)':>10} {'TRL (s)':>10} {'ours / TRL':>11}")
    for key in keys:
        a, b = mean(ours, key), mean(theirs, key)
        print(f"  {key:<10} {a:10.2f} {b:10.2f} {a / b:11.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--skip-ppo", action="store_true")
    parser.add_argument("--skip-grpo", action="store_true")
    args = parser.parse_args()

    if not args.skip_ppo:
        compare_ppo(args.iterations)
    if not args.skip_grpo:
        compare_grpo(args.iterations)


def compare_ppo(iterations: int) -> None:
    from cory.models.registry import load_tokenizer

    tokenizer = load_tokenizer("smollm2-135m")
    query_ids = [tokenizer(p)["input_ids"] for p in PROMPTS]
    ppo_python = ensure_venv(ROOT / ".venv-trl", TRL_PPO_REQUIREMENTS)
    legacy = legacy_model_folder(ROOT / ".venv-trl" / "smollm2-legacy")
    theirs = run_worker(ppo_python, TRL_PPO_WORKER,
                        {"model": str(legacy), "query_ids": query_ids, "iterations": iterations})
    ours = time_ours_ppo(iterations)
    for rows in (ours, theirs):
        for row in rows:
            row["total"] = row["generate"] + row["update"]
    report(f"PPO iteration, SmolLM2-135M fp32, batch 16, 4 epochs, 16 new tokens, 2 threads, "
           f"mean of {iterations} after a warm-up (TRL 0.7.10)", ours, theirs, ["generate", "update", "total"])


def compare_grpo(iterations: int) -> None:
    grpo_python = ensure_venv(ROOT / ".venv-trl116", TRL_GRPO_REQUIREMENTS)
    with tempfile.TemporaryDirectory() as out:
        theirs = run_worker(grpo_python, TRL_GRPO_WORKER,
                            {"model": str(converted_folder("smollm2-135m")), "prompts": PROMPTS,
                             "iterations": iterations, "out": out})
    ours = time_ours_grpo(iterations)
    report("Group baseline iteration (GRPO), 4 prompts x 4 samples, 16 new tokens, one update "
           "(TRL 1.16 GRPOTrainer)", ours, theirs, ["iteration"])


if __name__ == "__main__":
    main()
