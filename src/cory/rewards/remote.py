"""A reward served over HTTP (``reward.name: remote``, ``reward.url``).

Speaks OpenRLHF's remote reward format, so ``cory`` can use the reward servers people
already run and the other way round: it POSTs ``{"query": [prompt + response, ...],
"prompts": [prompt, ...], "labels": [gold answer or "", ...]}`` and reads ``{"rewards":
[...]}``. A server that cannot be reached after the retries, or that answers with the wrong
number of scores, non-finite scores or malformed JSON, raises ``RewardUnavailable``: the
trainer skips that iteration as a numeric fault (logged, counted, resumable), never scores
it as zero.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request

from cory.errors import NumericFault
from cory.types import Prompt


class RewardUnavailable(NumericFault):
    """No valid scores could be had from the reward server."""


def openrlhf_request(prompts: list[Prompt], responses: list[str]) -> dict[str, list[str]]:
    """The request body OpenRLHF's trainers send for these pairs."""
    return {"query": [p.query + r for p, r in zip(prompts, responses)],
            "prompts": [p.query for p in prompts],
            "labels": [p.answer or "" for p in prompts]}


class RemoteReward:
    """Scores by POSTing to ``url``; ``retries`` more attempts with exponential backoff."""

    def __init__(self, url: str, timeout: float = 30.0, retries: int = 3, backoff: float = 0.5) -> None:
        self.url, self.timeout, self.retries, self.backoff = url, timeout, retries, backoff

    def __call__(self, prompts: list[Prompt], responses: list[str]) -> list[float]:
        body = json.dumps(openrlhf_request(prompts, responses)).encode()
        problem = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                return self._scores(self._post(body), len(responses))
            except RewardUnavailable as error:  # a bad answer is not retried: it would repeat
                raise error
            except (urllib.error.URLError, OSError, TimeoutError) as error:
                problem = f"{type(error).__name__}: {getattr(error, 'reason', error)}"
        raise RewardUnavailable(f"reward server {self.url} did not answer after {self.retries + 1} "
                                f"attempt(s) ({problem}); is `cory serve-reward` running there?")

    def _post(self, body: bytes) -> bytes:
        request = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.read()
        except urllib.error.HTTPError as error:
            if error.code >= 500:
                raise  # the server may recover: retried
            detail = error.read().decode(errors="replace")[:300]
            raise RewardUnavailable(f"reward server {self.url} refused the request "
                                    f"(HTTP {error.code}): {detail}") from None

    def _scores(self, raw: bytes, expected: int) -> list[float]:
        try:
            scores = json.loads(raw)["rewards"]
            scores = [float(s) for s in scores]
        except (ValueError, KeyError, TypeError):
            raise RewardUnavailable(f"reward server {self.url} answered with malformed JSON (expected "
                                    f"{{\"rewards\": [numbers]}}): {raw[:200]!r}") from None
        if len(scores) != expected:
            raise RewardUnavailable(f"reward server {self.url} returned {len(scores)} scores for "
                                    f"{expected} responses")
        if not all(math.isfinite(s) for s in scores):
            raise RewardUnavailable(f"reward server {self.url} returned non-finite scores")
        return scores
