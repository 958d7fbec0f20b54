"""A reward served over HTTP (``reward.name: remote``, ``reward.url`` or ``reward.urls``).

Speaks OpenRLHF's remote reward format, so ``cory`` can use the reward servers people
already run and the other way round: it POSTs ``{"query": [prompt + response, ...],
"prompts": [prompt, ...], "labels": [gold answer or "", ...]}`` and reads ``{"rewards":
[...]}``. With several URLs (one server per reward, as OpenRLHF's several
``--remote_rm_url``) each response's scores are summed.

What can go wrong, and what happens:
- nothing answers at start: ``check_reachable`` stops the run before it trains;
- the server goes away (connection refused, timeout, HTTP 5xx): retried with backoff for
  ``reward.retry_window`` seconds (long enough for a restart) and at least ``reward.retries``
  times, then ``RewardUnavailable``:
  the trainer stops with a checkpoint *before* that iteration, which a resume runs again;
- the server refuses the request (HTTP 4xx, e.g. a missing token): ``RewardRefused``, at
  once, since a retry would be refused again;
- a wrong number of scores, non-finite scores or malformed JSON: ``BadRewardAnswer``, a
  numeric fault (the iteration's update is skipped and counted), never scored as zero.
A password in the URL (``user:pass@host``) never reaches a message, a log or a tracker.
"""

from __future__ import annotations

import base64
import json
import math
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from cory.errors import CoryError, NumericFault
from cory.redaction import lacks_password, redact
from cory.types import Prompt

MAX_BACKOFF = 10.0  # seconds between attempts, at most


class RewardUnavailable(CoryError):
    """No scores could be had from a reward server within the retry window."""


class RewardRefused(CoryError):
    """A reward server refused the request (HTTP 4xx): retrying would not help."""


class BadRewardAnswer(NumericFault):
    """A reward server answered, but not with one finite score per response."""


def health_url(url: str) -> str:
    """The server's ``/health`` beside the reward endpoint ``url``."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path="/health", query="", fragment=""))


def openrlhf_request(prompts: list[Prompt], responses: list[str]) -> dict[str, list[str]]:
    """The request body OpenRLHF's trainers send for these pairs."""
    return {"query": [p.query + r for p, r in zip(prompts, responses)],
            "prompts": [p.query for p in prompts],
            "labels": [p.answer or "" for p in prompts]}


def _opener(url: str) -> tuple[str, dict[str, str]]:
    """The URL without credentials and the headers that carry them (basic auth)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return url, {}
    host = parts.hostname or ""
    bare = urllib.parse.urlunsplit(parts._replace(netloc=host + (f":{parts.port}" if parts.port else "")))
    secret = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
    return bare, {"Authorization": "Basic " + base64.b64encode(secret.encode()).decode()}


class RemoteReward:
    """Scores by POSTing to each of ``urls`` and summing; see the module for its failures.
    ``token`` (when given) is sent as ``Authorization: Bearer <token>``; a ``user:password@``
    in a URL as basic authentication (one or the other: both need the one header). ``log``
    hears about a server that does not answer, at once and then at growing intervals;
    ``outages`` keeps each finished wait (seconds, attempts, outcome) for the run's events."""

    def __init__(self, urls: list[str], timeout: float = 30.0, retry_window: float = 300.0,
                 token: str | None = None, backoff: float = 0.5, retries: int = 0,
                 log: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True)) -> None:
        if not urls or not all(urls):
            raise CoryError("reward.url: the remote reward needs the server's URL, e.g. "
                            "reward.url=http://127.0.0.1:8000/get_reward")
        for url in urls:
            if lacks_password(url):
                raise CoryError(f"reward.url: {url} was stored without its password (run folders never keep "
                                "one); give the URL again, e.g. `cory eval RUN reward.url=http://user:PASSWORD@...`")
        if token and any(urllib.parse.urlsplit(url).username for url in urls):
            raise CoryError("reward.url carries a user:password and reward.token_env names a set token: both "
                            "go in the one Authorization header, so the server would see only one. Use the "
                            "token alone (drop user:password from the URL), or the proxy's basic auth alone "
                            "(unset the token variable; docs/serving.md)")
        self.urls, self.timeout, self.retry_window, self.backoff = list(urls), timeout, retry_window, backoff
        self.retries = retries
        self.token = token
        self.log = log
        self.outages: list[dict[str, float | int | str]] = []
        self.source = ", ".join(redact(u) for u in self.urls)

    def check_reachable(self) -> None:
        """Stop before training if nothing answers at a URL (any HTTP answer will do)."""
        for url in self.urls:
            address, headers = _opener(health_url(url))
            try:
                with urllib.request.urlopen(urllib.request.Request(address, headers=headers),
                                            timeout=min(self.timeout, 10.0)):
                    pass
            except urllib.error.HTTPError:
                continue  # it answered (a server without /health, say)
            except (urllib.error.URLError, OSError) as error:
                raise CoryError(f"reward.url: nothing answers at {redact(url)} "
                                f"({getattr(error, 'reason', error)}); start the server first "
                                "(`cory serve-reward ...`) or fix the URL") from None

    def __call__(self, prompts: list[Prompt], responses: list[str]) -> list[float]:
        body = json.dumps(openrlhf_request(prompts, responses)).encode()
        totals = [0.0] * len(responses)
        for url in self.urls:
            for i, score in enumerate(self._scores_from(url, body, len(responses))):
                totals[i] += score
        return totals

    def _scores_from(self, url: str, body: bytes, expected: int) -> list[float]:
        started, attempt, problem, next_report = time.monotonic(), 0, "", 0.0
        while True:
            try:
                scores = self._scores(url, self._post(url, body), expected)
            except (urllib.error.URLError, OSError) as error:  # HTTP 5xx included
                problem = f"{type(error).__name__}: {getattr(error, 'reason', error)}"
            else:
                if attempt:
                    self._waited(url, time.monotonic() - started, attempt + 1, "answered")
                return scores
            waited = time.monotonic() - started
            pause = min(MAX_BACKOFF, self.backoff * 2 ** attempt)
            if attempt >= self.retries and waited + pause > self.retry_window:
                self._waited(url, waited, attempt + 1, "gave up")
                raise RewardUnavailable(
                    f"reward server {redact(url)} did not answer for {waited:.0f} s ({attempt + 1} "
                    f"attempt(s), last: {problem}; reward.retry_window is {self.retry_window:g} s)")
            if waited >= next_report:  # at once, then after 10 s, 20 s, 40 s, ...
                left = max(0.0, self.retry_window - waited)
                self.log(f"reward server {redact(url)} does not answer ({problem}); "
                         + (f"retrying for up to {left:.0f} s more (reward.retry_window {self.retry_window:g} s)"
                            if attempt == 0 else f"still retrying after {waited:.0f} s, attempt {attempt + 1}, "
                                                 f"{left:.0f} s left"))
                next_report = max(10.0, 2 * next_report)
            time.sleep(pause)
            attempt += 1

    def _waited(self, url: str, seconds: float, attempts: int, outcome: str) -> None:
        """Note a finished wait on ``url``: a console line, and a row for the run's events."""
        self.outages.append({"url": redact(url), "seconds": round(seconds, 1), "attempts": attempts,
                             "outcome": outcome})
        if outcome == "answered":
            self.log(f"reward server {redact(url)} answers again after {seconds:.0f} s ({attempts} attempts)")

    def _post(self, url: str, body: bytes) -> bytes:
        address, headers = _opener(url)
        headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(address, data=body, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.read()
        except urllib.error.HTTPError as error:
            if error.code >= 500:
                raise  # the server may recover: retried
            detail = error.read().decode(errors="replace")[:300]
            hint = " (set the token: reward.token_env names the variable that holds it)" if error.code == 401 else ""
            raise RewardRefused(f"reward server {redact(url)} refused the request "
                                f"(HTTP {error.code}): {detail}{hint}") from None

    def _scores(self, url: str, raw: bytes, expected: int) -> list[float]:
        try:
            scores = [float(s) for s in json.loads(raw)["rewards"]]
        except (ValueError, KeyError, TypeError):
            raise BadRewardAnswer(f"reward server {redact(url)} answered with malformed JSON (expected "
                                  f"{{\"rewards\": [numbers]}}): {raw[:200]!r}") from None
        if len(scores) != expected:
            raise BadRewardAnswer(f"reward server {redact(url)} returned {len(scores)} scores for "
                                  f"{expected} responses")
        if not all(math.isfinite(s) for s in scores):
            raise BadRewardAnswer(f"reward server {redact(url)} returned non-finite scores")
        return scores


def token_from(variable: str | None) -> str | None:
    """The bearer token held by environment variable ``variable`` (None when unset)."""
    return os.environ.get(variable) or None if variable else None
