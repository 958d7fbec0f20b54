"""Ray itself, for the Ray backend: starting it, a rendezvous address for a sharded agent's
process group, and the reward actor (``ray.reward_actor``). The agents' actors are
``cory.agents.ray_group``'s."""

from __future__ import annotations

import socket
from types import ModuleType
from typing import Any

from cory.config.loading import resolve
from cory.config.schema import RunConfig
from cory.config.tree import to_dict
from cory.errors import MissingPackageError
from cory.rewards import reward_of
from cory.types import Prompt



def ray_module() -> ModuleType:
    """The ``ray`` package, imported when the backend is first asked for (it is optional)."""
    try:
        import ray  # optional: the [ray] extra
    except ImportError:
        raise MissingPackageError("Ray (backend: ray)", "pip install ray==2.60.0  (or: pip install -e '.[ray]')") from None
    return ray


def ensure_ray(config: RunConfig) -> None:
    ray = ray_module()
    if not ray.is_initialized():
        ray.init(address=config.ray.address, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)


def free_rendezvous() -> str:
    """A TCP address on this node for a worker group's process group."""
    with socket.socket() as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    return f"tcp://{ray_module().util.get_node_ip_address()}:{port}"


class RewardWorker:
    """Runs a reward function inside an actor of its own."""

    def __init__(self, config: dict[str, Any], default: str) -> None:
        self.reward = reward_of(resolve(config), default)

    def score(self, prompts: list[Prompt], responses: list[str]) -> list[float]:
        return self.reward(prompts, responses)


class RayReward:
    """A reward function whose calls go to a ``RewardWorker`` actor."""

    def __init__(self, config: RunConfig, default: str) -> None:
        ensure_ray(config)
        self._ray = ray_module()
        self.actor = self._ray.remote(RewardWorker).options(num_cpus=0).remote(to_dict(config), default)

    def __call__(self, prompts: list[Prompt], responses: list[str]) -> list[float]:
        return self._ray.get(self.actor.score.remote(prompts, responses))
