"""``cory serve-reward``: any reward the library can build, over HTTP, with request batching.

``POST /get_reward`` takes OpenRLHF's remote reward format (``query`` = prompt + response,
``prompts``, optional ``labels`` = gold answers) and returns ``{"rewards": [...],
"scores": [...]}``; ``GET /health`` answers ``{"status": "ok"}``. Items of concurrent
requests are scored together, up to ``max_batch`` of them or after ``max_wait_ms``; a
request whose items make the reward fail fails alone. With a token (``--token-env``),
``/get_reward`` wants ``Authorization: Bearer <token>``. The server binds to 127.0.0.1
unless told otherwise; for HTTPS put it behind a reverse proxy (docs/serving.md).
"""

import asyncio
import hmac
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from cory.rewards.base import RewardFunction, score_safely
from cory.types import Prompt


@dataclass
class Limits:
    max_batch: int = 64
    max_wait_ms: float = 10.0
    max_request_items: int = 4096


def split_query(query: str, prompt: str) -> str:
    """The response inside OpenRLHF's ``query`` (prompt + response)."""
    return query[len(prompt):] if query.startswith(prompt) else query


class Batcher:
    """Collects (prompt, response) items from concurrent requests and scores them together."""

    def __init__(self, reward: RewardFunction, limits: Limits) -> None:
        self.reward, self.limits = reward, limits
        self.queue: asyncio.Queue = asyncio.Queue()

    async def score(self, prompts: list[Prompt], responses: list[str]) -> list[float]:
        future = asyncio.get_running_loop().create_future()
        await self.queue.put((prompts, responses, future))
        return await future

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            waiting = [await self.queue.get()]
            deadline = loop.time() + self.limits.max_wait_ms / 1000
            while sum(len(w[1]) for w in waiting) < self.limits.max_batch:
                try:
                    waiting.append(await asyncio.wait_for(self.queue.get(), max(0.0, deadline - loop.time())))
                except TimeoutError:
                    break
            prompts = [p for w in waiting for p in w[0]]
            responses = [r for w in waiting for r in w[1]]
            try:  # the reward runs in a thread: the server keeps accepting requests
                scores = await asyncio.to_thread(score_safely, self.reward, prompts, responses)
            except Exception:
                # One request's items broke the batch: score each request alone, so that only
                # that request fails and no client sees another's text.
                for request_prompts, request_responses, future in waiting:
                    await self._score_alone(request_prompts, request_responses, future)
                continue
            start = 0
            for _, batch_responses, future in waiting:
                future.set_result(scores[start:start + len(batch_responses)])
                start += len(batch_responses)

    async def _score_alone(self, prompts: list[Prompt], responses: list[str], future: asyncio.Future) -> None:
        try:
            future.set_result(await asyncio.to_thread(score_safely, self.reward, prompts, responses))
        except Exception as error:
            future.set_exception(error)


def create_app(reward: RewardFunction, limits: Limits, description: str = "", token: str | None = None) -> Any:
    """The FastAPI application serving ``reward``; with ``token``, ``/get_reward`` wants
    ``Authorization: Bearer <token>``."""
    from fastapi import FastAPI, HTTPException, Request  # optional: the [serve] extra
    from fastapi.responses import JSONResponse  # optional: the [serve] extra

    batcher = Batcher(reward, limits)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(batcher.run())
        yield
        task.cancel()

    app = FastAPI(title="cory reward server", description=description, lifespan=lifespan)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "reward": description, "max_batch": limits.max_batch}

    @app.post("/get_reward")
    async def get_reward(request: Request) -> JSONResponse:
        if token is not None and not authorised(request.headers.get("authorization", ""), token):
            raise HTTPException(401, "missing or wrong bearer token: send 'Authorization: Bearer <token>'",
                                headers={"WWW-Authenticate": "Bearer"})
        try:
            body = await request.json()
        except ValueError:
            raise HTTPException(400, "the body is not JSON; send {\"query\": [...], \"prompts\": [...]}") from None
        prompts, responses = parse_request(body, limits)
        try:
            scores = await batcher.score(prompts, responses)
        except Exception as error:
            raise HTTPException(500, f"the reward failed: {error}") from None
        bad = [i for i, score in enumerate(scores) if not math.isfinite(score)]
        if bad:
            raise HTTPException(500, f"the reward returned non-finite scores for item(s) {bad[:10]} of "
                                     f"this request ({len(bad)} in all)")
        return JSONResponse({"rewards": scores, "scores": scores})

    return app


def authorised(header: str, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (compared in constant time)."""
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def parse_request(body: Any, limits: Limits) -> tuple[list[Prompt], list[str]]:
    """Prompts and responses from OpenRLHF's format; HTTP errors name what is wrong."""
    from fastapi import HTTPException  # optional: the [serve] extra

    if not isinstance(body, dict) or not isinstance(body.get("query"), list):
        raise HTTPException(422, "expected {\"query\": [prompt + response, ...], \"prompts\": [...], "
                                 "\"labels\": [...]}")
    queries = body["query"]
    prompts = body.get("prompts") or [""] * len(queries)
    labels = body.get("labels") or [None] * len(queries)
    if len(queries) > limits.max_request_items:
        raise HTTPException(413, f"{len(queries)} items exceed this server's limit of "
                                 f"{limits.max_request_items} per request; split the request")
    if not (len(prompts) == len(labels) == len(queries)):
        raise HTTPException(422, f"query, prompts and labels must be as long: got {len(queries)}, "
                                 f"{len(prompts)} and {len(labels)}")
    if not all(isinstance(x, str) for x in [*queries, *prompts]):
        raise HTTPException(422, "query and prompts must hold strings")
    return ([Prompt(p, label or None) for p, label in zip(prompts, labels)],
            [split_query(q, p) for q, p in zip(queries, prompts)])


def serve(reward: RewardFunction, host: str, port: int, limits: Limits, description: str = "",
          token: str | None = None) -> None:
    """Run the server until interrupted."""
    import uvicorn  # optional: the [serve] extra

    uvicorn.run(create_app(reward, limits, description, token), host=host, port=port, log_level="warning")
