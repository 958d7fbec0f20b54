"""Assembling a run: a config in; its task, reward, agent group, topology and role schedule out.

``build_run`` is the one place that builds these, used by the trainer and by ``cory eval``
(the Ray backend's actors build their single agent with ``cory.agents.factory.build_agents``);
``prepare_process`` readies the training process (checks against this machine, seeds,
threads, determinism).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from cory.agents.factory import build_agents, resolve_device
from cory.agents.group import AgentGroup, LocalAgents
from cory.agents.ray_group import RayAgents
from cory.config.preflight import check_environment
from cory.config.schema import RunConfig
from cory.config.validation import ignored_settings
from cory.distributed.ray_backend import RayReward
from cory.errors import ConfigWarning
from cory.models.registry import load_tokenizer
from cory.multi.roles import RoleSchedule
from cory.multi.topology import Topology, topology_of
from cory.rewards import reward_of
from cory.rewards.base import RewardFunction
from cory.seeding import seed_everything, use_deterministic_algorithms
from cory.tasks import build_task
from cory.tasks.base import Task



@dataclass
class RunParts:
    config: RunConfig
    task: Task
    reward: RewardFunction
    agents: AgentGroup
    topology: Topology
    roles: RoleSchedule


def build_run(config: RunConfig, task: Task | None = None, reward: RewardFunction | None = None,
              policy_sources: list[str] | None = None, local: bool = False) -> RunParts:
    """Everything a run is made of; a ``task`` or ``reward`` passed in is used as it is (the
    Python API's). ``local`` keeps the agents in this process whatever the backend;
    ``policy_sources`` starts each agent's policy from a saved folder (its reference stays the
    base model)."""
    task = task or build_task(config.task, load_tokenizer(config.agent_models()[0], config.trust_remote_code))
    agents = _agent_group(config, task, policy_sources, local)
    reward = reward or _reward(config, task, local)
    return RunParts(config, task, reward, agents, topology_of(config),
                    RoleSchedule(config.n_agents, config.roles.swap_every))


def prepare_process(config: RunConfig) -> RunConfig:
    """Check ``config`` against this machine (model folders, resume, trackers), warn about
    settings its algorithm ignores, then seed this process and set its torch threads and
    determinism. Returns the checked config."""
    checked = check_environment(config)
    for message in ignored_settings(config):
        warnings.warn(message, ConfigWarning, stacklevel=3)
    seed_everything(config.seed)
    if config.threads:
        torch.set_num_threads(config.threads)
    if config.deterministic:
        use_deterministic_algorithms()
    return checked


def _agent_group(config: RunConfig, task: Task, policy_sources: list[str] | None, local: bool) -> AgentGroup:
    if config.backend == "ray" and not local:
        return RayAgents(config, task.chat, task.stop_strings)
    return LocalAgents(build_agents(config, task_chat=task.chat, stop_strings=task.stop_strings,
                                    policy_sources=policy_sources))


def _reward(config: RunConfig, task: Task, local: bool) -> RewardFunction:
    if config.backend == "ray" and config.ray.reward_actor and not local:
        return RayReward(config, task.default_reward)
    # A reward model sits beside the first agent (on its GPU when there is one).
    return reward_of(config, task.default_reward, resolve_device(config.agent_devices()[0], "device"))
