"""Wall-clock time of the named stages of one iteration, as ``time/<stage>`` metrics."""

from __future__ import annotations

import contextlib
import time
from typing import Iterator


class StageTimer:
    """``with timer.stage("score"): ...`` adds the block's seconds to ``seconds["score"]``;
    ``elapsed()`` is the time since the timer was made."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        begun = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - begun

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def metrics(self) -> dict[str, float]:
        """Each stage's seconds as ``time/<stage>``."""
        return {f"time/{name}": seconds for name, seconds in self.seconds.items()}
