"""The Ray backend: one actor per agent, driven by the same trainer loop.

Each actor builds and holds one agent (policy, value head, optimiser, its own reference)
with its own resources (``ray.num_cpus_per_agent``, ``ray.num_gpus_per_agent``). The
trainer stays the controller: it sends prompts and scores, and gets texts and statistics
back; weights never leave an actor (checkpoints are written by each actor into the shared
run folder). Role exchange is a relabelling on the controller side, as locally. Calls on
several agents (a topology level, the updates) run in parallel.
"""

from __future__ import annotations

from typing import Any

from cory.config import RunConfig, resolve
from cory.configtree import to_dict
from cory.errors import CoryError, MissingPackageError


class AgentLost(CoryError):
    """An agent's actor died; the run can resume from its last checkpoint."""


def _ray():
    try:
        import ray
    except ImportError:
        raise MissingPackageError("Ray (backend: ray)", "pip install ray==2.60.0  (or: pip install -e '.[ray]')") from None
    return ray


class AgentWorker:
    """Runs inside an actor: builds agent ``index`` and forwards method calls to it."""

    def __init__(self, config: dict[str, Any], index: int, task_chat: bool, stop_strings: list[str]) -> None:
        import torch

        from cory.agents.factory import build_agents

        run = resolve(config)
        torch.set_num_threads(run.threads or max(1, int(run.ray.num_cpus_per_agent)))
        (self.agent,) = build_agents(run, task_chat=task_chat, stop_strings=stop_strings, indices=[index])

    def invoke(self, method: str, *args: Any) -> Any:
        return getattr(self.agent, method)(*args)


class RewardWorker:
    """Runs a reward function inside an actor of its own."""

    def __init__(self, config: dict[str, Any], default: str) -> None:
        from cory.rewards import build_reward

        self.reward = build_reward(resolve(config), default)

    def score(self, prompts, responses):
        return self.reward(prompts, responses)


class RayReward:
    """A reward function whose calls go to a ``RewardWorker`` actor."""

    def __init__(self, config: RunConfig, default: str) -> None:
        ray = _ray()
        ensure_ray(config)
        self._ray = ray
        self.actor = ray.remote(RewardWorker).options(num_cpus=0).remote(to_dict(config), default)

    def __call__(self, prompts, responses):
        return self._ray.get(self.actor.score.remote(prompts, responses))


def ensure_ray(config: RunConfig) -> None:
    ray = _ray()
    if not ray.is_initialized():
        ray.init(address=config.ray.address, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)


class RayAgents:
    """The ``LocalAgents`` interface over one Ray actor per agent."""

    def __init__(self, config: RunConfig, task_chat: bool = False, stop_strings: list[str] = ()) -> None:
        ensure_ray(config)
        self._ray = _ray()
        self.config = config
        self.task_chat = task_chat
        self.stop_strings = list(stop_strings)
        self.actors = [self._start(index) for index in range(config.n_agents)]
        self.restarts = 0

    def _start(self, index: int):
        options = {"num_cpus": self.config.ray.num_cpus_per_agent,
                   "num_gpus": self.config.ray.num_gpus_per_agent, "max_restarts": 0}
        return self._ray.remote(AgentWorker).options(**options).remote(
            to_dict(self.config), index, self.task_chat, self.stop_strings)

    def __len__(self) -> int:
        return len(self.actors)

    def call(self, method: str, calls: dict[int, tuple]) -> dict[int, Any]:
        """Start every call, then wait for all of them (they run in parallel)."""
        pending = {index: self.actors[index].invoke.remote(method, *args) for index, args in calls.items()}
        results = {}
        for index, future in pending.items():
            try:
                results[index] = self._ray.get(future)
            except (self._ray.exceptions.RayActorError, self._ray.exceptions.ActorDiedError) as error:
                raise AgentLost(f"the actor of agent{index} died during {method}(): {error}") from None
        return results

    def call_all(self, method: str, *args: Any) -> list[Any]:
        results = self.call(method, {i: args for i in range(len(self.actors))})
        return [results[i] for i in range(len(self.actors))]

    def restart(self) -> None:
        """Replace every actor with a fresh one (state then comes from a checkpoint)."""
        for actor in self.actors:
            self._ray.kill(actor, no_restart=True)
        self.actors = [self._start(index) for index in range(len(self.actors))]
        self.restarts += 1

    def close(self) -> None:
        for actor in self.actors:
            self._ray.kill(actor, no_restart=True)
        self.actors = []
