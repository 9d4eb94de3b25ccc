"""`AsyncRewardClient`: the reward server from asyncio code (a trainer's rollout loop), over httpx.

Why retries live here: a full server answers 429 with `Retry-After` instead of queueing without bound, so every
client must wait and resend, and getting that right once (honour the header, add jitter so refused clients do
not come back in lock-step, give up after a bound) is better than every trainer writing it. Retried are only
answers that mean "nothing was scored": 429 (queue full), 503 (shutting down) and a connection that could not
be opened. A request whose answer was lost after it was sent is NOT resent by default: it may have been scored,
and a resend would usually be a cheap cache hit but is not guaranteed to be one.

    async with AsyncRewardClient("http://127.0.0.1:8808") as rc:
        reward = await rc.score("fixed_priority_arbiter", reply)
        rewards = await rc.score_batch([{"task_id": ..., "completion": ...}, ...])
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import random
import time
from collections.abc import Sequence
from typing import Any

import httpx

RETRY_STATUSES = frozenset({429, 503})

__all__ = ["AsyncRewardClient", "RewardServerError"]


class RewardServerError(RuntimeError):
    """The server refused a request (4xx/5xx after any retries): `status` and the server's message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"reward server answered {status}: {message}")
        self.status = status
        self.message = message


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class AsyncRewardClient:
    """A client for one reward server. `token` defaults to $RTLREWARD_SERVER_TOKEN; `timeout` bounds one
    request (the server's own --request-timeout should be shorter); `max_retries` bounds the resends after
    429/503/connection refused, each waiting the server's Retry-After (at most `max_wait` s) or an exponential
    backoff from `backoff` s."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 600.0,
        max_retries: int = 10,
        backoff: float = 0.25,
        max_wait: float = 30.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        token = token if token is not None else os.environ.get("RTLREWARD_SERVER_TOKEN") or None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._own = client is None
        self._client = client or httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 30.0)),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
        )
        if not self._own and token:
            self._client.headers.update(headers)
        self.max_retries = max(0, int(max_retries))
        self.backoff = backoff
        self.max_wait = max_wait
        self.retries = 0  # resends so far (for tests and logs)

    async def __aenter__(self) -> AsyncRewardClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own:
            await self._client.aclose()

    async def _request(self, method: str, path: str, payload: Any = None) -> httpx.Response:
        attempt = 0
        while True:
            wait: float | None = None
            try:
                response = await self._client.request(method, path, json=payload)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout):
                # Nothing reached the server: safe to resend.
                if attempt >= self.max_retries:
                    raise
            else:
                if response.status_code not in RETRY_STATUSES or attempt >= self.max_retries:
                    return response
                wait = _retry_after(response.headers.get("Retry-After"))
            if wait is None:
                wait = self.backoff * 2**attempt
            wait = min(wait, self.max_wait) * (1 + 0.25 * random.random())
            attempt += 1
            self.retries += 1
            await asyncio.sleep(wait)

    async def _json(self, method: str, path: str, payload: Any = None) -> Any:
        response = await self._request(method, path, payload)
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 400:
            message = body.get("error") if isinstance(body, dict) else None
            raise RewardServerError(response.status_code, message or response.text[:500])
        return body

    async def score(
        self,
        task_id: str | None = None,
        completion: str | None = None,
        *,
        files: dict[str, str] | None = None,
        task: dict[str, Any] | None = None,
        sample: int = 0,
    ) -> dict[str, Any]:
        """One reply's reward (the reward schema, docs/schema.md): the task by id (or `task`, a task object, when
        the server allows inline tasks), the reply as text (`completion`) or as files."""
        item: dict[str, Any] = {"sample": sample}
        if task is not None:
            item["task"] = task
        else:
            item["task_id"] = task_id
        if completion is not None:
            item["completion"] = completion
        if files is not None:
            item["files"] = files
        return await self._json("POST", "/score", item)

    async def score_batch(self, items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Rewards in order; an item the server could not score has `{"error", "status"}` in its place."""
        return (await self._json("POST", "/score_batch", {"items": list(items)}))["rewards"]

    async def get_reward(
        self, queries: Sequence[str], prompts: Sequence[str], labels: Sequence[str]
    ) -> dict[str, Any]:
        """The OpenRLHF contract: `{"rewards", "scores", "extra_logs"}`."""
        payload = {"query": list(queries), "prompts": list(prompts), "labels": list(labels)}
        return await self._json("POST", "/get_reward", payload)

    async def health(self) -> dict[str, Any]:
        return await self._json("GET", "/health")

    async def tasks(self) -> list[str]:
        return (await self._json("GET", "/tasks"))["tasks"]

    async def metrics(self) -> str:
        response = await self._request("GET", "/metrics")
        if response.status_code >= 400:
            raise RewardServerError(response.status_code, response.text[:500])
        return response.text
