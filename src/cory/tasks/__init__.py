"""Tasks: prompts, a default reward and an observer template, built by name."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from cory.config.schema import TaskConfig
from cory.tasks.arithmetic import build_arithmetic
from cory.tasks.base import Task
from cory.tasks.gsm8k import build_gsm8k
from cory.tasks.hh import build_hh
from cory.tasks.imdb import build_imdb
from cory.tasks.toy import build_toy
from cory.types import Prompt

__all__ = ["Prompt", "Task", "build_task"]


def build_task(config: TaskConfig, tokenizer: PreTrainedTokenizerBase) -> Task:
    """The task named by ``config.name``; ``tokenizer`` cuts review prefixes for imdb."""
    if config.name == "imdb":
        return build_imdb(config, tokenizer)
    if config.name == "toy":
        return build_toy(config)
    if config.name == "gsm8k":
        return build_gsm8k(config, tokenizer)
    if config.name == "arithmetic":
        return build_arithmetic(config, tokenizer)
    if config.name == "hh":
        return build_hh(config)
    raise ValueError(f"unknown task {config.name!r}")
