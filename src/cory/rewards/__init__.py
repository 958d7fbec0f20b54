"""Rewards by name: sentiment classifier, HF classifier, VADER, exact match, reward model..."""

from __future__ import annotations

from typing import Callable

import torch

from cory.config.schema import RewardConfig, RunConfig
from cory.errors import ConfigError
from cory.rewards.base import RewardError, RewardFunction, score_safely
from cory.rewards.classifier import ClassifierReward
from cory.rewards.exact_match import ExactMatchReward
from cory.rewards.remote import RemoteReward, token_from
from cory.rewards.reward_model import default_reward_model
from cory.rewards.sentiment import ensure_sentiment_classifier
from cory.rewards.simple import PythonReward, TargetFraction, VaderReward

__all__ = ["RewardError", "RewardFunction", "build_reward", "score_safely"]


def build_reward(reward: RewardConfig, default: str, task: str = "imdb", toy_target: str = "a",
                 trust_remote_code: bool = False, device: torch.device | str = "cpu",
                 log: Callable[[str], None] = print) -> RewardFunction:
    """The reward named by ``reward.name`` (or the task's ``default``). ``task`` picks the
    default reward model; ``toy_target`` is the toy task's rewarded token."""
    name = reward.name or default
    if name == "target_fraction":
        return TargetFraction(toy_target)
    if name == "vader":
        return VaderReward()
    if name == "python":
        return PythonReward(reward.function or "")
    if name in ("sentiment", "hf_classifier", "reward_model"):
        source = reward.model
        if source is None and name == "sentiment":
            source = str(ensure_sentiment_classifier(log))
        if source is None and name == "reward_model":
            source = str(default_reward_model(task))
        if source is None:
            raise ConfigError(f"reward.model: reward '{name}' needs a classifier folder or hub id")
        return ClassifierReward(source, reward.label, reward.batch_size, device,
                                trust_remote_code=trust_remote_code)
    if name == "remote":
        remote = RemoteReward(reward.urls or [reward.url or ""], reward.timeout, reward.retry_window,
                              token_from(reward.token_env), retries=reward.retries)
        remote.check_reachable()
        return remote
    if name == "exact_match":
        return ExactMatchReward(format_weight=reward.format_weight)
    raise ValueError(f"unknown reward {name!r}")


def reward_of(config: RunConfig, default: str, device: torch.device | str = "cpu") -> RewardFunction:
    """The reward of run ``config`` in this process (``default``: the task's reward name)."""
    return build_reward(config.reward, default, task=config.task.name, toy_target=config.task.target,
                        trust_remote_code=config.trust_remote_code, device=device, log=print)
