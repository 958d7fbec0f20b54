"""Transfer diagnostics: does a turn use the answers it is shown?

For every turn with inputs (a role with parents, or any role in a round after the first):

- ``transfer_gain``: its reward minus its agent's reward answering the plain query, on the
  same queries (needs those plain answers: evaluation's solo answers, or training's
  counterfactuals under difference credit where removing the one input leaves the plain query);
- ``copy_rate``: the share of its answers that mostly repeat an input's answer. Overlap is
  the share of the answer's distinct word bigrams (words split on white space, lower-cased;
  single words when it has fewer than two) that also occur in the input's answer; an answer
  with overlap of at least ``COPY_THRESHOLD`` (0.8) with any input is a copy, an empty
  answer never is;
- exact-answer tasks: ``uses_right`` = P(turn right | input right) and ``fixes_wrong`` =
  P(turn right | input wrong), over every (query, input) pair;
- and per round r > 0, for each role, ``flip_right_wrong`` = P(wrong in r | right in r - 1)
  and ``flip_wrong_right`` = P(right in r | wrong in r - 1).

A rate whose condition never occurred (no right input, say) is left out, not logged as 0.
"""

from __future__ import annotations

import torch

from cory.multi.topology import Topology

COPY_THRESHOLD = 0.8


def _grams(text: str) -> set[tuple[str, ...]]:
    words = text.lower().split()
    n = 2 if len(words) >= 2 else 1
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def overlap(answer: str, shown: str) -> float:
    """The share of ``answer``'s word bigrams that also occur in ``shown`` (0 for an empty answer)."""
    mine = _grams(answer)
    if not mine:
        return 0.0
    words = shown.lower().split()
    n = len(next(iter(mine)))
    theirs = {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}
    return len(mine & theirs) / len(mine)


def copy_rate(answers: list[str], shown: list[list[str]]) -> float:
    """The share of ``answers`` that copy any of their inputs' answers (``shown[k][i]`` is
    input k's answer to query i)."""
    copies = [any(overlap(answer, source[i]) >= COPY_THRESHOLD for source in shown)
              for i, answer in enumerate(answers)]
    return sum(copies) / len(copies)


class Rate:
    """A conditional rate counted over events: ``hits / cases``."""

    def __init__(self) -> None:
        self.hits = 0
        self.cases = 0

    def add(self, condition: list[bool], outcome: list[bool]) -> None:
        self.cases += sum(condition)
        self.hits += sum(c and o for c, o in zip(condition, outcome))

    def value(self) -> float | None:
        return self.hits / self.cases if self.cases else None


def _put(metrics: dict[str, float], key: str, rate: Rate) -> None:
    value = rate.value()
    if value is not None:
        metrics[key] = value


def transfer_metrics(topology: Topology, texts: list[list[str]], rewards: torch.Tensor,
                     correct: list[list[bool]] | None = None,
                     plain_rewards: dict[int, torch.Tensor] | None = None) -> dict[str, float]:
    """The diagnostics of one episode: ``texts[turn][query]`` and ``rewards[turn, query]``,
    ``correct[turn][query]`` on exact-answer tasks, and ``plain_rewards[turn]`` where the
    turn's agent also answered the plain query. Keys are ``{turn name}/{diagnostic}`` plus
    the headline ``{diagnostic}`` (the mean over turns; the rates pooled over their cases)."""
    names = topology.turn_names()
    metrics: dict[str, float] = {}
    copies, gains = [], []
    uses_right, fixes_wrong = Rate(), Rate()
    for turn in range(topology.n_turns):
        sources = topology.inputs(turn)
        if not sources:
            continue
        name = names[turn]
        metrics[f"{name}/copy_rate"] = copy_rate(texts[turn], [texts[s] for s in sources])
        copies.append(metrics[f"{name}/copy_rate"])
        if plain_rewards is not None and turn in plain_rewards:
            metrics[f"{name}/transfer_gain"] = (rewards[turn] - plain_rewards[turn]).mean().item()
            gains.append(metrics[f"{name}/transfer_gain"])
        if correct is not None:
            turn_uses, turn_fixes = Rate(), Rate()
            for source in sources:
                source_right = correct[source]
                for rate in (turn_uses, uses_right):
                    rate.add(source_right, correct[turn])
                for rate in (turn_fixes, fixes_wrong):
                    rate.add([not right for right in source_right], correct[turn])
            _put(metrics, f"{name}/uses_right", turn_uses)
            _put(metrics, f"{name}/fixes_wrong", turn_fixes)
    if copies:
        metrics["copy_rate"] = sum(copies) / len(copies)
    if gains:
        metrics["transfer_gain"] = sum(gains) / len(gains)
    _put(metrics, "uses_right", uses_right)
    _put(metrics, "fixes_wrong", fixes_wrong)
    if correct is not None:
        metrics.update(flip_rates(topology, correct))
    if topology.rounds > 1:  # a role's diagnostics are its last round's, as its other metrics
        for role, role_name in enumerate(topology.role_names()):
            last = names[topology.turn(topology.rounds - 1, role)]
            metrics.update({f"{role_name}/{key.removeprefix(last + '/')}": value
                            for key, value in list(metrics.items()) if key.startswith(last + "/")})
    return metrics


def flip_rates(topology: Topology, correct: list[list[bool]]) -> dict[str, float]:
    """Per round r > 0 and role, how often an answer turned from right to wrong and from
    wrong to right since the role's answer of round r - 1; and each round's pooled rates."""
    names = topology.turn_names()
    metrics: dict[str, float] = {}
    for round_ in range(1, topology.rounds):
        pooled_lost, pooled_fixed = Rate(), Rate()
        for role in range(topology.n_roles):
            before, after = correct[topology.turn(round_ - 1, role)], correct[topology.turn(round_, role)]
            lost, fixed = Rate(), Rate()
            for rate in (lost, pooled_lost):
                rate.add(before, [not right for right in after])
            for rate in (fixed, pooled_fixed):
                rate.add([not right for right in before], after)
            name = names[topology.turn(round_, role)]
            _put(metrics, f"{name}/flip_right_wrong", lost)
            _put(metrics, f"{name}/flip_wrong_right", fixed)
        _put(metrics, f"round{round_}/flip_right_wrong", pooled_lost)
        _put(metrics, f"round{round_}/flip_wrong_right", pooled_fixed)
    return metrics
