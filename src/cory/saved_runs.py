"""Evaluating what a run left behind: a run folder, one of its checkpoints, or a config
(which evaluates the untrained base models). Backs ``cory eval``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from cory.agents.group import read_agent_states
from cory.build import build_run
from cory.checkpoint import MANIFEST, latest_good, load_checkpoint
from cory.config.loading import load_config, read_yaml, resolve
from cory.config.schema import RunConfig
from cory.config.tree import deep_merge, parse_override, set_dotted, to_dict
from cory.errors import ConfigError
from cory.evaluation import EvalResult, evaluate
from cory.multi.layout import TurnLayout
from cory.run_inputs import check_recorded_reward, read_inputs, recorded_prompts
from cory.tasks.custom import custom_task


EVAL_FILE = "eval.json"


def _with_overrides(raw: dict, overrides: list[str]) -> RunConfig:
    raw = dict(raw)
    raw["resume"] = None
    for text in overrides:
        parts, value = parse_override(text)
        set_dotted(raw, parts, value)
    return resolve(raw)


def evaluate_target(target: str | Path, overrides: Sequence[str] = ()) -> tuple[EvalResult, RunConfig, Path | None]:
    """Evaluate ``target``; returns the result, the config used, and the run folder (if any)."""
    target = Path(target)
    checkpoint, sources, run_dir = None, None, None
    if target.is_file():
        config = load_config(target, list(overrides))
    elif (target / MANIFEST).exists():
        checkpoint = load_checkpoint(target)
        run_dir = target.parent.parent
        config = _with_overrides(checkpoint.state["config"], list(overrides))
    elif (target / "config.yaml").exists():
        run_dir = target
        config = _with_overrides(read_yaml(target / "config.yaml"), list(overrides))
        final = target / "final"
        if (final / "agent0" / "config.json").exists():
            sources = [str(final / f"agent{i}") for i in range(config.n_agents)]
            config = resolve(deep_merge(to_dict(config), {"agents": {"lora": {"enabled": False}}}))
        else:
            path = latest_good(target)
            if path is None:
                raise ConfigError(f"eval: run '{target}' has neither final/ models nor a good checkpoint")
            checkpoint = load_checkpoint(path)
    else:
        raise ConfigError(f"eval: '{target}' is neither a config file, a run folder nor a checkpoint")
    task = None
    if run_dir is not None:  # a run of the Python API: its own reward and prompts
        record = read_inputs(run_dir)
        check_recorded_reward(run_dir, record, config.reward.function)
        prompts = recorded_prompts(run_dir, record)
        task = custom_task(config, *prompts) if prompts is not None else None
    parts = build_run(config, task=task, policy_sources=sources, local=True)
    step = config.steps
    if checkpoint is not None:
        read_agent_states(parts.agents, checkpoint.path, checkpoint.state["agents"])
        step = checkpoint.step
    mapping = parts.roles.agent_for_role(step)
    result = evaluate(parts.agents, TurnLayout.of(parts.topology, mapping), parts.task, parts.reward, config)
    return result, config, run_dir


def write_eval(run_dir: Path, result: EvalResult) -> Path:
    """Save ``eval.json`` (metrics and samples) into the run folder, atomically."""
    path = run_dir / EVAL_FILE
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps({"metrics": result.metrics, "samples": result.samples}, indent=1))
    partial.replace(path)
    return path
