"""Model specs -> (causal LM, tokenizer).

A spec is one of: a packaged name (``smollm2-135m``, ``gemma3-270m``), a tiny random model
(``tiny-random``, ``tiny-random-gpt2``), a local Hugging Face folder, or a hub id
(``org/name``, for users who can reach the hub).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from typing import Any, cast

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from cory.errors import CoryError
from cory.models.packaged import PACKAGED_MODELS, converted_folder
from cory.models.specs import TINY_SPECS, check_spec, describe_specs
from cory.models.tiny import bpe_tokenizer, build_tiny, char_tokenizer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def moved(model: PreTrainedModel, where: torch.device | torch.dtype) -> PreTrainedModel:
    """``model.to(where)`` (transformers' stubs type ``.to`` for some arguments only)."""
    return cast(PreTrainedModel, cast(Any, model).to(where))


def _folder_of(spec: str) -> str:
    """Where ``from_pretrained`` reads a non-tiny spec: the converted cache, a folder or a hub id."""
    return str(converted_folder(spec)) if spec in PACKAGED_MODELS else str(Path(spec).expanduser())


@dataclass
class LoadedModel:
    """A causal LM and its tokenizer, set up for left-padded batched generation."""

    spec: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase


def load_model(
    spec: str, dtype: str = "float32", trust_remote_code: bool = False, seed: int = 0
) -> LoadedModel:
    """Resolve ``spec`` to a model in eval mode (dropout off) and its tokenizer."""
    check_spec(spec)
    tokenizer: PreTrainedTokenizerBase
    if spec in TINY_SPECS:
        model, tokenizer = build_tiny(spec, seed=seed)
        model = moved(model, DTYPES[dtype])
    else:
        source = _folder_of(spec)
        try:
            tokenizer = cast(PreTrainedTokenizerBase,
                             AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code))
            model = AutoModelForCausalLM.from_pretrained(
                source, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code
            )
        except OSError as error:
            raise CoryError(
                f"could not load model '{spec}': {error}\n"
                "A hub id needs network access to huggingface.co; offline, use a packaged "
                f"model or a local folder. Valid specs: {describe_specs()}"
            ) from None
    prepare_tokenizer(tokenizer)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return LoadedModel(spec, model.eval(), tokenizer)


def load_tokenizer(spec: str, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    """Only the tokenizer of ``spec`` (cheap: no weights are read)."""
    check_spec(spec)
    tokenizer: PreTrainedTokenizerBase
    if spec in TINY_SPECS:
        tokenizer = char_tokenizer() if spec == "tiny-random" else bpe_tokenizer()
    else:
        try:
            tokenizer = cast(PreTrainedTokenizerBase,
                             AutoTokenizer.from_pretrained(_folder_of(spec), trust_remote_code=trust_remote_code))
        except OSError as error:
            raise CoryError(f"could not load the tokenizer of '{spec}': {error}") from None
    prepare_tokenizer(tokenizer)
    return tokenizer


def prepare_tokenizer(tokenizer: PreTrainedTokenizerBase) -> None:
    """Left padding for generation, and a pad token (the EOS token if there is none)."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token


def stop_token_ids(loaded: LoadedModel) -> list[int]:
    """Every token id that ends a response: the tokenizer's EOS and the model's."""
    ids = {loaded.tokenizer.eos_token_id}
    configured = loaded.model.generation_config.eos_token_id
    ids.update(configured if isinstance(configured, list) else [configured])
    return sorted(i for i in ids if i is not None)
