"""Bradley-Terry reward models and HH dialogue handling."""

import gzip
import json
from pathlib import Path

import pytest
import torch

from cory.config.schema import TaskConfig
from cory.errors import DataError
from cory.rewards.classifier import ClassifierReward
from cory.rewards.reward_model import bradley_terry_loss, train_reward_model
from cory.tasks.hh import build_hh, load_pairs, split_dialogue
from cory.types import Prompt


SHARED_HH = Path(__file__).resolve().parents[2] / "shared" / "data" / "hh-rlhf" / "harmless-base-test.jsonl.gz"


def test_bradley_terry_loss_hand_values():
    loss = bradley_terry_loss(torch.tensor([2.0, 0.0]), torch.tensor([0.0, 0.0]))
    expected = (-torch.nn.functional.logsigmoid(torch.tensor(2.0)) + torch.log(torch.tensor(2.0))) / 2
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_tiny_reward_model_learns_a_synthetic_preference(tmp_path):
    words = ["sun", "tree", "blue", "cat", "road", "milk", "song", "door"]
    pairs = [(f"say something about {w}: ", f"good {w}", f"bad {w}") for w in words * 12]
    report = train_reward_model(pairs, tmp_path / "rm", backbone="tiny-random", epochs=3,
                                learning_rate=2e-3, batch_size=16, max_length=64, log=lambda _: None)
    assert report["held_out_pairwise_accuracy"] >= 0.9
    reward = ClassifierReward(str(tmp_path / "rm"))
    good, bad = reward([Prompt("tell me: ")] * 2, ["good milk", "bad milk"])
    assert good > bad


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_reward_model_training_depends_on_its_seed_only(tmp_path):
    """Dropout draws from the seed, not from what the process drew before training."""
    pairs = [(f"about {w}: ", f"good {w}", f"bad {w}") for w in ["sun", "tree", "cat", "road"] * 6]

    def train(name, seed=0):
        train_reward_model(pairs, tmp_path / name, backbone="tiny-random", epochs=1, learning_rate=2e-3,
                           batch_size=8, max_length=32, seed=seed, log=lambda _: None)
        return _weights(tmp_path / name)

    first = train("a")
    torch.rand(1000)  # the process's random state moves on
    again, other_seed = train("b"), train("c", seed=1)
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not all(torch.equal(first[k], other_seed[k]) for k in first)


def test_reward_model_judges_the_answers_at_the_end_of_a_dialogue_longer_than_max_length(tmp_path):
    words = ["sun", "tree", "blue", "cat", "road", "milk", "song", "door"]
    history = "Human: hello there, how are you today?\n\nAssistant: fine, thanks for asking.\n\n"
    pairs = [(f"{history}Human: say something about {w}\n\nAssistant: ", f"good {w}", f"bad {w}")
             for w in words * 12]
    assert len(pairs[0][0]) > 2 * 48  # the character tokenizer: the answers lie past max_length
    report = train_reward_model(pairs, tmp_path / "rm", backbone="tiny-random", epochs=3,
                                learning_rate=2e-3, batch_size=16, max_length=48, log=lambda _: None)
    assert report["held_out_pairwise_accuracy"] >= 0.9
    reward = ClassifierReward(str(tmp_path / "rm"), max_length=48)
    query = f"{history}Human: say something about milk\n\nAssistant: "
    good, bad = reward([Prompt(query)] * 2, ["good milk", "bad milk"])
    assert good > bad


def test_split_dialogue_keeps_the_last_assistant_turn():
    text = "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: help?\n\nAssistant: sure, here"
    prompt, answer = split_dialogue(text, "x")
    assert prompt == "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: help?\n\nAssistant:"
    assert answer == " sure, here"
    with pytest.raises(DataError, match="no '\\\\n\\\\nAssistant:' turn"):
        split_dialogue("\n\nHuman: only a question", "file.jsonl, record 3")


def test_hh_task_from_a_generated_local_file(tmp_path):
    path = tmp_path / "pairs.jsonl.gz"
    with gzip.open(path, "wt") as handle:
        for i in range(30):
            prompt = f"\n\nHuman: question {i}?\n\nAssistant:"
            handle.write(json.dumps({"chosen": prompt + " a kind answer", "rejected": prompt + " rude"}) + "\n")
    pairs = load_pairs(str(path))
    assert pairs[0] == ("\n\nHuman: question 0?\n\nAssistant:", " a kind answer", " rude")
    task = build_hh(TaskConfig(name="hh", source=str(path), n_test=5))
    assert len(task.test) == 5 and len(task.train) == 25
    assert task.test[0].query.endswith("Assistant:")


@pytest.mark.skipif(not SHARED_HH.exists(), reason="shared HH-RLHF test split not on this machine")
def test_hh_task_on_the_shared_anthropic_file():
    task = build_hh(TaskConfig(name="hh", source=str(SHARED_HH), n_test=100))
    assert len(task.test) == 100 and len(task.train) > 1500
    assert all(p.query.endswith("\n\nAssistant:") for p in task.train[:50])


def test_hh_end_to_end_with_a_trained_reward_model(tmp_path):
    from cory.cli import main

    path = tmp_path / "pairs.jsonl"
    with open(path, "w") as handle:
        for i in range(40):
            prompt = f"\n\nHuman: tell me about item {i}\n\nAssistant:"
            handle.write(json.dumps({"chosen": prompt + " gladly, here it is", "rejected": prompt + " no"}) + "\n")
    assert main(["train-rm", "--data", str(path), "--out", str(tmp_path / "rm"), "--backbone", "tiny-random",
                 "--epochs", "2", "--learning-rate", "1e-3", "--batch-size", "8", "--max-length", "64"]) == 0
    assert main(["train", str(Path(__file__).parents[1] / "configs" / "hh" / "cory.yaml"), "model=tiny-random",
                 "steps=1", "device=cpu", "threads=1", f"task.source={path}", "task.n_test=4", "eval.n_prompts=4",
                 f"reward.model={tmp_path / 'rm'}", "ppo.batch_size=4", "ppo.mini_batch_size=4",
                 "generation.max_new_tokens=4", "log.tensorboard=false", f"output_dir={tmp_path / 'run'}"]) == 0
    from cory.logging import read_jsonl_rows

    rows = read_jsonl_rows(tmp_path / "run" / "metrics.jsonl")
    assert "observer/task_reward" in rows[0] and "eval/task_reward" in rows[-1]


def test_a_new_classifier_head_is_one_line_not_transformers_load_report(tmp_path, capfd):
    from transformers import BertConfig, BertModel

    from cory.errors import CoryError
    from cory.rewards.classifier import with_new_head

    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32)
    BertModel(config).save_pretrained(tmp_path / "backbone")
    said: list[str] = []
    model = with_new_head(tmp_path / "backbone", "a tiny BERT", said.append, num_labels=2)
    assert model.config.num_labels == 2
    assert said == ["classifier head: new by design (2 output(s) on a tiny BERT), trained now from its seed"]
    captured = capfd.readouterr()
    assert "LOAD REPORT" not in captured.err + captured.out and "MISSING" not in captured.err + captured.out
    # a backbone that lacks more than the head is refused
    (tmp_path / "backbone" / "model.safetensors").unlink()
    BertModel(BertConfig(**{**config.to_dict(), "num_hidden_layers": 0})).save_pretrained(tmp_path / "short")
    (tmp_path / "short" / "config.json").write_text((tmp_path / "backbone" / "config.json").read_text())
    with pytest.raises(CoryError, match=r"backbone a tiny BERT .* lacks \d+ weight\(s\) besides the new head"):
        with_new_head(tmp_path / "short", "a tiny BERT", said.append, num_labels=2)
