"""Building a run's agents from its config.

Agents of the same base model share one frozen reference. With LoRA and
``agents.lora.shared_base`` they also share the base weights, each agent holding one
adapter, so N agents cost about one model's memory.
"""

from __future__ import annotations

import copy

import torch

from cory.agents.agent import Agent
from cory.config import RunConfig
from cory.errors import ConfigError
from cory.models.reference import Reference, adapter_free_reference, frozen_reference
from cory.models.registry import LoadedModel, load_model, stop_token_ids
from cory.seeding import derive_seed


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _lora_config(config: RunConfig):
    try:
        import peft
    except ImportError:
        raise ConfigError("agents.lora.enabled: LoRA needs peft; pip install peft==0.21.2") from None
    lora = config.agents.lora
    return peft.LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
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


def build_agents(config: RunConfig, task_chat: bool = False, stop_strings: list[str] = (),
                 policy_sources: list[str] | None = None,
                 indices: list[int] | None = None) -> list[Agent]:
    """One agent per topology node (or only those in ``indices``, e.g. the one a Ray actor
    holds). ``policy_sources`` optionally starts each agent's policy from another spec (a
    trained folder) while its reference stays the base. ``stop_strings`` end a response
    (the task's, e.g. the next "Question:")."""
    device = resolve_device(config.device)
    specs = config.agent_models()
    bases: dict[str, LoadedModel] = {}
    references: dict[str, Reference] = {}
    peft_bases: dict[str, torch.nn.Module] = {}
    agents = []
    for index in range(len(specs)) if indices is None else indices:
        spec = specs[index]
        if spec not in bases:
            bases[spec] = load_model(spec, config.dtype, config.trust_remote_code)
            bases[spec].model.to(device)
        base = bases[spec]
        source = policy_sources[index] if policy_sources else spec
        if config.agents.lora.enabled:
            lm, reference, adapter = _lora_policy(config, base, spec, index, peft_bases)
        else:
            if source != spec:
                lm = load_model(source, config.dtype, config.trust_remote_code).model.to(device)
            else:
                lm = copy.deepcopy(base.model)
            for param in lm.parameters():
                param.requires_grad_(True)
            if spec not in references:  # the loaded base itself becomes the frozen reference
                references[spec] = frozen_reference(base.model)
            reference, adapter = references[spec], None
        agent = Agent(index, lm, base.tokenizer, reference, stop_token_ids(base), config, device,
                      adapter=adapter, use_chat=_use_chat(config, task_chat, base),
                      stop_strings=stop_strings)
        if source != spec:
            agent.policy.load_value_head(source)  # a folder without one keeps the fresh head
        agents.append(agent)
    return agents


def _lora_policy(config: RunConfig, base: LoadedModel, spec: str, index: int,
                 peft_bases: dict[str, torch.nn.Module]):
    import peft

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
