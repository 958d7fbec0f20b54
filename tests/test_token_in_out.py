"""Token in, token out: an agent answers prompts given as ids exactly as it answers their
text, returns the ids it sampled, and a conversation kept as ids reaches the model as those
ids (never decoded and encoded again)."""

from __future__ import annotations

import pytest

from cory.agents.factory import build_agents
from cory.types import GenerateRequest

PROMPTS = ["the movie was", "a much longer prompt than the first one", "ok"]


@pytest.fixture()
def agent(make_config):
    (built,) = build_agents(make_config(generation__max_new_tokens=6))
    return built


def test_prompts_as_ids_answer_as_the_same_prompts_as_text(agent):
    as_text = agent.generate(GenerateRequest(PROMPTS, step=3, keep=False))
    ids = agent.tokenizer([agent.prompts.format(p) for p in PROMPTS], add_special_tokens=True)["input_ids"]
    as_ids = agent.generate(GenerateRequest([], step=3, keep=False, prompt_ids=ids))
    assert as_ids.texts == as_text.texts and as_ids.response_ids == as_text.response_ids
    assert [len(r) for r in as_text.response_ids] == as_text.lengths
    for text, sampled in zip(as_text.texts, as_text.response_ids):  # the reply's text is its ids, decoded
        assert agent.tokenizer.decode(sampled, skip_special_tokens=True).startswith(text)


def test_a_conversation_kept_as_ids_reaches_the_model_as_those_ids(agent):
    first_ids = agent.tokenizer(PROMPTS[:1])["input_ids"][0]
    first = agent.generate(GenerateRequest([], step=0, prompt_ids=[first_ids]))
    observation = agent.tokenizer(" -> it was fine.\n", add_special_tokens=False)["input_ids"]
    conversation = first_ids + first.response_ids[0] + observation
    agent.generate(GenerateRequest([], step=0, round=1, stream="turn1", prompt_ids=[conversation]))
    kept = agent.held.rollouts[1]
    assert kept.query_ids[0][kept.query_mask[0].bool()].tolist() == conversation


def test_a_request_holds_text_or_ids():
    with pytest.raises(ValueError, match="one of the two"):
        GenerateRequest(["text"], step=0, prompt_ids=[[1, 2]])
    with pytest.raises(ValueError, match="one of the two"):
        GenerateRequest([], step=0)
    assert GenerateRequest([], step=0, prompt_ids=[[1], [2, 3]]).rows == 2
