"""Rows that repeat a prompt (a group of samples per prompt) run it once: the sampler's
prefill and the scorer's prompt pass are shared, and the tokens, log-probs, values and
gradients are those of the one-pass path (to 1e-5)."""

from __future__ import annotations

import pytest
import torch

from cory.agents.factory import build_agents
from cory.agents.sampling import sampling_settings
from cory.models.generation import sample
from cory.models.policy import score_sequences
from cory.models.shared_prompts import DistinctPrompts
from cory.seeding import generator
from cory.types import GenerateRequest


def test_distinct_prompts_name_a_row_of_each_and_each_rows_prompt():
    ids = torch.tensor([[0, 5, 6], [7, 8, 9], [0, 5, 6], [7, 8, 9], [1, 2, 3]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1]])
    found = DistinctPrompts.of(ids, mask)
    assert found is not None
    assert torch.equal(ids[found.first][found.of_row], ids)  # every row gets its own prompt back
    assert sorted(found.first.tolist()) == [0, 1, 4]  # the first row of each prompt
    assert DistinctPrompts.of(ids[[0, 1, 4]], mask[[0, 1, 4]]) is None
    # the same tokens under another padding mask are another prompt
    assert DistinctPrompts.of(ids[[0, 0]], torch.tensor([[0, 1, 1], [1, 1, 1]])) is None


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    from cory.config.loading import resolve

    config = resolve({"model": "tiny-random", "device": "cpu", "seed": 0, "method": "grpo", "threads": 1,
                      "output_dir": str(tmp_path_factory.mktemp("shared")), "task": {"name": "toy"},
                      "algorithm": {"group_size": 4}, "ppo": {"batch_size": 8, "mini_batch_size": 8},
                      "generation": {"max_new_tokens": 8, "temperature": 0.9}})
    (built,) = build_agents(config)
    return built


def grouped_prompts(agent):
    encoded = agent.prompts.encode(["a short one", "a much longer prompt than that"], agent.device)
    return encoded.ids.repeat_interleave(4, 0), encoded.mask.repeat_interleave(4, 0)  # left-padded groups of 4


def test_the_shared_prompt_pass_scores_as_the_one_pass_forward(agent):
    query_ids, query_mask = grouped_prompts(agent)
    responses = torch.randint(3, 60, (8, 6), generator=torch.Generator().manual_seed(1))
    response_mask = (torch.arange(6)[None] < torch.tensor([6, 3, 5, 1, 6, 2, 4, 6])[:, None]).long()
    mask = response_mask.bool()
    results = []
    for shared in (False, True):
        agent.policy.zero_grad()
        out = score_sequences(agent.policy.lm, query_ids, query_mask, responses, response_mask,
                              value_head=agent.policy.value_head, temperature=0.9, share_prompts=shared)
        ((out.logprobs * response_mask).sum() + (out.values * response_mask).sum()).backward()
        grads = torch.cat([p.grad.flatten() for p in agent.policy.parameters() if p.grad is not None])
        results.append((out.logprobs.detach(), out.values.detach(), grads))
    (one_lp, one_v, one_g), (shared_lp, shared_v, shared_g) = results
    assert torch.allclose(one_lp[mask], shared_lp[mask], atol=1e-5)
    assert torch.allclose(one_v[mask], shared_v[mask], atol=1e-5)
    assert ((one_g - shared_g).norm() / one_g.norm()).item() < 1e-5


def test_a_shared_prefill_samples_the_same_tokens_and_logprobs(agent):
    query_ids, query_mask = grouped_prompts(agent)
    how = sampling_settings(agent.settings.generation, greedy=False)
    drawn = [sample(agent.policy.lm, query_ids, query_mask, how, agent.stop_ids, agent.tokenizer.pad_token_id,
                    generator=generator("sample", 0, 3), value_head=agent.policy.value_head, share_prompts=shared)
             for shared in (False, True)]
    assert torch.equal(drawn[0].response_ids, drawn[1].response_ids)
    assert torch.allclose(drawn[0].logprobs, drawn[1].logprobs, atol=1e-5)
    assert torch.allclose(drawn[0].values, drawn[1].values, atol=1e-5)
    assert len({tuple(row) for row in drawn[1].response_ids[:4].tolist()}) > 1  # a group's samples differ


def test_a_grpo_step_with_shared_prompts_matches_one_without(make_config):
    results = []
    for shared in (False, True):
        config = make_config(method="grpo", algorithm__group_size=4, ppo__share_prompts=shared, ppo__batch_size=8,
                             ppo__mini_batch_size=4, ppo__ppo_epochs=2, generation__max_new_tokens=8)
        (built,) = build_agents(config)
        reply = built.generate(GenerateRequest([p for p in ("hello there", "the movie was") for _ in range(4)], step=0))
        stats = built.update([len(text) / 8.0 + text.count("a") for text in reply.texts], step=0)
        results.append((reply, stats, {n: p.detach().clone() for n, p in built.learner.trainable.items()}))
    (one_reply, one, one_params), (shared_reply, shared_stats, shared_params) = results
    assert one_reply.texts == shared_reply.texts
    assert one_reply.kl == pytest.approx(shared_reply.kl, abs=1e-5)
    for key in ("policy_loss", "approx_kl", "entropy", "kl", "ratio"):
        assert shared_stats[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key
    for name in one_params:
        assert torch.allclose(one_params[name], shared_params[name], atol=1e-5), name
