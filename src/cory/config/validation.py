"""Checks of a config that span several keys, on the config alone: no torch, no filesystem
(``cory.config.preflight`` checks the machine when a run starts). Every message names the key and
the fix."""

from __future__ import annotations

import re
import string

from cory.algorithms.registry import algorithm_named
from cory.config.methods import METHOD_PRESETS
from cory.config.schema import PPOConfig, RunConfig
from cory.config.topologies import TOPOLOGIES
from cory.errors import ConfigError
from cory.models.specs import check_spec_syntax
from cory.trackers import TRACKERS


TEMPLATE_FIELDS = {"query", "answers"}
EXACT_ANSWER_TASKS = ("gsm8k", "arithmetic")
DEVICE_NAME = re.compile(r"^(cpu|cuda(:\d+)?)$")


def template_fields(template: str, key: str) -> set[str]:
    """The placeholders of a ``str.format`` template; errors name ``key``."""
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as error:
        raise ConfigError(f"{key}: not a valid template ({error}); escape braces as {{{{ }}}}") from None
    unknown = names - TEMPLATE_FIELDS
    if unknown:
        raise ConfigError(f"{key}: unknown placeholder(s) {sorted(unknown)}; use {{query}} and {{answers}}")
    return names


def ignored_settings(config: RunConfig) -> list[str]:
    """Messages about ``ppo:`` keys set away from their defaults that ``algorithm.name`` never
    reads (harmless, but usually a sign the user expected them to act)."""
    algorithm = config.algorithm
    entry = algorithm_named(algorithm.name)
    ignored = set(entry.ignores)
    if entry.advantage == "returns" and not entry.reads_values(algorithm.returns):
        ignored.add("lam")  # discounted reward-to-go has no GAE
    defaults = PPOConfig()
    messages = [f"ppo.{key} = {getattr(config.ppo, key)!r} has no effect: algorithm '{algorithm.name}' "
                f"does not read it (docs/guide.md lists the keys each algorithm reads)"
                for key in sorted(ignored) if getattr(config.ppo, key) != getattr(defaults, key)]
    if config.collective.turn_discount and config.topology.rounds == 1:
        messages.append(f"collective.turn_discount = {config.collective.turn_discount} has no effect: it "
                        "adds later rounds' rewards, and topology.rounds is 1")
    return messages + _single_agent_ignores(config)


def _single_agent_ignores(config: RunConfig) -> list[str]:
    """Messages about multi-agent keys set on a run with one agent, where they cannot act."""
    if config.topology.name != "single":
        return []
    messages = []
    if config.topology.answer != "last":
        messages.append(f"topology.answer = {config.topology.answer!r} has no effect: topology 'single' has one "
                        "answer per query; it picks among several agents' answers")
    if config.collective.lambda_:
        messages.append(f"collective.lambda = {config.collective.lambda_} has no effect: topology 'single' has "
                        "no other agent whose reward it could weigh")
    if config.roles.swap_every is not None:
        messages.append(f"roles.swap_every = {config.roles.swap_every} has no effect: topology 'single' has one "
                        "role")
    return messages


def _check_loss_type(config: RunConfig) -> None:
    """TRL's loss types reduce a policy-gradient loss; Dr. GRPO's constant needs one length limit."""
    algorithm = config.algorithm
    upper_clip = 1 + (algorithm.epsilon_high if algorithm.epsilon_high is not None else config.ppo.cliprange)
    if algorithm.delta is not None and algorithm.delta <= upper_clip:
        raise ConfigError(f"algorithm.delta: {algorithm.delta:g} caps the unclipped ratio at or below the upper clip "
                          f"(1 + {upper_clip - 1:g}), so it would clip positive advantages too; set it above "
                          f"{upper_clip:g} (TRL suggests 1 + epsilon and more) or null")
    if algorithm.loss_type is None:
        return
    if algorithm_named(algorithm.name).value_loss:
        raise ConfigError(f"algorithm.loss_type: {algorithm.loss_type} reduces the policy loss of algorithms "
                          f"without a value loss (grpo, rloo, reinforce_clip, reinforce); '{algorithm.name}' "
                          "keeps TRL 0.7's token mean: remove the key or pick one of those")
    if algorithm.loss_type == "dr_grpo" and config.generation.length_sampler is not None:
        raise ConfigError("algorithm.loss_type: dr_grpo divides by sequences x generation.max_new_tokens, a "
                          "fixed maximum length, but generation.length_sampler draws each row's limit; set "
                          "generation.length_sampler: null or pick another loss_type")


def _check_method_holds(config: RunConfig) -> None:
    """Keys that define ``method`` must keep the preset's value: otherwise the run would train
    another method under this one's name (``refine`` with one round is one-round CORY)."""
    preset = METHOD_PRESETS[config.method]
    rounds = preset.get("topology", {}).get("rounds", 1)
    if rounds > 1 and config.topology.rounds == 1:
        raise ConfigError(f"topology.rounds: method '{config.method}' answers over {rounds} rounds; with "
                          f"topology.rounds: 1 it would train another method under its name (for refine: "
                          "method=cory); keep topology.rounds >= 2 or pick that method")
    if preset.get("elastic_reset", {}).get("enabled") and not config.elastic_reset.enabled:
        raise ConfigError("elastic_reset.enabled: method 'elastic_reset' is PPO with Elastic Reset; with it off the "
                          "run is PPO under another name: use method=ppo, or keep elastic_reset.enabled: true")


def _check_sampler_logprobs(config: RunConfig) -> None:
    """``generation.logprobs: sampler`` recomputes top-k and top-p; other reshaping it cannot."""
    gen = config.generation
    if gen.logprobs != "sampler":
        return
    reshaped = {"generation.repetition_penalty": gen.repetition_penalty != 1.0,
                "generation.min_new_tokens": gen.min_new_tokens > 0, "generation.engine: vllm": gen.engine == "vllm"}
    found = [key for key, on in reshaped.items() if on]
    if found:
        raise ConfigError(f"generation.logprobs: sampler recomputes the distribution a token was drawn from through "
                          f"temperature, top-k and top-p only; {', '.join(found)} reshapes it in a way the update "
                          "cannot repeat (vLLM returns the model's log-probs): use generation.logprobs: model")


def validate(config: RunConfig) -> RunConfig:
    """Checks that involve several keys, on the config alone (no torch, no filesystem: those
    are ``cory.preflight.check_environment``'s). Returns the config for chaining."""
    ppo = config.ppo
    per_step = ppo.mini_batch_size * ppo.gradient_accumulation_steps
    if ppo.batch_size % per_step:
        raise ConfigError(
            f"ppo.batch_size ({ppo.batch_size}) must be divisible by ppo.mini_batch_size x "
            f"ppo.gradient_accumulation_steps ({ppo.mini_batch_size} x "
            f"{ppo.gradient_accumulation_steps} = {per_step})")
    if ppo.use_score_norm and not ppo.use_score_scaling:
        raise ConfigError("ppo.use_score_norm needs ppo.use_score_scaling: true (as in TRL)")
    if algorithm_named(config.algorithm.name).grouped and ppo.batch_size % config.algorithm.group_size:
        raise ConfigError(
            f"ppo.batch_size ({ppo.batch_size}) must be a multiple of algorithm.group_size "
            f"({config.algorithm.group_size}) for {config.algorithm.name}")
    topo = config.topology
    facts = TOPOLOGIES[topo.name]
    if facts.fixed_agents is not None and topo.n_agents not in (None, config.n_agents):
        raise ConfigError(f"topology.n_agents: '{topo.name}' has exactly {config.n_agents} "
                          f"agent(s), got {topo.n_agents}; remove the key or pick another topology")
    if facts.fixed_agents != 1 and config.n_agents < 2:
        raise ConfigError(f"topology.n_agents: '{topo.name}' needs at least 2 agents, got {config.n_agents}")
    if config.n_agents > 16:
        raise ConfigError(f"topology.n_agents: at most 16 agents are supported, got {config.n_agents}")
    if config.agents.models is not None and len(config.agents.models) != config.n_agents:
        raise ConfigError(
            f"agents.models: lists {len(config.agents.models)} model(s) but topology "
            f"'{topo.name}' has {config.n_agents} agent(s); give one spec per agent")
    for i, spec in enumerate(config.agent_models()):
        check_spec_syntax(spec, "model" if config.agents.models is None else f"agents.models[{i}]")
    gen = config.generation
    if gen.min_new_tokens > gen.max_new_tokens:
        raise ConfigError(f"generation.min_new_tokens ({gen.min_new_tokens}) exceeds "
                          f"generation.max_new_tokens ({gen.max_new_tokens})")
    if gen.length_sampler is not None:
        if len(gen.length_sampler) != 2 or gen.length_sampler[0] > gen.length_sampler[1]:
            raise ConfigError(f"generation.length_sampler: expected [min, max] with min <= max, "
                              f"got {gen.length_sampler}")
        if gen.length_sampler[1] > gen.max_new_tokens:
            raise ConfigError(f"generation.length_sampler: max {gen.length_sampler[1]} exceeds "
                              f"generation.max_new_tokens ({gen.max_new_tokens}); raise that too")
    task = config.task
    if task.query_min_tokens > task.query_max_tokens:
        raise ConfigError(f"task.query_min_tokens ({task.query_min_tokens}) exceeds "
                          f"task.query_max_tokens ({task.query_max_tokens})")
    for key, template in (("observer_template", task.observer_template), ("revise_template", task.revise_template)):
        if template is not None and "query" not in template_fields(template, f"task.{key}"):
            raise ConfigError(f"task.{key}: must contain {{query}}, e.g. "
                              "'Improve this: {query}{answers}\\n{query}'")
    _check_rounds_and_credit(config)
    _check_method_holds(config)
    _check_loss_type(config)
    _check_sampler_logprobs(config)
    for name in config.log.report_to:
        if name not in TRACKERS:
            raise ConfigError(f"log.report_to: unknown tracker {name!r}; choose from {', '.join(TRACKERS)}")
    shards = config.agents.shards
    if shards > 1:
        if config.backend != "ray":
            raise ConfigError(f"agents.shards: {shards} ranks per agent run as Ray worker groups; set backend: ray "
                              "(pip install 'cory[ray]')")
        if config.agents.lora.enabled or config.elastic_reset.enabled:
            what = "agents.lora.enabled" if config.agents.lora.enabled else "elastic_reset.enabled"
            raise ConfigError(f"agents.shards: a sharded agent does not support {what} yet; set agents.shards: 1")
        if config.ppo.mini_batch_size < shards:
            raise ConfigError(f"ppo.mini_batch_size: {config.ppo.mini_batch_size} rows cannot be split over "
                              f"agents.shards: {shards} ranks; raise it to at least {shards}")
    if config.generation.engine == "vllm":
        _check_vllm_engine(config)
    elif config.generation.vllm.correction != "none":
        raise ConfigError("generation.vllm.correction: corrects for vLLM's sampler, but generation.engine is "
                          "hf (our sampler is the policy); set generation.engine: vllm or correction: none")
    if config.reward.name == "python" and not config.reward.function:
        raise ConfigError("reward.function: reward 'python' needs 'module:function'")
    if config.reward.name == "remote" and not (config.reward.url or config.reward.urls):
        raise ConfigError("reward.url: reward 'remote' needs the server's URL, e.g. "
                          "http://127.0.0.1:8000/get_reward (start one with `cory serve-reward`)")
    if config.reward.url and config.reward.urls:
        raise ConfigError("reward.urls: give either reward.url (one server) or reward.urls (several), not both")
    for url in [config.reward.url, *(config.reward.urls or [])]:
        if url and not url.startswith(("http://", "https://")):
            raise ConfigError(f"reward.url: {url.split('@')[-1]!r} is not an http(s) URL, e.g. "
                              "http://127.0.0.1:8000/get_reward")
    if config.reward.name == "hf_classifier" and not config.reward.model:
        raise ConfigError("reward.model: reward 'hf_classifier' needs a classifier folder or hub id")
    if config.eval.pass_k and max(config.eval.pass_k) > config.eval.samples_per_prompt:
        raise ConfigError(f"eval.pass_k: k={max(config.eval.pass_k)} exceeds "
                          f"eval.samples_per_prompt ({config.eval.samples_per_prompt}); raise n")
    if config.device != "auto" and not DEVICE_NAME.match(config.device):
        raise ConfigError(f"device: '{config.device}' is not a device; use auto, cpu, cuda or cuda:N")
    if config.agents.devices is not None:
        if len(config.agents.devices) != config.n_agents:
            raise ConfigError(
                f"agents.devices: lists {len(config.agents.devices)} device(s) but topology "
                f"'{topo.name}' has {config.n_agents} agent(s); give one device per agent")
        for i, name in enumerate(config.agents.devices):
            if not DEVICE_NAME.match(name):
                raise ConfigError(f"agents.devices[{i}]: '{name}' is not a device; use cpu, cuda or cuda:N")
        if config.agents.lora.enabled and config.agents.lora.shared_base and len(set(config.agents.devices)) > 1:
            raise ConfigError("agents.devices: agents sharing one LoRA base must share its device; "
                              "set agents.lora.shared_base=false or give every agent the same device")
    if config.dtype == "float16" and "cuda" not in config.device and not any(
            "cuda" in d for d in config.agents.devices or ()):
        raise ConfigError("dtype: float16 needs device=cuda; use float32 or bfloat16 on CPU")
    if config.mixed_precision == "bf16" and config.dtype != "float32":
        raise ConfigError(f"mixed_precision: bf16 autocasts over float32 weights, but dtype is "
                          f"{config.dtype}; set dtype=float32 (or mixed_precision=no)")
    return config


def _check_rounds_and_credit(config: RunConfig) -> None:
    """``topology.answer: vote`` needs final answers; difference credit needs edges and lambda."""
    topo, collective = config.topology, config.collective
    if topo.answer == "vote" and config.task.name not in EXACT_ANSWER_TASKS:
        raise ConfigError(f"topology.answer: vote takes the majority final answer, which task "
                          f"'{config.task.name}' does not have; use it with {' or '.join(EXACT_ANSWER_TASKS)}, "
                          "or set topology.answer: last")
    if collective.credit == "difference":
        if TOPOLOGIES[topo.name].edges_within_round is False and topo.rounds == 1:
            raise ConfigError(f"collective.credit: difference credits a turn with what its answer changed in the "
                              f"turns that see it, and topology '{topo.name}' with topology.rounds: 1 has no "
                              "such edges; set topology.rounds: 2 or more, pick a topology with edges, or "
                              "use collective.credit: sum")
        if collective.lambda_ == 0:
            raise ConfigError("collective.credit: difference scales what a turn changed by collective.lambda, "
                              "which is 0, so it would change nothing; set collective.lambda (1 for CORY)")


def _check_vllm_engine(config: RunConfig) -> None:
    """What ``generation.engine: vllm`` cannot do (yet), each named with its way out."""
    unsupported = {
        "generation.penalise_padding": (config.generation.penalise_padding,
                                        "vLLM sees no left padding; set it to false"),
        "agents.dropout": (config.agents.dropout == "trl", "vLLM samples without dropout; set it to off"),
        "generation.compile": (config.generation.compile, "it compiles our decode loop; vLLM captures its own "
                                                          "with generation.vllm.enforce_eager: false"),
    }
    found = [f"{key}: not available with generation.engine: vllm ({fix})"
             for key, (applies, fix) in unsupported.items() if applies]
    gen = config.generation
    if gen.vllm.correction == "tis":
        reshaping = {"generation.top_k": gen.top_k != 0, "generation.top_p": gen.top_p != 1.0,
                     "generation.repetition_penalty": gen.repetition_penalty != 1.0,
                     "generation.min_new_tokens": gen.min_new_tokens != 0}
        found += [f"{key}: generation.vllm.correction: tis weighs tokens by p_policy / p_sampler, which "
                  f"this filter makes differ by design; set it off or set correction: none"
                  for key, applies in reshaping.items() if applies]
    if found:  # every conflict at once, not one per run
        raise ConfigError("; ".join(found))
