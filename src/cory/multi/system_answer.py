"""The system's answer to each query, from the last round's turns: the last role's (CORY's
observer), the highest value estimate (the MoE baseline, CORY rebuttal R1-2), or the
majority final answer (``vote``)."""

from __future__ import annotations

from collections import Counter

import torch

from cory.multi.episode import Episode
from cory.tasks.answers import extract_answer



def system_choice(episode: Episode, answer: str) -> torch.Tensor:
    """Per query, the turn whose answer is the system's (``topology.answer``: last, value, vote)."""
    last = [turn.index for turn in episode.layout.last_round()]
    if answer == "value":
        return last[0] + select_by_value(episode.values()[last])
    if answer == "vote":
        return torch.tensor([majority_turn([episode.replies[t].texts[i] for t in last], last)
                             for i in range(len(episode.queries))])
    return torch.full((len(episode.queries),), last[-1], dtype=torch.long)


def select_by_value(values: torch.Tensor) -> torch.Tensor:
    """For ``[n_agents, batch]`` value estimates, the winning agent of each query."""
    return values.argmax(0)


def gather_selected(per_turn: torch.Tensor, winners: torch.Tensor) -> torch.Tensor:
    """Pick ``per_turn[winner[b], b]`` for each query ``b``."""
    return per_turn[winners, torch.arange(per_turn.shape[1], device=per_turn.device)]


def majority_turn(texts: list[str], turns: list[int]) -> int:
    """The turn whose final answer is the most common among ``texts`` (one per turn). Ties go
    to the answer of the later turn; answers without a number do not vote; with no vote at
    all, the last turn."""
    answers = [extract_answer(text) for text in texts]
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return turns[-1]
    top = max(counts.values())
    for turn, found in reversed(list(zip(turns, answers))):
        if found is not None and counts[found] == top:
            return turn
    raise AssertionError("unreachable: a counted answer has a turn")
