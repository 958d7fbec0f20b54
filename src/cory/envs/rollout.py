"""Episodes in environments, many stepping together: each turn every running episode's
agent acts once (one batched call), each environment answers, and an episode ends when its
environment says done or at ``max_turns``. An environment that raises or answers with the
wrong type fails its episode, with the reason; the others go on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cory.envs.base import Environment, Step, checked_step
from cory.types import Prompt


@dataclass
class Episode:
    """One episode's record: the first observation, then each turn's action and the step."""

    prompt: Prompt
    opening: str = ""
    actions: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    failed: str | None = None

    @property
    def done(self) -> bool:
        return self.failed is not None or bool(self.steps and self.steps[-1].done)

    @property
    def reward(self) -> float:
        """The episode's return: the sum of its turns' rewards (0 for a failed episode)."""
        return 0.0 if self.failed is not None else sum(step.reward for step in self.steps)

    def count(self, key: str) -> float:
        """The sum of an ``info`` count over the turns (``tool_calls``, ``invalid``)."""
        return sum(step.info.get(key, 0.0) for step in self.steps)


# act(episodes) -> one action per episode given: the agent's turn for each running episode.
Act = Callable[[list[Episode]], list[str]]


def run_episodes(make: Callable[[], Environment], prompts: list[Prompt], act: Act, max_turns: int) -> list[Episode]:
    """Play one episode per prompt, all stepping together."""
    environments = [make() for _ in prompts]
    episodes = [Episode(prompt) for prompt in prompts]
    for environment, episode in zip(environments, episodes):
        try:
            opening = environment.reset(episode.prompt)
            if not isinstance(opening, str):
                raise TypeError(f"{type(environment).__name__}.reset returned {opening!r}; return text")
            episode.opening = opening
        except Exception as error:  # a broken environment fails its own episode only
            episode.failed = f"reset: {type(error).__name__}: {error}"
    for _ in range(max_turns):
        running = [i for i, episode in enumerate(episodes) if not episode.done]
        if not running:
            break
        actions = act([episodes[i] for i in running])
        for i, action in zip(running, actions, strict=True):
            episode = episodes[i]
            episode.actions.append(action)
            try:
                episode.steps.append(checked_step(environments[i], action))
            except Exception as error:
                episode.failed = f"turn {len(episode.actions)}: {type(error).__name__}: {error}"
    return episodes
