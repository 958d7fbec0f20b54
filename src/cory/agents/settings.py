"""The part of a run's config an agent reads, and nothing more."""

from __future__ import annotations

from dataclasses import dataclass

from cory.algorithms.objective import Objective
from cory.algorithms.registry import algorithm_named
from cory.config.schema import AlgorithmConfig, ElasticResetConfig, GenerationConfig, PPOConfig, RunConfig


@dataclass(frozen=True)
class FastPath:
    """The speed-ups ``ppo.fast_path`` switches together (``shared_prompts`` only with
    ``ppo.share_prompts`` too). Each gives the same numbers as the straightforward path (tests
    compare them); they are separate here so the code says which one it relies on."""

    scores_from_generation: bool  # log-probs and values kept from sampling, no second forward
    trim_padding: bool            # each mini-batch cut to its longest prompt and response
    head_on_response_only: bool   # the LM head and value head run on response positions only
    fused_adamw: bool             # AdamW's fused kernel
    shared_prompts: bool          # rows that repeat a prompt run it once (generation and scoring)

    @classmethod
    def of(cls, ppo: PPOConfig, engine: str = "hf") -> FastPath:
        on = ppo.fast_path
        # kl_penalty 'full' needs the whole policy distribution, which sampling does not keep;
        # a vLLM engine keeps no values, and its log-probs are not the trained policy's.
        return cls(scores_from_generation=on and ppo.kl_penalty != "full" and engine == "hf",
                   trim_padding=on, head_on_response_only=on, fused_adamw=on,
                   shared_prompts=on and ppo.share_prompts)


def objective_of(algorithm: AlgorithmConfig, ppo: PPOConfig, tis_cap: float | None = None,
                 max_new_tokens: int = 0) -> Objective:
    """The registry entry of ``algorithm.name`` with the numbers its targets and loss read;
    ``tis_cap`` switches on truncated importance sampling against the sampler."""
    return Objective(
        algorithm=algorithm_named(algorithm.name), gamma=ppo.gamma, lam=ppo.lam,
        whiten_rewards=ppo.whiten_rewards, whiten_advantages=ppo.whiten_advantages,
        returns=algorithm.returns, whiten_returns=algorithm.whiten_returns, group_size=algorithm.group_size,
        cliprange=ppo.cliprange, cliprange_value=ppo.cliprange_value, vf_coef=ppo.vf_coef,
        ratio_threshold=ppo.ratio_threshold, tis_cap=tis_cap, loss_type=algorithm.loss_type,
        beta=algorithm.beta, kl_estimator=algorithm.kl_estimator, cliprange_high=algorithm.epsilon_high,
        max_new_tokens=max_new_tokens, scale_rewards=algorithm.scale_rewards,
        sequence_ratio=algorithm.importance_sampling == "sequence", delta=algorithm.delta)


@dataclass(frozen=True)
class AgentSettings:
    """How one agent samples and learns. ``uses_values``: whether anything reads its value
    head (the PPO value loss, TRL-GAE returns, or a system answer chosen by value)."""

    seed: int
    steps: int
    max_prompt_tokens: int
    generation: GenerationConfig
    ppo: PPOConfig
    algorithm: AlgorithmConfig
    objective: Objective
    elastic_reset: ElasticResetConfig
    bf16_autocast: bool
    uses_values: bool
    fast: FastPath
    dropout_as_trl: bool = False         # train-mode update, and sampling in train mode after it
    shards: int = 1                      # ranks holding this agent (FSDP2)
    length_cycle: int | None = None      # per-batch length draws repeat with this period
    threads: int | None = None           # CPU threads (a vLLM engine on CPU binds as many cores)
    lora_rank: int = 0                   # agents.lora.r when LoRA is on (a vLLM engine's adapter slots)
    n_agents: int = 1                    # agents in the run (adapters one vLLM engine may hold)

    @classmethod
    def of(cls, config: RunConfig) -> AgentSettings:
        """The settings an agent of run ``config`` learns with."""
        algorithm = algorithm_named(config.algorithm.name)
        return cls(
            seed=config.seed,
            steps=config.steps,
            max_prompt_tokens=config.task.max_prompt_tokens,
            generation=config.generation,
            ppo=config.ppo,
            algorithm=config.algorithm,
            objective=objective_of(config.algorithm, config.ppo, tis_cap=(
                config.generation.vllm.tis_cap if config.generation.vllm.correction == "tis" else None),
                max_new_tokens=config.generation.max_new_tokens),
            elastic_reset=config.elastic_reset,
            bf16_autocast=config.mixed_precision == "bf16",
            uses_values=(algorithm.value_loss or config.topology.answer == "value"
                         or algorithm.reads_values(config.algorithm.returns)),
            fast=FastPath.of(config.ppo, config.generation.engine),
            dropout_as_trl=config.agents.dropout == "trl",
            shards=config.agents.shards,
            length_cycle=config.roles.swap_every if config.roles.repeat_lengths_after_swap else None,
            threads=config.threads,
            lora_rank=config.agents.lora.r if config.agents.lora.enabled else 0,
            n_agents=config.n_agents,
        )
