"""The speed-ups must not change results: a PPO step on the fast path gives the losses and
weights of the straightforward path (second policy forward for old log-probs and values,
no padding trimming, full LM head, for-loop AdamW), to tolerance."""

import pytest
import torch

from cory.agents.factory import build_agents
from cory.batches import MiniBatch
from cory.types import GenerateRequest


@pytest.mark.parametrize("method", ["ppo", "reinforce", "rloo"])
def test_fast_path_matches_the_straightforward_path(make_config, method):
    results = []
    for fast in (True, False):
        config = make_config(method=method, ppo__fast_path=fast, ppo__ppo_epochs=2,
                             ppo__batch_size=8, ppo__mini_batch_size=4, generation__max_new_tokens=8,
                             generation__length_sampler=[2, 8])
        (agent,) = build_agents(config)
        prompts = ["hello", "a much longer prompt", "ok", "the movie", "x", "abc", "some words", "z"]
        reply = agent.generate(GenerateRequest(prompts, step=0))
        scores = [len(text) / 8.0 + text.count("a") for text in reply.texts]  # non-degenerate
        stats = agent.update(scores, step=0)
        results.append((reply, stats, {n: p.detach().clone() for n, p in agent.learner.trainable.items()}))
    (fast_reply, fast, fast_params), (slow_reply, slow, slow_params) = results
    assert fast_reply.texts == slow_reply.texts
    assert fast_reply.kl == pytest.approx(slow_reply.kl, abs=1e-4)
    for key in ("policy_loss", "clip_fraction", "approx_kl", "entropy", "kl", "score", "return"):
        assert fast[key] == pytest.approx(slow[key], rel=1e-3, abs=1e-5), key
    if method == "ppo":
        assert fast["value_loss"] == pytest.approx(slow["value_loss"], rel=1e-3, abs=1e-5)
    for name in fast_params:
        assert torch.allclose(fast_params[name], slow_params[name], atol=1e-4), name


def test_trimming_a_minibatch_leaves_its_loss_unchanged(make_config):
    from cory.agents.settings import objective_of
    from cory.algorithms.objective import compute_targets, minibatch_loss

    config = make_config(generation__length_sampler=[1, 6])
    (agent,) = build_agents(config)
    agent.generate(GenerateRequest(["a", "a longer prompt here", "bc", "defg"], step=0))
    rollout = agent.held.rollouts[0]
    targets = compute_targets(objective_of(config.algorithm, config.ppo), rollout, torch.tensor([1.0, 0.0, 0.5, 0.2]), 0.1, None)
    rows = torch.tensor([0, 2])  # short prompts and responses: columns to trim on both sides
    losses = []
    for trim in (True, False):
        batch = MiniBatch.take(rollout, rows, targets.advantages, targets.returns, trim=trim)
        with torch.no_grad():
            out = agent.policy(batch.query_ids, batch.query_mask, batch.response_ids, batch.response_mask)
        losses.append(minibatch_loss(objective_of(config.algorithm, config.ppo), out, batch)[0].item())
    trimmed_batch = MiniBatch.take(rollout, rows, targets.advantages, targets.returns, trim=True)
    assert trimmed_batch.query_ids.shape[1] < rollout.query_ids.shape[1]
    assert losses[0] == pytest.approx(losses[1], rel=1e-5, abs=1e-6)


def _one_update(make_config, **overrides):
    """Stats of one update and the flattened change it made to the weights."""
    config = make_config(ppo__batch_size=4, ppo__mini_batch_size=2, generation__max_new_tokens=6,
                         generation__length_sampler=[2, 6], **overrides)
    (agent,) = build_agents(config)
    before = torch.cat([p.detach().flatten() for p in agent.learner.trainable.values()])
    reply = agent.generate(GenerateRequest(["hello", "a much longer prompt", "ok", "the movie"], step=0))
    stats = agent.update([len(text) / 6.0 for text in reply.texts], step=0)
    after = torch.cat([p.detach().flatten() for p in agent.learner.trainable.values()])
    return stats, after - before


def test_a_compiled_update_matches_the_eager_one(make_config):
    eager, eager_change = _one_update(make_config)
    fast, fast_change = _one_update(make_config, ppo__compile=True)
    # The second optimiser step's losses depend on the first step's weights.
    for key in ("policy_loss", "value_loss", "approx_kl", "entropy", "grad_norm"):
        assert fast[key] == pytest.approx(eager[key], rel=1e-3, abs=1e-5), key
    # Adam's first steps are ±lr wherever a gradient is ~0, so compare the update as a whole.
    assert torch.nn.functional.cosine_similarity(fast_change, eager_change, dim=0) > 0.999
    assert fast_change.norm() == pytest.approx(eager_change.norm().item(), rel=1e-3)


def test_compile_without_a_cpp_compiler_names_the_option(make_config, monkeypatch):
    from cory.errors import ConfigError

    monkeypatch.setenv("CXX", "no-such-compiler-anywhere")
    with pytest.raises(ConfigError, match="ppo.compile"):
        build_agents(make_config(ppo__compile=True))
