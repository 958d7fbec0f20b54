"""``RayAgents``: the ``AgentGroup`` over one Ray actor per agent, driven by the same trainer loop.

Each actor (an ``AgentWorker``) builds and holds one agent (policy, value head, optimiser,
its own reference) with its own resources (``ray.num_cpus_per_agent``,
``ray.num_gpus_per_agent``). The trainer stays the controller: it sends prompts and scores,
and gets texts and statistics back; weights never leave an actor (checkpoints are written by
each actor into the shared run folder). Role exchange is a relabelling on the controller
side, as locally. Calls on several agents (a topology level, the updates) run in parallel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, TypeVarTuple

import torch
import torch.distributed as dist

from cory.agents.agent import Agent
from cory.agents.factory import build_agents
from cory.config.loading import resolve
from cory.config.schema import RunConfig
from cory.config.tree import to_dict
from cory.distributed.ray_backend import ensure_ray, free_rendezvous, ray_module
from cory.errors import AgentLost
from cory.provenance import describe_device


Ts = TypeVarTuple("Ts")
R = TypeVar("R")


class AgentWorker:
    """Runs inside an actor: builds agent ``index`` and calls its methods by name. With
    ``agents.shards: k`` it is rank ``rank`` of the agent's worker group, whose k ranks join
    one process group at ``rendezvous`` and hold the agent sharded."""

    def __init__(self, config: dict[str, Any], index: int, task_chat: bool, stop_strings: list[str],
                 rank: int = 0, rendezvous: str | None = None) -> None:
        run = resolve(config)
        torch.set_num_threads(run.threads or max(1, int(run.ray.num_cpus_per_agent)))
        if run.agents.shards > 1:
            backend = "nccl" if run.ray.num_gpus_per_agent and torch.cuda.is_available() else "gloo"
            dist.init_process_group(backend, init_method=rendezvous, rank=rank, world_size=run.agents.shards)
        (self.agent,) = build_agents(run, task_chat=task_chat, stop_strings=stop_strings, indices=[index])

    def call(self, method: str, *args: Any) -> Any:
        """``Agent.<method>(*args)`` on this actor's agent."""
        return getattr(self.agent, method)(*args)

    def device(self) -> str:
        return describe_device(self.agent.device)


class _Ranks:
    """The k actors (ranks) of one sharded agent, or the one actor of an unsharded one: every
    call goes to all of them; rank 0's answer is the agent's."""

    def __init__(self, actors: list[Any]) -> None:
        self.actors = actors

    def start(self, method: str, *args: Any) -> list[Any]:
        """Start ``method`` on every rank; the futures, rank 0's first."""
        return [getattr(actor, method).remote(*args) for actor in self.actors]


class RayAgents:
    """The ``AgentGroup`` over one Ray actor per agent (a worker group of ``agents.shards``
    actors per agent when it is sharded)."""

    def __init__(self, config: RunConfig, task_chat: bool = False, stop_strings: Sequence[str] = ()) -> None:
        ensure_ray(config)
        self._ray = ray_module()
        self.config = config
        self.task_chat = task_chat
        self.stop_strings = list(stop_strings)
        self.agents = [self._start(index) for index in range(config.n_agents)]
        self.restarts = 0

    def _start(self, index: int) -> _Ranks:
        options = {"num_cpus": self.config.ray.num_cpus_per_agent,
                   "num_gpus": self.config.ray.num_gpus_per_agent, "max_restarts": 0}
        worker = self._ray.remote(AgentWorker).options(**options)
        shards = self.config.agents.shards
        if shards == 1:
            return _Ranks([worker.remote(to_dict(self.config), index, self.task_chat, self.stop_strings)])
        rendezvous = free_rendezvous()
        return _Ranks([worker.remote(to_dict(self.config), index, self.task_chat, self.stop_strings,
                                     rank, rendezvous) for rank in range(shards)])

    def __len__(self) -> int:
        return len(self.agents)

    def _gather(self, what: str, futures: dict[int, list[Any]]) -> dict[int, Any]:
        """Wait for calls started on several agents (they run in parallel); rank 0's answers."""
        results = {}
        for index, ranks in futures.items():
            try:
                results[index] = self._ray.get(ranks)[0]
            except (self._ray.exceptions.RayActorError, self._ray.exceptions.ActorDiedError) as error:
                raise AgentLost(f"the actor of agent{index} died during {what}: {error}") from None
        return results

    def map(self, method: Callable[[Agent, *Ts], R], calls: Mapping[int, tuple[*Ts]]) -> dict[int, R]:
        name = method.__name__
        return self._gather(f"{name}()", {i: self.agents[i].start("call", name, *args) for i, args in calls.items()})

    def devices(self) -> list[str]:
        found = self._gather("device()", {i: ranks.start("device") for i, ranks in enumerate(self.agents)})
        return [found[i] for i in range(len(self.agents))]

    def _every_actor(self) -> list[Any]:
        return [actor for ranks in self.agents for actor in ranks.actors]

    def restart(self) -> None:
        """Replace every actor with a fresh one (state then comes from a checkpoint)."""
        for actor in self._every_actor():
            self._ray.kill(actor, no_restart=True)
        self.agents = [self._start(index) for index in range(len(self.agents))]
        self.restarts += 1

    def close(self) -> None:
        """Let each agent stop its rollout engine, then end the actors."""
        try:
            self._ray.get([actor.call.remote("close") for actor in self._every_actor()], timeout=60)
        except Exception:  # an actor already gone or stuck: its engine exits with it
            pass
        for actor in self._every_actor():
            self._ray.kill(actor, no_restart=True)
        self.agents = []
