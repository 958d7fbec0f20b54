"""Building a run's agents from its config.

Agents of the same base model share one frozen reference. With LoRA and
``agents.lora.shared_base`` they also share the base weights, each agent holding one
adapter, so N agents cost about one model's memory.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import torch

from cory.agents.agent import Agent
from cory.agents.settings import AgentSettings
from cory.config.schema import RunConfig
from cory.engines.vllm_engine import VLLMEngine
from cory.errors import ConfigError
from cory.models.reference import Reference, adapter_free_reference, frozen_reference
from cory.models.registry import LoadedModel, load_model, moved, stop_token_ids
from cory.seeding import derive_seed


def resolve_device(name: str, key: str = "device") -> torch.device:
    """``auto``: the first GPU if there is one; a CUDA device must exist (errors name ``key``)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"{key}: '{name}' was requested but no CUDA GPU is visible; "
                              "use cpu or auto")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"{key}: '{name}' does not exist; this machine has "
                              f"{torch.cuda.device_count()} GPU(s)")
    return device


def _lora_config(config: RunConfig) -> Any:
    try:
        import peft  # optional: agents.lora
    except ImportError:
        raise ConfigError("agents.lora.enabled: LoRA needs peft; pip install peft==0.21.2") from None
    lora = config.agents.lora
    # peft types lora_alpha as int; it takes floats
    return peft.LoraConfig(r=lora.r, lora_alpha=cast(Any, lora.alpha), lora_dropout=lora.dropout,
                           target_modules=lora.target_modules or "all-linear", bias="none",
                           task_type="CAUSAL_LM")


def _use_chat(config: RunConfig, task_chat: bool, loaded: LoadedModel) -> bool:
    wanted = config.task.chat_template
    has_template = getattr(loaded.tokenizer, "chat_template", None) is not None
    if wanted is None:
        return task_chat and has_template
    if wanted and not has_template:
        raise ConfigError(f"task.chat_template: model '{loaded.spec}' has no chat template; "
                          "set task.chat_template=false")
    return wanted


def build_agents(config: RunConfig, task_chat: bool = False, stop_strings: Sequence[str] = (),
                 policy_sources: list[str] | None = None,
                 indices: list[int] | None = None) -> list[Agent]:
    """One agent per topology node (or only those in ``indices``, e.g. the one a Ray actor
    holds). ``policy_sources`` optionally starts each agent's policy from another spec (a
    trained folder) while its reference stays the base. ``stop_strings`` end a response
    (the task's, e.g. the next "Question:")."""
    devices = [resolve_device(name, "device" if config.agents.devices is None else f"agents.devices[{i}]")
               for i, name in enumerate(config.agent_devices())]
    specs = config.agent_models()
    bases: dict[tuple[str, torch.device], LoadedModel] = {}
    references: dict[tuple[str, torch.device], Reference] = {}
    peft_bases: dict[str, Any] = {}  # peft models
    settings = AgentSettings.of(config)
    engines: dict[int, VLLMEngine] = {}  # generation.engine: vllm with LoRA: one engine per peft base
    agents = []
    for index in range(len(specs)) if indices is None else indices:
        spec, device = specs[index], devices[index]
        if (spec, device) not in bases:
            bases[(spec, device)] = _base_on(device, spec, bases, config)
        base = bases[(spec, device)]
        source = policy_sources[index] if policy_sources else spec
        if config.agents.lora.enabled:
            lm, reference, adapter = _lora_policy(config, base, spec, index, peft_bases)
        else:
            if source != spec:
                lm = moved(load_model(source, config.dtype, config.trust_remote_code).model, device)
            else:
                lm = copy.deepcopy(base.model)
            for param in lm.parameters():
                param.requires_grad_(True)
            if (spec, device) not in references:  # the loaded base becomes that device's reference
                references[(spec, device)] = frozen_reference(base.model)
            reference, adapter = references[(spec, device)], None
        agent = Agent(index, lm, base.tokenizer, reference, stop_token_ids(base), settings, device,
                      adapter=adapter, use_chat=_use_chat(config, task_chat, base),
                      stop_strings=stop_strings, engine=engines.get(id(lm)))
        if agent.engine is not None and adapter is not None:
            engines[id(lm)] = agent.engine
        if source != spec:
            agent.policy.load_value_head(Path(source))  # a folder without one keeps the fresh head
        agents.append(agent)
    return agents


def _base_on(device: torch.device, spec: str, bases: dict[tuple[str, torch.device], LoadedModel],
             config: RunConfig) -> LoadedModel:
    """Base model ``spec`` on ``device``: a copy of one already loaded elsewhere, or a load."""
    for (loaded_spec, _), loaded in bases.items():
        if loaded_spec == spec:
            return LoadedModel(spec, moved(copy.deepcopy(loaded.model), device), loaded.tokenizer)
    loaded = load_model(spec, config.dtype, config.trust_remote_code)
    moved(loaded.model, device)
    return loaded


def _lora_policy(config: RunConfig, base: LoadedModel, spec: str, index: int,
                 peft_bases: dict[str, Any]) -> tuple[Any, Reference, str]:
    import peft  # optional: agents.lora

    adapter = f"agent{index}"
    lora = _lora_config(config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed("lora", config.seed, index))
        if config.agents.lora.shared_base and spec in peft_bases:
            model = peft_bases[spec]
            model.add_adapter(adapter, lora)
        else:
            target = base.model if config.agents.lora.shared_base else copy.deepcopy(base.model)
            model = peft.get_peft_model(target, lora, adapter_name=adapter)
            if config.agents.lora.shared_base:
                peft_bases[spec] = model
    return model, adapter_free_reference(model), adapter
