"""Device correctness without a GPU: the maths on a non-CPU device, placement on [cpu, cpu].

PyTorch's ``meta`` device is a real non-CPU device with no data: any op that mixes a meta
tensor with a CPU tensor fails exactly as CUDA-with-CPU does, so running the update maths
on ``meta`` catches a tensor created on the host by default before a user's GPU does.
(``FakeTensorMode`` with ``cuda`` was tried: on a CPU-only build it cannot index tensors.)
"""

from __future__ import annotations

import pytest
import torch

from cory.agents.elastic_reset import ElasticReset
from cory.agents.factory import build_agents
from cory.agents.settings import objective_of
from cory.algorithms.kl import kl_per_token
from cory.algorithms.normalize import RunningMoments, transform_scores
from cory.algorithms.objective import compute_targets, minibatch_loss
from cory.batches import MiniBatch, Rollout
from cory.config.schema import AlgorithmConfig, PPOConfig
from cory.errors import ConfigError, CoryError
from cory.models.generation import SamplingSettings, sample
from cory.models.policy import PolicyOutput
from cory.multi.collective import collective_rewards
from cory.seeding import generator
from cory.types import GenerateRequest
from helpers.training import run_trainer


DEVICE = "meta"


def device_rollout(batch: int = 4, query: int = 3, response: int = 5, vocab: int = 11) -> Rollout:
    cuda = DEVICE
    mask = torch.ones(batch, response, dtype=torch.long, device=cuda)
    return Rollout(
        torch.randint(0, vocab, (batch, query), device=cuda), torch.ones(batch, query, dtype=torch.long, device=cuda),
        torch.randint(0, vocab, (batch, response), device=cuda), mask,
        torch.randn(batch, response, device=cuda), torch.randn(batch, response, device=cuda),
        torch.randn(batch, response, device=cuda), torch.randn(batch, response, device=cuda),
        torch.randn(batch, response, device=cuda))


@pytest.mark.parametrize("name", ["ppo", "reinforce_clip", "rloo", "grpo"])
def test_update_maths_stay_on_the_device(name):
    """(Classic ``reinforce`` keeps its moving-average baseline as a Python float by design.)"""
    rollout = device_rollout()
    algorithm = AlgorithmConfig(name=name, group_size=2, returns="trl_gae" if name == "reinforce_clip" else "discounted")
    # (meta tensors hold no numbers: score moments, padding trimming and the ratio guard read
    # numbers back by design, one sync per mini-batch, and are exercised on the CPU elsewhere.)
    ppo = PPOConfig(score_clip=3.0)
    scores = transform_scores(torch.randn(4, device=DEVICE), RunningMoments(), False, False, 3.0)
    targets = compute_targets(objective_of(algorithm, ppo), rollout, scores, 0.1, None)
    rows = torch.tensor([0, 2], device=DEVICE)
    batch = MiniBatch.take(rollout, rows, targets.advantages, targets.returns, trim=False)
    out = PolicyOutput(torch.randn(2, 5, device=DEVICE, requires_grad=True), torch.randn(2, 5, device=DEVICE),
                       torch.randn(2, 5, device=DEVICE), torch.randn(2, 5, 11, device=DEVICE))
    loss, stats = minibatch_loss(objective_of(algorithm, ppo), out, batch)
    assert loss.device.type == DEVICE
    assert all(value.device.type == DEVICE for value in stats.values())


def test_kl_collective_rewards_and_elastic_reset_stay_on_the_device():
    logp = torch.randn(2, 4, 7, device=DEVICE).log_softmax(-1)
    ref = torch.randn(2, 4, 7, device=DEVICE).log_softmax(-1)
    for kind in ("kl", "abs", "mse", "full"):
        assert kl_per_token(logp[..., 0], ref[..., 0], kind, logp, ref).device.type == DEVICE
    assert collective_rewards(torch.randn(2, 4, device=DEVICE), 1.0, normalize=True).device.type == DEVICE
    param = torch.nn.Parameter(torch.zeros(3, device=DEVICE))
    elastic = ElasticReset({"w": param}, 0.9, 2)
    elastic.update_ema()
    elastic.reset()
    with elastic.ema_weights():
        assert param.device.type == DEVICE


def test_a_cpu_generator_for_device_tensors_is_refused_with_a_clear_error():
    """The bug this file exists for: a CPU generator handed to sampling on a GPU."""
    ids = torch.ones(2, 3, dtype=torch.long, device=DEVICE)
    with pytest.raises(CoryError, match="generator is on cpu but the model's tensors are on meta"):
        sample(torch.nn.Identity(), ids, torch.ones_like(ids), SamplingSettings(), [0], 0,
               generator=torch.Generator())


def test_agents_hand_sampling_a_generator_on_their_own_device(make_config, monkeypatch):
    import cory.agents.answering as agent_module

    seen = []
    original = agent_module.sample

    def recording(lm, query_ids, *args, generator=None, **kwargs):
        seen.append((generator.device, query_ids.device, next(lm.parameters()).device))
        return original(lm, query_ids, *args, generator=generator, **kwargs)
    monkeypatch.setattr(agent_module, "sample", recording)
    created = []
    real_generator = agent_module.generator

    def recording_generator(*parts, device="cpu"):
        created.append((parts[0], torch.device(device)))
        return real_generator(*parts, device=device)
    monkeypatch.setattr(agent_module, "generator", recording_generator)
    agent = build_agents(make_config())[0]
    agent.generate(GenerateRequest(["abc", "de"], step=0))
    assert seen and all(g == q == p for g, q, p in seen)
    assert ("sample", agent.device) in created


def test_agents_devices_places_each_agent_and_gives_each_device_a_reference(make_config):
    config = make_config(method="cory", agents__devices=["cpu", "cpu"])
    pioneer, observer = build_agents(config)
    assert pioneer.device == observer.device == torch.device("cpu")
    assert pioneer.reference is observer.reference  # one device: one shared reference
    trainer = run_trainer(make_config(method="cory", steps=2, eval_every=0, agents__devices=["cpu", "cpu"]))
    assert len([r for r in trainer.rows if "agent1/kl" in r]) == 2


def test_a_missing_gpu_is_a_config_error_naming_the_key(make_config):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    with pytest.raises(ConfigError, match=r"device: 'cuda' was requested but no CUDA GPU is visible"):
        build_agents(make_config(device="cuda"))
    with pytest.raises(ConfigError, match=r"agents.devices\[1\]: 'cuda:1'"):
        build_agents(make_config(method="cory", agents__devices=["cpu", "cuda:1"]))


def test_bf16_autocast_runs_over_fp32_weights_and_keeps_losses_fp32(make_config):
    trainer = run_trainer(make_config(method="cory", steps=2, eval_every=0, mixed_precision="bf16"))
    agent = trainer.agents.agents[0]
    assert all(p.dtype == torch.float32 for p in agent.learner.trainable.values())
    rows = [r for r in trainer.rows if "agent0/policy_loss" in r]
    assert len(rows) == 2 and all(r["agent0/kl"] == r["agent0/kl"] for r in rows)  # finite, not NaN


def test_deterministic_runs_repeat_exactly(make_config, tmp_path):
    try:
        first = run_trainer(make_config(steps=2, eval_every=0, deterministic=True, output_dir=str(tmp_path / "a")))
        second = run_trainer(make_config(steps=2, eval_every=0, deterministic=True, output_dir=str(tmp_path / "b")))
    finally:
        torch.use_deterministic_algorithms(False)
    keep = lambda rows: [{k: v for k, v in r.items() if "time/" not in k and "memory/" not in k} for r in rows]
    assert keep(first.rows) == keep(second.rows)


def test_generators_are_made_where_they_are_asked_for():
    assert generator("sample", 0, device="cpu").device == torch.device("cpu")
    if torch.cuda.is_available():
        assert generator("sample", 0, device=DEVICE).device.type == DEVICE
