"""The types every layer speaks: a prompt, a request to answer prompts, an agent's reply.

They sit below tasks, rewards, agents and the trainer so that none of those needs to import
another to talk to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Prompt:
    """A query, the gold final answer where the task has one, and a worked reference
    solution where the task has that too."""

    query: str
    answer: str | None = None
    solution: str | None = None


@dataclass(frozen=True)
class GenerateRequest:
    """Ask an agent to answer ``prompts`` at iteration ``step``; with ``keep`` it holds the
    rollout for its next ``update``. ``phase`` separates the random draws of training and
    evaluation. ``budgets``, where given, is each prompt's token budget in place of the
    length sampler's draw. An agent answers once per ``round`` of an iteration: a kept rollout
    is that round's (round 0 starts a new iteration's set), and each call names a ``stream``
    so that no two calls reuse the same random draws."""

    prompts: list[str]
    step: int
    phase: str = "train"
    greedy: bool = False
    keep: bool = True
    budgets: list[int] | None = None
    round: int = 0
    stream: str = ""
    prompt_ids: list[list[int]] | None = None  # token in: the prompts as ids, used as they are

    def __post_init__(self) -> None:
        if (self.prompt_ids is None) == (not self.prompts):
            raise ValueError("a GenerateRequest holds prompts as text or as prompt_ids, one of the two")

    @property
    def rows(self) -> int:
        return len(self.prompt_ids) if self.prompt_ids is not None else len(self.prompts)

    @property
    def random_stream(self) -> str:
        """What the sampler's seeds are derived from: the phase, and the stream if named."""
        return f"{self.phase}/{self.stream}" if self.stream else self.phase


@dataclass
class Reply:
    """What an agent says back after answering a batch of prompts."""

    texts: list[str]
    values: list[float]  # value estimate at each response's last token
    kl: list[float]  # sum over response tokens of log p - log p_ref
    lengths: list[int]
    hit_length_limit: list[bool]
    prompts_truncated: int
    prompt_length: float = 0.0  # mean prompt tokens after truncation
    seconds: dict[str, float] = field(default_factory=dict)
    response_ids: list[list[int]] = field(default_factory=list)  # token out: each response's sampled ids


# An agent's update statistics: metric name -> value (a fault reason is a string).
Stats = dict[str, float | str]
