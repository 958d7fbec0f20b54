"""Which environment an episode runs in: a built-in by name, or a user's class by
``module:Class`` (cory's protocol, or a TRL-style tool class behind ``ToolEnvironment``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cory.envs.base import Environment, class_named
from cory.envs.calculator import CalculatorEnvironment
from cory.envs.plan_path import PlanPathEnvironment
from cory.envs.trl_adapter import ToolEnvironment
from cory.errors import ConfigError

BUILT_IN: dict[str, Callable[[], Environment]] = {
    "calculator": CalculatorEnvironment,
    "plan_path": PlanPathEnvironment,
}


def environment_factory(name: str | None = None, class_path: str | None = None,
                        options: dict[str, Any] | None = None) -> Callable[[], Environment]:
    """A function that makes one fresh environment per episode."""
    if (name is None) == (class_path is None):
        raise ConfigError("env: name a built-in environment (env.name: calculator | plan_path) or your own "
                          "class (env.class: module:Class), not both")
    if name is not None:
        if name not in BUILT_IN:
            raise ConfigError(f"env.name: unknown environment {name!r}; choose {', '.join(BUILT_IN)} or set env.class")
        return BUILT_IN[name]
    made = class_named(class_path or "")
    kwargs = dict(options or {})

    def make() -> Environment:
        try:
            environment = made(**kwargs)
        except TypeError as error:
            raise ConfigError(f"env.class: {class_path} could not be built with env.options {kwargs}: "
                              f"{error}") from None
        if callable(getattr(environment, "step", None)) and callable(getattr(environment, "reset", None)):
            return environment  # cory's protocol
        return ToolEnvironment(environment)  # TRL's environment_factory style: public methods are tools
    return make
