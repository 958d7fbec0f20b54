"""Checks of a run against the machine it is about to start on.

``config.validate`` checks a config on its own (no torch, no filesystem), so a saved run's
config reads on any machine. What depends on this machine is checked here, when a run
starts: the model folders, the checkpoint to resume from and the tracker packages. (GPUs
are checked when the agents are placed on them.)
"""

from __future__ import annotations

from pathlib import Path

from cory.config.schema import RunConfig
from cory.errors import ConfigError
from cory.models.specs import check_spec
from cory.trackers import check_installed


def check_environment(config: RunConfig) -> RunConfig:
    """Raise a ConfigError naming the key when this machine cannot run ``config``."""
    for i, spec in enumerate(config.agent_models()):
        check_spec(spec, "model" if config.agents.models is None else f"agents.models[{i}]")
    if config.resume not in (None, "auto") and not Path(config.resume).is_dir():
        raise ConfigError(f"resume: '{config.resume}' is not a checkpoint folder; use 'auto' or a path")
    check_installed(config.log.report_to)
    return config
