"""IMDB-style sentiment: continue the first tokens of a movie review, positively: between
``task.query_min_tokens`` and ``task.query_max_tokens`` of them (2-8 by default; the IMDB
configs use the CORY authors' 2-7).

Sources: ``task.source`` as a ``datasets`` id (e.g. ``stanfordnlp/imdb``) or a local
txt / CSV / JSONL file of reviews; by default, offline, the 10,605 movie-review snippets
that ship in the vaderSentiment sdist.
"""

from __future__ import annotations

import random

from transformers import PreTrainedTokenizerBase

from cory.config.schema import TaskConfig
from cory.errors import ConfigError
from cory.sources import is_local_file, load_hub_dataset, read_rated_snippets, read_texts
from cory.tasks.base import DEFAULT_REWARDS, Task, split_train_test
from cory.tasks.shown import answer_join_for
from cory.types import Prompt

OBSERVER_TEMPLATE = 'I can make this sentence "{query}{answers}" more positive: {query}'
REVISE_TEMPLATE = 'Earlier endings of "{query}":\n{answers}\nI can make this sentence more positive: {query}'


def _clean(text: str) -> str:
    return " ".join(text.replace("<br />", " ").split())


def review_prefixes(reviews: list[str], tokenizer: PreTrainedTokenizerBase, low: int, high: int,
                    seed: int = 0) -> list[Prompt]:
    """The first n tokens of each review, n drawn uniformly from [low, high] per review."""
    rng = random.Random(seed)
    encoded = tokenizer([_clean(r) for r in reviews], add_special_tokens=False)["input_ids"]
    prompts = []
    for ids in encoded:
        n = rng.randint(low, high)
        query = str(tokenizer.decode(ids[:n], skip_special_tokens=True))
        if query.strip():
            prompts.append(Prompt(query))
    return prompts


def longer_than(reviews: list[str], chars: int, split: str) -> list[str]:
    """The reviews of more than ``chars`` characters (the CORY authors' length filter)."""
    kept = [review for review in reviews if len(review) > chars]
    if not kept:
        raise ConfigError(f"task.min_review_chars: no {split} review is longer than {chars} "
                          "characters; lower it (the offline snippets are single sentences)")
    return kept


def build_imdb(config: TaskConfig, tokenizer: PreTrainedTokenizerBase) -> Task:
    low, high = config.query_min_tokens, config.query_max_tokens
    if config.source is None:
        reviews = [text for text, _ in read_rated_snippets()]
        train_reviews, test_reviews = split_train_test(reviews, config.n_test)
    elif is_local_file(config.source):
        reviews = read_texts(config.source)
        if config.test_source:
            train_reviews, test_reviews = reviews, read_texts(config.test_source)
        else:
            train_reviews, test_reviews = split_train_test(reviews, config.n_test)
    else:
        train_reviews = [row["text"] for row in load_hub_dataset(config.source, "train")]
        test_reviews = [row["text"] for row in load_hub_dataset(config.test_source or config.source, "test")]
        test_reviews = random.Random(0).sample(test_reviews, min(config.n_test, len(test_reviews)))
    train_reviews = longer_than(train_reviews, config.min_review_chars, "training")
    test_reviews = longer_than(test_reviews, config.min_review_chars, "test")
    return Task(
        name="imdb",
        train=review_prefixes(train_reviews, tokenizer, low, high, seed=1),
        test=review_prefixes(test_reviews, tokenizer, low, high, seed=2),
        default_reward=DEFAULT_REWARDS["imdb"],
        observer_template=config.observer_template or OBSERVER_TEMPLATE,
        revise_template=config.revise_template or REVISE_TEMPLATE,
        join=answer_join_for(config, "\n", verbatim=True, stop_strings=config.stop_strings or []),
    )
