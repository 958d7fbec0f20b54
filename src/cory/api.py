"""The Python API: train from a script or a notebook with your own reward and prompts.

    import cory
    config = cory.load_config("configs/imdb/cory.yaml", ["steps=20"])
    result = cory.train(config, reward_fn=my_reward, prompts=["The movie", "I watched"])
    result.metrics["eval/task_reward"], result.output_dir

``reward_fn(prompts, responses) -> list[float]`` (plus ``labels=`` if it takes them, as TRL's
and OpenRLHF's reward functions do); ``prompts`` a list of strings, of ``{"prompt", "answer"}``
mappings, or a ``datasets.Dataset``. Each call builds its own run, so a process may train
several times.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from cory.config.loading import load_config, resolve
from cory.config.schema import RunConfig
from cory.config.tree import parse_override, set_dotted, to_dict
from cory.errors import ConfigError
from cory.logging import quiet_library_bars
from cory.rewards.simple import CallableReward
from cory.run_inputs import import_path, record_inputs
from cory.rundir import holds_results
from cory.tasks.custom import custom_task
from cory.trainer import Trainer
from cory.types import Prompt


PROMPT_COLUMNS = ("prompt", "query", "text", "question")
ANSWER_COLUMNS = ("answer", "label", "labels", "solution")


@dataclass
class TrainResult:
    """What a finished run left: its final evaluation, every metrics row, its folder, and
    each agent's final model (a ``save_pretrained`` folder with ``value_head.safetensors``,
    loadable as a model spec: ``model=<path>``)."""

    metrics: dict[str, Any]
    rows: list[dict[str, Any]]
    output_dir: Path
    final_models: list[Path]


def as_prompts(items: Iterable[Any], name: str = "prompts") -> list[Prompt]:
    """Prompts from strings, mappings with a prompt column (and optionally an answer), or
    the rows of a ``datasets.Dataset``."""
    prompts = []
    for index, item in enumerate(items):
        if isinstance(item, Prompt):
            prompts.append(item)
        elif isinstance(item, str):
            prompts.append(Prompt(item))
        elif isinstance(item, Mapping):
            query = next((item[c] for c in PROMPT_COLUMNS if c in item), None)
            if not isinstance(query, str):
                raise ConfigError(f"{name}[{index}]: a row needs a text column named one of "
                                  f"{', '.join(PROMPT_COLUMNS)}; got columns {sorted(item)}")
            answer = next((item[c] for c in ANSWER_COLUMNS if c in item), None)
            prompts.append(Prompt(query, None if answer is None else str(answer)))
        else:
            raise ConfigError(f"{name}[{index}]: expected a string or a mapping, got {type(item).__name__}")
    if not prompts:
        raise ConfigError(f"{name}: no prompts given")
    return prompts


def _config_of(config: RunConfig | str | Path | Mapping[str, Any], overrides: list[str]) -> RunConfig:
    if isinstance(config, RunConfig):
        return _with_overrides(config, overrides)
    if isinstance(config, Mapping):
        return _with_overrides(resolve(dict(config)), overrides)
    return load_config(config, overrides)


def _with_overrides(config: RunConfig, overrides: list[str]) -> RunConfig:
    if not overrides:
        return config
    raw = to_dict(config)
    for text in overrides:
        parts, value = parse_override(text)
        set_dotted(raw, parts, value)
    return resolve(raw)


def train(config: RunConfig | str | Path | Mapping[str, Any], *, reward_fn: Callable[..., list[float]] | None = None,
          prompts: Iterable[Any] | None = None, eval_prompts: Iterable[Any] | None = None,
          overrides: Sequence[str] = ()) -> TrainResult:
    """Train one run and return its result. ``config``: a ``RunConfig``, a YAML path or a
    mapping of keys; ``overrides``: ``key=value`` strings over it. Without ``reward_fn`` the
    config's reward is used; without ``prompts`` the config's task."""
    run_config = _config_of(config, list(overrides))
    task = None
    if prompts is not None:
        task = custom_task(run_config, as_prompts(prompts),
                           as_prompts(eval_prompts, "eval_prompts") if eval_prompts is not None else None)
    elif eval_prompts is not None:
        raise ConfigError("eval_prompts: give prompts too (the config's task has its own test split)")
    if task is not None and reward_fn is None and run_config.reward.name is None:
        raise ConfigError("reward_fn: your own prompts need a reward; pass reward_fn or set reward.name")
    reward = CallableReward(reward_fn) if reward_fn is not None else None
    if reward_fn is not None and (path := import_path(reward_fn)) is not None:
        run_config = _with_overrides(run_config, ["reward.name=python", f"reward.function={path}"])  # config.yaml says
    run_dir = Path(run_config.output_dir)
    if (reward_fn is not None or task is not None) and (run_config.resume or not holds_results(run_dir)):
        record_inputs(run_dir, reward_fn, task)  # what config.yaml cannot say, for cory eval
    with quiet_library_bars():  # as the CLI: no per-file bars of transformers between the run's lines
        trainer = Trainer(run_config, task=task, reward=reward)
        try:
            final = trainer.train()
        finally:
            trainer.close()
    output_dir = Path(run_config.output_dir)
    models = [output_dir / "final" / f"agent{index}" for index in range(run_config.n_agents)]
    return TrainResult(final, list(trainer.rows), output_dir, models)
