"""Tiny randomly initialised causal LMs with tokenizers built in code (no download).

``tiny-random`` is a Llama with a character-level vocabulary; ``tiny-random-gpt2`` is a GPT-2
with a small byte-level BPE vocabulary. Their vocabularies differ, so together they make a
heterogeneous pair for tests. ``tiny-random-h32`` is the Llama with two heads of size 32, the
smallest head size vLLM's CPU attention runs (engine tests).
"""

from __future__ import annotations

import string

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

from cory.models.specs import TINY_SPECS

SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>"]

_BPE_CORPUS = (
    "the movie was great and the acting was good . i loved this film , it is a fine story "
    "with a happy end . the plot was bad and boring ; i hated it . what is 3 plus 4 ? the "
    "answer is 7 . question : how many apples does she have ? answer : 12 apples . "
) * 8


def _fast_tokenizer(backend: Tokenizer) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        padding_side="left",
    )


def char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per printable ASCII character (plus newline and the special tokens)."""
    chars = sorted(set(string.printable) - set("\t\r\x0b\x0c"))
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + chars)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return _fast_tokenizer(backend)


def bpe_tokenizer(vocab_size: int = 320) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained, deterministically, on a small built-in corpus."""
    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator([_BPE_CORPUS], trainer=trainer)
    return _fast_tokenizer(backend)


def build_tiny(spec: str, seed: int = 0) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """Build one of ``TINY_SPECS`` with weights drawn from ``seed``."""
    tokenizer = bpe_tokenizer() if spec == "tiny-random-gpt2" else char_tokenizer()
    ids = {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "bos_token_id": tokenizer.bos_token_id,
    }
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if spec in ("tiny-random", "tiny-random-h32"):
            # tiny-random: 4 heads of 16, untied; tiny-random-h32: 2 heads of 32, tied.
            wide = spec == "tiny-random-h32"
            llama = LlamaConfig(
                hidden_size=64,
                intermediate_size=128,
                num_hidden_layers=2,
                num_attention_heads=2 if wide else 4,
                num_key_value_heads=1 if wide else 2,
                max_position_embeddings=512,
                tie_word_embeddings=wide,
                **ids,
            )
            model: PreTrainedModel = LlamaForCausalLM(llama)
        elif spec == "tiny-random-gpt2":
            gpt2 = GPT2Config(
                n_embd=48,
                n_layer=2,
                n_head=4,
                n_positions=512,
                resid_pdrop=0.0,
                embd_pdrop=0.0,
                attn_pdrop=0.0,
                **ids,
            )
            model = GPT2LMHeadModel(gpt2)
        else:
            raise ValueError(f"unknown tiny model {spec!r}; choose one of {TINY_SPECS}")
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model.eval(), tokenizer
