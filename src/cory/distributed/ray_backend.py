"""The Ray backend: one actor per agent, driven by the same trainer loop.

Each actor builds and holds one agent (policy, value head, optimiser, its own reference)
with its own resources (``ray.num_cpus_per_agent``, ``ray.num_gpus_per_agent``). The
trainer stays the controller: it sends prompts and scores, and gets texts and statistics
back; weights never leave an actor (checkpoints are written by each actor into the shared
run folder). Role exchange is a relabelling on the controller side, as locally. Calls on
several agents (a topology level, the updates) run in parallel.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cory.config import RunConfig
from cory.configtree import to_dict
from cory.errors import AgentLost, MissingPackageError
from cory.loading import resolve
from cory.provenance import describe_device
from cory.types import GenerateRequest, Reply, Stats


def _ray():
    try:
        import ray
    except ImportError:
        raise MissingPackageError("Ray (backend: ray)", "pip install ray==2.60.0  (or: pip install -e '.[ray]')") from None
    return ray


class AgentWorker:
    """Runs inside an actor: builds agent ``index`` and forwards method calls to it. With
    ``agents.shards: k`` it is rank ``rank`` of the agent's worker group, whose k ranks join
    one process group at ``rendezvous`` and hold the agent sharded."""

    def __init__(self, config: dict[str, Any], index: int, task_chat: bool, stop_strings: list[str],
                 rank: int = 0, rendezvous: str | None = None) -> None:
        import torch

        from cory.agents.factory import build_agents

        run = resolve(config)
        torch.set_num_threads(run.threads or max(1, int(run.ray.num_cpus_per_agent)))
        if run.agents.shards > 1:
            import torch.distributed as dist

            backend = "nccl" if run.ray.num_gpus_per_agent and torch.cuda.is_available() else "gloo"
            dist.init_process_group(backend, init_method=rendezvous, rank=rank, world_size=run.agents.shards)
        (self.agent,) = build_agents(run, task_chat=task_chat, stop_strings=stop_strings, indices=[index])

    def device(self) -> str:
        return describe_device(self.agent.device)

    def generate(self, request: GenerateRequest) -> Reply:
        return self.agent.generate(request)

    def update(self, scores: list[float], step: int) -> Stats:
        return self.agent.update(scores, step)

    def reset_learning_state(self) -> None:
        self.agent.reset_learning_state()

    def write_state(self, folder: Path) -> dict[str, Any]:
        return self.agent.write_state(folder)

    def read_state(self, folder: Path, meta: dict[str, Any]) -> None:
        self.agent.read_state(folder, meta)

    def save_pretrained(self, folder: Path) -> None:
        self.agent.save_pretrained(folder)

    def close(self) -> None:
        self.agent.close()


class RewardWorker:
    """Runs a reward function inside an actor of its own."""

    def __init__(self, config: dict[str, Any], default: str) -> None:
        from cory.rewards import reward_of

        self.reward = reward_of(resolve(config), default)

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


def _free_rendezvous() -> str:
    """A TCP address on this node for a worker group's process group."""
    import socket

    ray = _ray()
    with socket.socket() as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    return f"tcp://{ray.util.get_node_ip_address()}:{port}"


class WorkerGroup:
    """The k actors (ranks) of one sharded agent: every call goes to all of them, rank 0's
    answer is the agent's."""

    def __init__(self, actors: list[Any]) -> None:
        self.actors = actors

    def __getattr__(self, method: str) -> Any:
        calls = [getattr(actor, method) for actor in self.actors]
        return _GroupMethod(calls)


class _GroupMethod:
    def __init__(self, calls: list[Any]) -> None:
        self.calls = calls

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        futures = [call.remote(*args, **kwargs) for call in self.calls]
        return futures[0] if len(futures) == 1 else _FirstOf(futures)


class _FirstOf:
    """Futures of every rank; waiting on it waits for all and answers rank 0's result."""

    def __init__(self, futures: list[Any]) -> None:
        self.futures = futures


class RayAgents:
    """The ``AgentGroup`` methods over one Ray actor per agent (a worker group of
    ``agents.shards`` actors per agent when it is sharded)."""

    def __init__(self, config: RunConfig, task_chat: bool = False, stop_strings: Sequence[str] = ()) -> None:
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
        worker = self._ray.remote(AgentWorker).options(**options)
        shards = self.config.agents.shards
        if shards == 1:
            return worker.remote(to_dict(self.config), index, self.task_chat, self.stop_strings)
        rendezvous = _free_rendezvous()
        return WorkerGroup([worker.remote(to_dict(self.config), index, self.task_chat, self.stop_strings,
                                          rank, rendezvous) for rank in range(shards)])

    def _wait(self, future: Any) -> Any:
        if isinstance(future, _FirstOf):
            return self._ray.get(future.futures)[0]
        return self._ray.get(future)

    def __len__(self) -> int:
        return len(self.actors)

    def _gather(self, what: str, futures: dict[int, Any]) -> dict[int, Any]:
        """Wait for calls started on several actors (they run in parallel)."""
        results = {}
        for index, future in futures.items():
            try:
                results[index] = self._wait(future)
            except (self._ray.exceptions.RayActorError, self._ray.exceptions.ActorDiedError) as error:
                raise AgentLost(f"the actor of agent{index} died during {what}: {error}") from None
        return results

    def _on_every_actor(self, what: str, start) -> list[Any]:
        results = self._gather(what, {i: start(i, actor) for i, actor in enumerate(self.actors)})
        return [results[i] for i in range(len(self.actors))]

    def devices(self) -> list[str]:
        return self._on_every_actor("device()", lambda i, actor: actor.device.remote())

    def generate(self, requests: dict[int, GenerateRequest]) -> dict[int, Reply]:
        return self._gather("generate()", {i: self.actors[i].generate.remote(r) for i, r in requests.items()})

    def update(self, scores: dict[int, list[float]], step: int) -> dict[int, Stats]:
        return self._gather("update()", {i: self.actors[i].update.remote(s, step) for i, s in scores.items()})

    def reset_learning_state(self) -> None:
        self._on_every_actor("reset_learning_state()", lambda i, actor: actor.reset_learning_state.remote())

    def write_state(self, folder: Path) -> list[dict[str, Any]]:
        return self._on_every_actor("write_state()", lambda i, actor: actor.write_state.remote(folder))

    def read_state(self, folder: Path, metas: list[dict[str, Any]]) -> None:
        self._on_every_actor("read_state()", lambda i, actor: actor.read_state.remote(folder, metas[i]))

    def save_pretrained(self, folder: Path) -> None:
        self._on_every_actor("save_pretrained()",
                             lambda i, actor: actor.save_pretrained.remote(Path(folder) / f"agent{i}"))

    def _every_process(self) -> list[Any]:
        return [a for actor in self.actors for a in (actor.actors if isinstance(actor, WorkerGroup) else [actor])]

    def restart(self) -> None:
        """Replace every actor with a fresh one (state then comes from a checkpoint)."""
        for actor in self._every_process():
            self._ray.kill(actor, no_restart=True)
        self.actors = [self._start(index) for index in range(len(self.actors))]
        self.restarts += 1

    def close(self) -> None:
        """Let each agent stop its rollout engine, then end the actors."""
        try:
            self._ray.get([actor.close.remote() for actor in self._every_process()], timeout=60)
        except Exception:  # an actor already gone or stuck: its engine exits with it
            pass
        for actor in self._every_process():
            self._ray.kill(actor, no_restart=True)
        self.actors = []
