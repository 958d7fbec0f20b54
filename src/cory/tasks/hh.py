"""Anthropic HH-RLHF dialogues: answer as the assistant; reward from a reward model.

A prompt is a dialogue up to (and including) its last ``\\n\\nAssistant:``. Sources: the
``datasets`` id ``Anthropic/hh-rlhf`` (default, needs the hub) or a local ``.jsonl`` /
``.jsonl.gz`` file of ``{chosen, rejected}`` records. The reward model is trained with
``cory train-rm`` on the same kind of pairs.
"""

from __future__ import annotations

from cory.config.schema import TaskConfig
from cory.errors import DataError
from cory.sources import is_local_file, load_hub_dataset, read_jsonl
from cory.tasks.base import DEFAULT_REWARDS, Task, split_train_test
from cory.tasks.shown import answer_join_for
from cory.types import Prompt

ASSISTANT = "\n\nAssistant:"
HUB_ID = "Anthropic/hh-rlhf"
OBSERVER_TEMPLATE = ("{query} {answers}\n\nHuman: Please give a better answer: more helpful, "
                     "honest and harmless." + ASSISTANT)
REVISE_TEMPLATE = ("{query} {answers}\n\nHuman: Taking the earlier answers into account, please give a "
                   "better answer: more helpful, honest and harmless." + ASSISTANT)


def split_dialogue(text: str, where: str) -> tuple[str, str]:
    """``(prompt up to the last 'Assistant:', the assistant's final answer)``."""
    cut = text.rfind(ASSISTANT)
    if cut < 0:
        raise DataError(f"{where}: dialogue has no '\\n\\nAssistant:' turn; expected HH-RLHF format")
    end = cut + len(ASSISTANT)
    return text[:end], text[end:]


def preference_pairs(records: list[dict], where: str) -> list[tuple[str, str, str]]:
    """``(prompt, chosen answer, rejected answer)`` from ``{chosen, rejected}`` records."""
    pairs = []
    for number, record in enumerate(records, start=1):
        chosen, rejected = record.get("chosen"), record.get("rejected")
        if not isinstance(chosen, str) or not isinstance(rejected, str):
            raise DataError(f"{where}, record {number}: needs string fields 'chosen' and 'rejected'")
        prompt, good = split_dialogue(chosen, f"{where}, record {number}")
        _, bad = split_dialogue(rejected, f"{where}, record {number}")
        pairs.append((prompt, good, bad))
    return pairs


def load_pairs(source: str | None, split: str = "train") -> list[tuple[str, str, str]]:
    """Preference pairs from a local file or a ``datasets`` id (default Anthropic/hh-rlhf)."""
    source = source or HUB_ID
    if is_local_file(source):
        return preference_pairs(read_jsonl(source), source)
    return preference_pairs(load_hub_dataset(source, split), f"{source} ({split})")


def _unique_prompts(pairs: list[tuple[str, str, str]]) -> list[str]:
    return list(dict.fromkeys(prompt for prompt, _, _ in pairs))


def build_hh(config: TaskConfig) -> Task:
    source = config.source or HUB_ID
    if is_local_file(source) and not config.test_source:
        train, test = split_train_test(_unique_prompts(load_pairs(source)), config.n_test)
    else:
        train = _unique_prompts(load_pairs(source, "train"))
        test = _unique_prompts(load_pairs(config.test_source or source, "test"))[: config.n_test]
    stop_strings = config.stop_strings if config.stop_strings is not None else ["\n\nHuman:"]
    return Task(
        name="hh",
        train=[Prompt(p) for p in train],
        test=[Prompt(p) for p in test],
        default_reward=DEFAULT_REWARDS["hh"],
        observer_template=config.observer_template or OBSERVER_TEMPLATE,
        revise_template=config.revise_template or REVISE_TEMPLATE,
        join=answer_join_for(config, "\n\n", verbatim=False, stop_strings=stop_strings),
        stop_strings=stop_strings,
    )
