"""The part of a run's config an agent reads, and nothing more."""

from __future__ import annotations

from dataclasses import dataclass

from cory.agents.objectives import USES_VALUE_LOSS, returns_need_values
from cory.config import AlgorithmConfig, ElasticResetConfig, GenerationConfig, PPOConfig, RunConfig


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
    elastic_reset: ElasticResetConfig
    bf16_autocast: bool
    uses_values: bool

    @classmethod
    def of(cls, config: RunConfig) -> AgentSettings:
        """The settings an agent of run ``config`` learns with."""
        return cls(
            seed=config.seed,
            steps=config.steps,
            max_prompt_tokens=config.task.max_prompt_tokens,
            generation=config.generation,
            ppo=config.ppo,
            algorithm=config.algorithm,
            elastic_reset=config.elastic_reset,
            bf16_autocast=config.mixed_precision == "bf16",
            uses_values=(config.algorithm.name in USES_VALUE_LOSS or config.topology.answer == "value"
                         or returns_need_values(config.algorithm)),
        )
