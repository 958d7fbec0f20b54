"""The typed config tree of a run (the schema); ``cory.config.loading`` builds one from YAML and
dotted CLI overrides, and ``cory.config.validation`` checks what spans several keys.

Names follow TRL's ``PPOConfig`` where the concept is the same, so a TRL config ports by
reading it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import yaml

from cory.algorithms.registry import AlgorithmName
from cory.config.methods import METHODS
from cory.config.topologies import DEFAULT_AGENTS, TOPOLOGIES
from cory.config.tree import option, to_dict
from cory.redaction import redacted
from cory.trackers import installed_trackers


@dataclass
class VLLMConfig:
    python: str = option(
        "auto", help="interpreter that runs the engine; auto: $CORY_VLLM_PYTHON, else .venv-vllm/bin/python "
                     "in the working folder or beside the cory source (`make vllm`), else this one")
    gpu_memory_utilization: float = option(
        0.3, gt=0, le=1, help="share of the GPU's memory the engine may take (the agents train beside it)")
    cpu_kv_cache_gib: int = option(1, ge=1, help="KV cache on CPU, whole GiB (VLLM_CPU_KVCACHE_SPACE)")
    max_model_len: int = option(0, ge=0, help="longest prompt + response the engine serves; 0: the model's context")
    enforce_eager: bool = option(True, help="no CUDA graphs (they take minutes to capture at start)")
    start_timeout: float = option(600.0, gt=0, help="seconds the engine may take to start or reload weights")
    sample_timeout: float = option(1800.0, gt=0, help="seconds one batch of rollouts may take")
    correction: Literal["none", "tis"] = option(
        "none", help="tis: truncated importance sampling, each token's policy loss weighted by "
                     "min(p_policy / p_sampler, tis_cap) for the difference between vLLM's kernels and "
                     "the policy's (needs plain sampling: no top_k, top_p, repetition penalty or min_new_tokens)")
    tis_cap: float = option(2.0, gt=0, help="tis: the largest importance weight C")


@dataclass
class GenerationConfig:
    max_new_tokens: int = option(16, ge=1, help="most tokens per response")
    min_new_tokens: int = option(
        0, ge=0, help="EOS is suppressed before this many tokens (0: never, as TRL's min_length -1)")
    length_sampler: list[int] | None = option(
        None, ge=1, help="[min, max], both included (TRL's LengthSampler(a, b) is [a, b - 1]): "
                         "the token budget is drawn uniformly from it")
    length_sampler_per: Literal["row", "batch"] = option(
        "row", help="row: a budget per response; batch: one budget per iteration, shared by "
                    "every agent (the CORY authors' scripts)")
    temperature: float = option(1.0, gt=0)
    top_k: int = option(0, ge=0, help="0 switches top-k off")
    top_p: float = option(1.0, gt=0, le=1)
    logprobs: Literal["model", "sampler"] = option(
        "model", help="the log-probs the update's ratio and KL read: model: the model's distribution at the "
                      "temperature (TRL, verl; the sampler's top-k/top-p filters are ignored); sampler: the "
                      "distribution each token was drawn from, top-k/top-p filtered and renormalised, which "
                      "the update recomputes through the same filters")
    repetition_penalty: float = option(
        1.0, gt=0, help="Hugging Face's: logits of tokens already in the prompt or response are "
                        "divided (positive) or multiplied (negative) by it; 1 switches it off")
    skip_special_tokens: bool = option(
        True, help="decode responses without special tokens; false keeps them (e.g. EOS) in the "
                   "text the reward and the observer see, as the CORY authors' scripts do")
    penalise_padding: bool = option(
        False, help="the repetition penalty also counts the prompt's left padding as seen (with "
                    "pad = EOS it penalises EOS), as Hugging Face's generate under TRL 0.7's "
                    "batched generation does in the CORY authors' scripts")
    compile: bool = option(
        False, help="hf engine: decode with a static KV cache written in place and the decode step "
                    "compiled (torch.compile mode reduce-overhead: CUDA graphs on a GPU; on CPU it needs "
                    "a C++ compiler); same tokens, a one-off compile per batch shape")
    rows_per_call: int = option(
        0, ge=0, help="answer a request in chunks of at most this many rows (0: all at once); caps the "
                      "memory of one call (a 262k-token vocabulary's logits at an evaluation of 256 "
                      "rows), the samples differ from one call's")
    engine: Literal["hf", "vllm"] = option(
        "hf", help="hf: our decode loop in the agent's process; vllm: a vLLM engine per agent in its own "
                   "process, weights pushed after every update (log-probs and values recomputed by the policy)")
    vllm: VLLMConfig = option(VLLMConfig)


@dataclass
class PPOConfig:
    learning_rate: float = option(1.41e-5, gt=0)
    batch_size: int = option(16, ge=1, help="responses per agent per iteration")
    mini_batch_size: int = option(16, ge=1)
    gradient_accumulation_steps: int = option(1, ge=1)
    ppo_epochs: int = option(4, ge=1)
    init_kl_coef: float = option(0.2, ge=0)
    adap_kl_ctrl: bool = True
    target: float = option(6.0, gt=0)
    horizon: float = option(10000.0, gt=0)
    gamma: float = option(1.0, ge=0, le=1)
    lam: float = option(0.95, ge=0, le=1)
    cliprange: float = option(0.2, gt=0)
    cliprange_value: float = option(0.2, gt=0)
    vf_coef: float = option(0.1, ge=0)
    kl_penalty: Literal["kl", "abs", "mse", "full"] = "kl"
    use_score_scaling: bool = False
    use_score_norm: bool = False
    score_clip: float | None = option(None, gt=0)
    whiten_rewards: bool = False
    whiten_advantages: bool = True
    max_grad_norm: float | None = option(None, gt=0)
    ratio_threshold: float | None = option(
        None, gt=0, help="TRL's guard: a mini-batch whose mean probability ratio exceeds it has its "
                         "losses zeroed (the optimiser still steps); null: off, TRL's default is 10")
    weight_decay: float = option(0.0, ge=0)
    adam_eps: float = option(1e-8, gt=0)
    lr_scheduler: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = option(0, ge=0)
    fast_path: bool = option(
        True, help="numerically equivalent speed-ups: log-probs and values from generation, "
                   "padding trimmed per mini-batch, LM head on response positions only, fused "
                   "AdamW; false runs the straightforward reference path")
    share_prompts: bool = option(
        False, help="rows that repeat a prompt (grpo and rloo groups) run it once when sampling and scoring: "
                    "faster, equal to the one-pass path to float rounding but not bit for bit, so off by "
                    "default (runs recorded before it reproduce exactly); needs fast_path")
    compile: bool = option(
        False, help="torch.compile the policy forward of the update (dynamic shapes): a one-off "
                    "compile of minutes, then faster updates; on CPU it needs a C++ compiler")


@dataclass
class AlgorithmConfig:
    name: AlgorithmName = option("ppo", help="the per-agent algorithm (cory.algorithms.registry)")
    baseline_decay: float = option(0.9, ge=0, lt=1, help="reinforce: moving-average decay")
    group_size: int = option(4, ge=2, help="rloo / grpo: samples per prompt")
    returns: Literal["discounted", "trl_gae"] = option(
        "discounted", help="reinforce_clip: discounted reward-to-go, or TRL's compute_advantages "
                           "returns (GAE(gamma, lam) advantages + the values of a value head "
                           "that is never trained), as the CORY authors' REINFORCE trainer")
    whiten_returns: bool = option(
        False, help="reinforce_clip: whiten the returns over the batch (adds a batch-mean "
                    "baseline; the authors' REINFORCE does not)")
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] | None = option(
        None, help="how the policy loss is averaged over an optimiser step (TRL's names): grpo: each "
                   "sequence's token mean, then the mean over sequences; bnpo: the mean over this rank's "
                   "tokens; dr_grpo: the sum over tokens / (sequences x generation.max_new_tokens); dapo: "
                   "the mean over every rank's tokens; null: TRL 0.7's token mean per mini-batch, "
                   "accumulated mini-batches weighted equally")
    beta: float = option(0.0, ge=0, help="weight of a KL(policy || reference) loss term per token (TRL "
                                         "GRPO's beta); 0: off. Independent of the KL in the reward "
                                         "(ppo.init_kl_coef)")
    kl_estimator: Literal["k1", "k2", "k3"] = option(
        "k3", help="the KL loss term's estimator, with d = log p - log p_ref: k1 = d, k2 = d^2 / 2, "
                   "k3 = exp(-d) + d - 1 (TRL's and verl's low_var_kl)")
    scale_rewards: Literal["group", "batch", "none"] = option(
        "group", help="grpo: divide each reward's distance from its group's mean by the group's std, the "
                      "batch's std, or nothing (Dr. GRPO)")
    mask_truncated: bool = option(False, help="responses that hit the length limit take no part in the loss "
                                              "(TRL's mask_truncated_completions); their rewards still count "
                                              "in group baselines")
    importance_sampling: Literal["token", "sequence"] = option(
        "token", help="the policy/old ratio per token, or one per sequence: exp of the mean of its tokens' "
                      "log-ratios (GSPO; TRL's importance_sampling_level)")
    epsilon_high: float | None = option(None, gt=0, help="clip-higher (DAPO): the ratio's upper clip is "
                                                          "1 + epsilon_high; null: ppo.cliprange")
    delta: float | None = option(None, gt=1, help="two-sided clipping (TRL's delta): the unclipped ratio is "
                                                  "capped at delta, which bounds the loss of tokens with negative "
                                                  "advantage; above 1 + the upper clip; null: off")


@dataclass
class LoraConfig:
    enabled: bool = False
    r: int = option(16, ge=1)
    alpha: float = option(32.0, gt=0)
    dropout: float = option(0.0, ge=0, lt=1)
    target_modules: list[str] | None = option(None, help="null: every linear layer")
    shared_base: bool = option(True, help="agents of one base model share it, one adapter each")


@dataclass
class AgentsConfig:
    models: list[str] | None = option(None, help="one model spec per agent (default: model)")
    devices: list[str] | None = option(
        None, help="one device per agent, e.g. [cuda:0, cuda:1] (default: device for all)")
    lora: LoraConfig = option(LoraConfig)
    shards: int = option(1, ge=1, help="ranks each agent is sharded over with FSDP2 (backend: ray; one "
                                       "worker group of this many ranks per agent, each on its own GPU "
                                       "with ray.num_gpus_per_agent: 1)")
    dropout: Literal["off", "trl"] = option(
        "off", help="off: the model's dropout never acts; trl: as TRL 0.7 and the CORY authors' "
                    "fork, the update runs in train mode and the model stays there, so from the "
                    "second iteration sampling and the rollout's forward pass run with dropout "
                    "too (until a role exchange with roles.reset_on_swap rebuilds the agent)")


@dataclass
class TopologyConfig:
    name: Literal["single", "pioneer_observer", "chain", "mesh", "star", "random",
                  "independent"] = "single"
    n_agents: int | None = option(None, ge=1, help="fixed by single (1) and pioneer_observer (2)")
    edge_prob: float = option(0.5, ge=0, le=1, help="random: chance of each forward edge")
    seed: int | None = option(None, help="random: graph seed (default: the run seed)")
    answer: Literal["last", "value", "vote"] = option(
        "last", help="system answer, from the last round: the last role's, the one with the highest "
                     "value, or (exact-answer tasks) the majority final answer")
    rounds: int = option(
        1, ge=1, help="unroll the topology this many times: in round r > 0 every role sees its parents' "
                      "answers of the round and every role's answer of round r - 1 (task.revise_template)")


@dataclass
class CollectiveConfig:
    lambda_: float = option(0.0, key="lambda", help="R_i = r_i + lambda * sum of the others' r "
                                                    "(the cory presets set 1; 0: independent learners)")
    normalize: bool = option(False, help="z-score each agent's task rewards before mixing")
    credit: Literal["sum", "difference"] = option(
        "sum", help="sum: each turn earns lambda x the others' rewards of its round; difference: lambda x "
                    "what its answer changed in the turns that saw it (their reward minus their reward "
                    "re-answering without it: one more generation per edge and iteration)")
    turn_discount: float = option(
        0.0, ge=0, le=1, help="with topology.rounds > 1: a turn also earns this x the agent's next "
                              "turn's reward, discounted on (0: each turn on its own)")


@dataclass
class RolesConfig:
    swap_every: int | None = option(None, ge=1, help="rotate roles every K iterations (null: never; "
                                                      "the cory presets set 5)")
    reset_on_swap: bool = option(
        False, help="at each exchange give every agent a fresh Adam state, its initial KL "
                    "coefficient and fresh score moments, and reseed the global RNGs, as the CORY "
                    "authors' scripts do by rebuilding their PPO trainers")
    repeat_lengths_after_swap: bool = option(
        False, help="generation.length_sampler_per batch: after each exchange the budgets are "
                    "drawn again from the same sequence, so they cycle with period swap_every (the "
                    "authors' set_seed reseeds NumPy, which their LengthSampler draws from)")


@dataclass
class ElasticResetConfig:
    enabled: bool = False
    decay: float = option(0.995, gt=0, lt=1)
    reset_freq: int = option(17, ge=1)
    ema_every: Literal["optimizer_step", "iteration"] = option(
        "optimizer_step", help="when the EMA takes a step: after every optimiser step (the "
                               "Elastic Reset authors' code) or once per iteration")
    kl_reference: Literal["reference", "ema"] = "reference"


@dataclass
class TaskConfig:
    name: Literal["imdb", "gsm8k", "arithmetic", "hh", "toy"] = "imdb"
    source: str | None = option(None, help="dataset id or local file; null: offline default")
    test_source: str | None = option(None, help="separate test file or split")
    n_test: int = option(256, ge=1, help="held-out prompts kept for evaluation")
    max_prompt_tokens: int = option(256, ge=4, help="longer prompts are cut from the left")
    query_min_tokens: int = option(2, ge=1, help="imdb: shortest review prefix")
    query_max_tokens: int = option(8, ge=1, help="imdb: longest review prefix (included)")
    min_review_chars: int = option(
        0, ge=0, help="imdb: keep reviews longer than this many characters (the CORY authors: "
                      "100 for CORY, 200 for PPO)")
    observer_template: str | None = option(None, help="placeholders {query} and {answers}")
    revise_template: str | None = option(
        None, help="topology.rounds > 1: the prompt of a later round, {answers} holding the previous "
                   "round's answers and the round's parents' (null: the task's)")
    answer_separator: str | None = option(
        None, help="between the answers a turn is shown (null: the task's, a blank line where answers "
                   "are paragraphs (math, hh, custom), a line break for one-line continuations (imdb, toy))")
    answer_join: Literal["clean", "verbatim"] | None = option(
        None, help="how a shown answer appears: clean (no stop-string leftovers, no white space at its "
                   "ends) or verbatim (as generated); null: the task's (verbatim for imdb's continuation "
                   "template and toy's token strings, clean elsewhere; every task was verbatim before 2026-12-07)")
    stop_strings: list[str] | None = option(
        None, help="a response ends at any of these (null: the task's, e.g. 'Question:')")
    chat_template: bool | None = option(None, help="null: use it if the tokenizer has one")
    few_shot: int = option(0, ge=0, help="gsm8k / arithmetic: solved examples in the prompt")
    n_train: int = option(2000, ge=1, help="arithmetic / toy: generated training problems")
    max_operand: int = option(20, ge=1, help="arithmetic: largest operand")
    target: str = option("a", help="toy: the token whose frequency is rewarded")


@dataclass
class RewardConfig:
    name: Literal["sentiment", "hf_classifier", "vader", "exact_match", "reward_model",
                  "target_fraction", "python", "remote"] | None = option(None, help="null: the task's")
    url: str | None = option(None, help="remote: the reward server's endpoint, e.g. "
                                        "http://127.0.0.1:8000/get_reward")
    urls: list[str] | None = option(None, help="remote: several servers, one per reward (OpenRLHF's "
                                               "several --remote_rm_url): each response's scores are summed")
    timeout: float = option(30.0, gt=0, help="remote: seconds to wait for one answer")
    retries: int = option(3, ge=0, help="remote: at least this many further attempts (exponential "
                                        "backoff, at most 10 s apart) before giving up")
    retry_window: float = option(300.0, ge=0, help="remote: keep retrying an unreachable server for this "
                                                   "many seconds (long enough for a restart); then the run "
                                                   "stops with a checkpoint before that iteration")
    token_env: str = option("CORY_REWARD_TOKEN", help="remote: environment variable holding the bearer "
                                                      "token to send (none sent when it is unset)")
    model: str | None = option(None, help="classifier / reward model folder or hub id")
    label: str = option("POSITIVE", help="hf_classifier: class whose logit is the reward")
    function: str | None = option(None, help="python: 'module:function'")
    batch_size: int = option(64, ge=1)
    format_weight: float = option(0.0, help="gsm8k / arithmetic: bonus for a parsable answer")


@dataclass
class EvalConfig:
    n_prompts: int = option(64, ge=1)
    samples_per_prompt: int = option(1, ge=1, help="n for Pass@k")
    pass_k: list[int] = option([1], ge=1)
    greedy: bool = False
    seed: int = 1234
    lengths: Literal["all", "training"] = option(
        "all", help="with generation.length_sampler: 'all' gives every evaluation row its own "
                    "budget, every length of the sampler's range equally often, in an order fixed "
                    "by eval.seed alone (the same for every run, seed and arm); 'training' draws "
                    "them as training does")


@dataclass
class LogConfig:
    report_to: list[str] = option(
        ["tensorboard"], help="trackers: tensorboard, wandb, mlflow, trackio, all (those installed), "
                              "none; one name or a list (each but tensorboard is an extra: pip install "
                              "'cory[wandb]')")
    tensorboard: bool = option(True, help="false drops tensorboard from report_to")
    run_name: str | None = option(None, help="the trackers' run name (default: the output folder's last two parts)")
    project: str = option("cory", help="wandb / trackio project, MLflow experiment")
    tags: list[str] = option([], help="tracker tags (the method is always added); 'key=value' gives "
                                      "MLflow a tag with a value")
    log_model: bool = option(False, help="upload the final model folder to the trackers that keep "
                                         "files (wandb: a model artifact; MLflow: run artifacts)")
    tracker_timeout: float = option(30.0, gt=0, help="seconds a tracker may take to connect or answer "
                                                     "before it is switched off (wandb init, MLflow requests)")
    progress: bool = True
    samples_every: int = option(1, ge=1)
    n_samples: int = option(4, ge=0)

    def trackers(self) -> list[str]:
        """``report_to`` with ``all`` expanded to the installed trackers and ``tensorboard:
        false`` applied."""
        names = [n for name in self.report_to for n in (installed_trackers() if name == "all" else [name])]
        return [name for name in dict.fromkeys(names) if self.tensorboard or name != "tensorboard"]


@dataclass
class RayConfig:
    address: str | None = option(None, help="null: start a local cluster")
    num_cpus_per_agent: float = option(1.0, ge=0)
    num_gpus_per_agent: float = option(0.0, ge=0)
    reward_actor: bool = option(False, help="score rewards in an actor of their own")
    max_restarts: int = option(2, ge=0, help="lost agent actors: restart and resume this often")


@dataclass
class RunConfig:
    method: str = option("ppo", help="preset: " + ", ".join(METHODS))
    model: str = option("smollm2-135m", help="model spec shared by every agent")
    steps: int = option(100, ge=1, help="training iterations")
    seed: int = 0
    output_dir: str = "runs/default"
    device: str = option("auto", help="auto, cpu, cuda or cuda:N")
    dtype: Literal["float32", "bfloat16", "float16"] = option(
        "float32", help="the dtype weights are stored, trained and saved in")
    mixed_precision: Literal["no", "bf16"] = option(
        "no", help="bf16: forward passes under torch.autocast(bfloat16) over float32 weights (the "
                   "standard AMP recipe; log-probs, KL and losses stay float32)")
    deterministic: bool = option(
        False, help="torch.use_deterministic_algorithms and a fixed cuBLAS workspace, for "
                    "bit-exact resume on a GPU (slower; CPU runs are deterministic already)")
    threads: int | None = option(None, ge=1, help="torch CPU threads (null: torch's default)")
    trust_remote_code: bool = False
    eval_every: int = option(10, ge=0, help="0: evaluate only at the end")
    save_every: int = option(0, ge=0, help="checkpoint every N iterations (0: off)")
    keep_last: int = option(2, ge=1)
    resume: str | None = option(None, help="'auto' or a checkpoint folder")
    allow_config_change: list[str] = option(
        ["steps", "eval_every", "save_every", "keep_last", "log", "resume", "output_dir"],
        help="top-level keys a resumed run may change")
    max_consecutive_faults: int = option(3, ge=1)
    backend: Literal["local", "ray"] = "local"
    task: TaskConfig = option(TaskConfig)
    reward: RewardConfig = option(RewardConfig)
    generation: GenerationConfig = option(GenerationConfig)
    ppo: PPOConfig = option(PPOConfig)
    algorithm: AlgorithmConfig = option(AlgorithmConfig)
    agents: AgentsConfig = option(AgentsConfig)
    topology: TopologyConfig = option(TopologyConfig)
    collective: CollectiveConfig = option(CollectiveConfig)
    roles: RolesConfig = option(RolesConfig)
    elastic_reset: ElasticResetConfig = option(ElasticResetConfig)
    eval: EvalConfig = option(EvalConfig)
    log: LogConfig = option(LogConfig)
    ray: RayConfig = option(RayConfig)

    @property
    def n_agents(self) -> int:
        return n_agents_of(self.topology)

    def agent_devices(self) -> list[str]:
        """The device name of each agent ('auto' resolved by the agent factory)."""
        return list(self.agents.devices) if self.agents.devices else [self.device] * self.n_agents

    def agent_models(self) -> list[str]:
        """The model spec of each agent."""
        return list(self.agents.models) if self.agents.models else [self.model] * self.n_agents


def n_agents_of(topology: TopologyConfig) -> int:
    fixed = TOPOLOGIES[topology.name].fixed_agents
    if fixed is not None:
        return fixed
    return topology.n_agents if topology.n_agents is not None else DEFAULT_AGENTS


def config_to_yaml(config: RunConfig) -> str:
    """The config as a run folder keeps it: URLs without their passwords."""
    return yaml.safe_dump(redacted(to_dict(config)), sort_keys=False)
