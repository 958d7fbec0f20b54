"""Sampling: EOS masks, budgets, reproducibility, and log-probs equal to a full forward."""

import pytest
import torch

from cory.models.generation import SamplingSettings, filter_logits, sample
from cory.models.policy import Policy, ValueHead, hidden_size_of
from cory.models.registry import load_model, stop_token_ids


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random")


def encode(loaded, texts):
    enc = loaded.tokenizer(texts, return_tensors="pt", padding=True)
    return enc.input_ids, enc.attention_mask


def run(loaded, settings, seed=0, stop=None, **kwargs):
    ids, mask = encode(loaded, ["hello there", "a", "movie was"])
    return sample(loaded.model, ids, mask, settings, stop if stop is not None else stop_token_ids(loaded),
                  loaded.tokenizer.pad_token_id, generator=torch.Generator().manual_seed(seed), **kwargs)


def test_mask_stops_after_eos_and_pads_the_rest(tiny):
    free = run(tiny, SamplingSettings(max_new_tokens=8, greedy=True), stop=[])
    stop_token = int(free.response_ids[0, 2])
    stopped = run(tiny, SamplingSettings(max_new_tokens=8, greedy=True), stop=[stop_token])
    row = stopped.response_mask[0].tolist()
    first = free.response_ids[0].tolist().index(stop_token)
    assert row == [1] * (first + 1) + [0] * (len(row) - first - 1)
    pads = stopped.response_ids[0, first + 1:]
    assert (pads == tiny.tokenizer.pad_token_id).all()
    assert not stopped.hit_length_limit[0]
    assert (stopped.logprobs[0, first + 1:] == 0).all()


def test_min_new_tokens_suppresses_eos(tiny):
    free = run(tiny, SamplingSettings(max_new_tokens=6, greedy=True), stop=[])
    stop_token = int(free.response_ids[0, 0])
    forced = run(tiny, SamplingSettings(max_new_tokens=6, min_new_tokens=3, greedy=True), stop=[stop_token])
    assert forced.response_mask[0, :3].tolist() == [1, 1, 1]


def test_same_seed_same_samples(tiny):
    settings = SamplingSettings(max_new_tokens=10)
    a, b, c = run(tiny, settings, seed=1), run(tiny, settings, seed=1), run(tiny, settings, seed=2)
    assert torch.equal(a.response_ids, b.response_ids)
    assert not torch.equal(a.response_ids, c.response_ids)


def test_per_row_budgets(tiny):
    budgets = torch.tensor([2, 5, 3])
    out = run(tiny, SamplingSettings(max_new_tokens=5), stop=[], max_new_per_row=budgets)
    assert out.response_mask.sum(-1).tolist() == [2, 5, 3]
    assert out.hit_length_limit.tolist() == [True, True, True]


def test_generation_logprobs_and_values_match_a_full_forward(tiny):
    head = ValueHead(hidden_size_of(tiny.model), torch.Generator().manual_seed(0))
    out = run(tiny, SamplingSettings(max_new_tokens=10, temperature=0.7), value_head=head)
    policy = Policy(tiny.model, head)
    with torch.no_grad():
        full = policy(out.query_ids, out.query_mask, out.response_ids, out.response_mask, temperature=0.7)
    mask = out.response_mask
    assert torch.allclose(full.logprobs * mask, out.logprobs, atol=1e-5)
    assert torch.allclose(full.values * mask, out.values, atol=1e-5)


def test_filter_logits_top_k_and_top_p():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    top2 = filter_logits(logits, SamplingSettings(top_k=2))
    assert torch.isinf(top2[0, 2:]).all() and torch.isfinite(top2[0, :2]).all()
    probs = torch.softmax(logits, -1)[0]  # ~0.644, 0.237, 0.087, 0.032
    nucleus = filter_logits(logits, SamplingSettings(top_p=0.8))
    kept = torch.isfinite(nucleus[0]).tolist()
    assert kept == [True, True, False, False]
    assert probs[0] < 0.8 <= probs[0] + probs[1]
    warm = filter_logits(logits, SamplingSettings(temperature=2.0))
    assert torch.allclose(warm, logits / 2)


def test_stop_strings_end_a_row_and_are_cut_from_the_text(tiny):
    from cory.models.generation import StopStrings

    free = run(tiny, SamplingSettings(max_new_tokens=8, greedy=True), stop=[])
    text = tiny.tokenizer.decode(free.response_ids[0])
    marker = text[2:4]  # two characters the greedy row writes at positions 2-3
    stops = StopStrings(tiny.tokenizer, [marker])
    stopped = run(tiny, SamplingSettings(max_new_tokens=8, greedy=True), stop=[], stop_strings=stops)
    written = tiny.tokenizer.decode(stopped.response_ids[0][stopped.response_mask[0].bool()])
    assert written.endswith(marker) and len(written) <= 4
    assert stops.cut(written) == written[: written.find(marker)]


@pytest.mark.parametrize("spec", ["tiny-random", "tiny-random-gpt2"])
def test_the_static_cache_decode_gives_the_dynamic_loops_tokens_and_logprobs(spec):
    from cory.models.generation import Decoder

    loaded = load_model(spec)
    head = ValueHead(hidden_size_of(loaded.model), torch.Generator().manual_seed(0))
    settings = SamplingSettings(max_new_tokens=12, temperature=0.8, repetition_penalty=1.3)
    budgets = torch.tensor([12, 3, 7])
    dynamic = run(loaded, settings, seed=4, value_head=head, max_new_per_row=budgets)
    static = run(loaded, settings, seed=4, value_head=head, max_new_per_row=budgets, decoder=Decoder(static=True))
    assert torch.equal(dynamic.response_ids, static.response_ids)
    assert torch.equal(dynamic.response_mask, static.response_mask)
    assert torch.allclose(dynamic.logprobs, static.logprobs, atol=1e-5)
    assert torch.allclose(dynamic.values, static.values, atol=1e-5)


def test_the_compiled_decode_step_gives_the_same_tokens_and_logprobs(tiny):
    from cory.models.generation import Decoder

    settings = SamplingSettings(max_new_tokens=8, temperature=0.9)
    dynamic = run(tiny, settings, seed=5)
    compiled = run(tiny, settings, seed=5, decoder=Decoder(compiled=True))
    assert torch.equal(dynamic.response_ids, compiled.response_ids)
    assert torch.allclose(dynamic.logprobs, compiled.logprobs, atol=1e-5)


def test_min_new_tokens_without_stop_tokens_samples_the_full_budget(tiny):
    out = run(tiny, SamplingSettings(max_new_tokens=5, min_new_tokens=5), stop=[])
    assert out.response_mask.sum(-1).tolist() == [5, 5, 5]


def test_a_request_answered_in_chunks_keeps_every_row_and_greedy_answers(make_config):
    from cory.agents.agent import Agent
    from cory.trainer import Trainer
    from cory.types import GenerateRequest

    prompts = ["ab", "a much longer prompt", "x", "yz", "hello", "q", "rs"]
    answers = {}
    for per_call in (0, 3):
        trainer = Trainer(make_config(generation__rows_per_call=per_call))
        agent: Agent = trainer.agents.agents[0]
        try:
            greedy = agent.generate(GenerateRequest(prompts, step=0, greedy=True, keep=False))
            sampled = agent.generate(GenerateRequest(prompts, step=0))
            assert len(sampled.texts) == len(sampled.kl) == len(sampled.hit_length_limit) == 7
            assert agent.held.rollouts[0].size == 7
            assert "fault" not in agent.update([1.0] * 7, step=0)
            answers[per_call] = greedy.texts
        finally:
            trainer.close()
    assert answers[0] == answers[3]
