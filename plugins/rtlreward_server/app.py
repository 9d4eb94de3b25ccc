"""The HTTP face of `RewardService`: a Starlette app (run by uvicorn, see `run.py`).

Endpoints (JSON in, JSON out; docs/trainers/http-server.md):
- `GET  /health`        liveness and load, no token needed (probes)
- `GET  /tasks`         the loaded task ids
- `GET  /metrics`       Prometheus text exposition
- `POST /score`         one item -> the reward (the reward schema, `rtlreward.schema`, docs/schema.md)
- `POST /score_batch`   `{"items": [...]}` -> `{"rewards": [...]}`, a bad item's slot `{"error", "status"}`
- `POST /get_reward`    the OpenRLHF remote reward model contract (also at `/reward`):
                        `{"query", "prompts", "labels"}` -> `{"rewards", "scores", "extra_logs"}`

Why prometheus_client and not a hand-rolled exposition: the text format has escaping rules, histogram bucket
and `_sum`/`_count` conventions and content negotiation that the Prometheus project's own library gets right
and keeps current; it is small and pure Python. Each app has its own `CollectorRegistry`, so two servers in one
process (tests) never share a counter, and the service's counters are read at scrape time by a collector
instead of being mirrored.

Order of checks for a request: token (before the body is read, so an anonymous client cannot make the server
buffer 16 MiB), Content-Length (a value that is not a non-negative integer is refused; h11 already refuses a
negative one at the protocol level), the body read under a deadline (`client_timeout`, 408) and a size cap
(413, counted while streaming, so chunked bodies are capped too), the JSON's depth and size
(`jsonlimits`), then admission (`RewardService`: 429 + `Retry-After` when full).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import re
import time
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rtlreward.model import Reward

from .jsonlimits import MAX_BODY, BodyError, parse_body
from .server import MAX_BATCH, ItemError, RequestError, RewardService, answer

log = logging.getLogger("rtlreward.server.access")

DEFAULT_CLIENT_TIMEOUT = 30.0  # seconds for a client to send its request (headers, then body)
PARSE_IN_THREAD = 256 << 10  # bodies larger than this are parsed off the event loop
OPEN_PATHS = frozenset({"/health"})  # reachable without a token: liveness probes
ENDPOINTS = ("/health", "/tasks", "/metrics", "/score", "/score_batch", "/get_reward", "/reward")
# Beginning-of-sequence tokens a tokenizer may add in front of a decoded query, or a chat template in front of
# a prompt: the only difference between a query's start and its prompt that `reply_of` accepts.
BOS_TOKENS = (
    "<|begin_of_text|>",
    "<|startoftext|>",
    "<|endoftext|>",
    "<bos>",
    "<s>",
    "<\uff5cbegin\u2581of\u2581sentence\uff5c>",  # DeepSeek
)
# What opens the assistant's turn in common chat templates (`--reply-after NAME`; any other text is taken as is).
REPLY_MARKERS = {
    "chatml": "<|im_start|>assistant\n",  # Qwen, many others
    "llama3": "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "deepseek": "<\uff5cAssistant\uff5c>",
    "gemma": "<start_of_turn>model\n",
    "phi3": "<|assistant|>\n",
    "gpt-oss": "<|start|>assistant",
}
# Tokens that open a turn in those templates: a prompt holding one is a chat, and must end with a marker above.
TURN_OPENERS = (
    "<|im_start|>",
    "<|start_header_id|>",
    "<\uff5cUser\uff5c>",
    "<\uff5cAssistant\uff5c>",
    "<start_of_turn>",
    "<|user|>",
    "<|start|>",
)
# An empty thinking block some templates put after the assistant's opening (Qwen3 with thinking off).
EMPTY_THINK = re.compile(r"\s*<think>\s*</think>\s*$")
# Special tokens a chat template leaves at the end of a decoded OpenRLHF query.
END_TOKENS = (
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "<|end|>",
    "<|return|>",
    "</s>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>",  # DeepSeek
)


class JSONAnswer(JSONResponse):
    """JSON in ASCII (`\\uXXXX` escapes): any text a client sent may come back in an answer (an unknown task id,
    a diagnostic quoting the reply), and a lone surrogate in it cannot be encoded as UTF-8; escaped, every
    string JSON can hold can be answered."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


class _Disconnected(Exception):
    """The client went away while sending its body: there is nobody to answer."""


def _error(message: str, status: int, headers: dict[str, str] | None = None, close: bool = False) -> Response:
    headers = dict(headers or {})
    if close:  # the body may be unread: do not let the client keep the connection open to trickle it
        headers["Connection"] = "close"
    return JSONAnswer({"error": message}, status_code=status, headers=headers)


def client_of(scope: dict[str, Any]) -> tuple[str, str]:
    """The fairness key of a request (`FairPool`): its client's address, and the connection it came on."""
    host, port = (scope.get("client") or ("-", 0))[:2]
    return str(host), f"{host}:{port}"


class ReplyNotFound(RequestError):
    """The reply cannot be told from the prompt in an OpenRLHF query without guessing."""


def _skip_bos(text: str) -> str:
    while True:
        for token in BOS_TOKENS:
            if text.startswith(token):
                text = text[len(token) :]
                break
        else:
            return text


def _strip_end_tokens(reply: str) -> str:
    stripped = True
    while stripped:
        stripped = False
        reply = reply.rstrip()
        for token in END_TOKENS:
            if reply.endswith(token):
                reply = reply[: -len(token)]
                stripped = True
    return reply


def reply_of(query: str, prompt: str | None, reply_after: str | None = None) -> str:
    """The model's reply inside an OpenRLHF query (prompt + reply, decoded with special tokens), found exactly
    or not at all (`ReplyNotFound`).

    With a prompt: the query must begin with it, exactly (beginning-of-sequence tokens the tokenizer added in
    front of either are allowed); the reply is the rest. Guessing here is a reward hack: a query whose prompt
    shows a design (a refinement prompt, a spec with an example) scored whole, or scored after a prompt that
    differs by one space, pays the reply for the prompt's code. Without a prompt, `reply_after` (the chat
    template's opening of the assistant's turn, `--reply-after`) marks where the reply starts: the text after its
    last occurrence, which the prompt ends with, so every character scored is the model's own."""
    head = _skip_bos(prompt) if prompt is not None else ""
    if head:
        rest = _skip_bos(query)
        if not rest.startswith(head):
            at = next(
                (i for i, (a, b) in enumerate(zip(rest, head, strict=False)) if a != b),
                min(len(rest), len(head)),
            )
            raise ReplyNotFound(
                f"the query does not begin with its prompt (they differ at character {at}: the prompt has "
                f"{head[at : at + 20]!r}, the query {rest[at : at + 20]!r}); send 'prompts' exactly as the trainer "
                "decoded them, or leave them out and start the server with --reply-after"
            )
        if any(t in head for t in TURN_OPENERS) or (reply_after and reply_after.strip() in head):
            # a chat prompt ends where the assistant's turn opens; one that does not was cut short, and what was
            # cut (possibly a design the prompt shows) would be scored as the reply's
            end = EMPTY_THINK.sub("", head.rstrip())
            if not any(end.endswith(m.rstrip()) for m in (*REPLY_MARKERS.values(), reply_after or "\0")):
                raise ReplyNotFound(
                    "the prompt is a chat but does not end by opening the assistant's turn (e.g. "
                    f"{REPLY_MARKERS['chatml']!r}): it looks cut short, and the rest of it would be scored as the "
                    "reply; send the whole prompt, or leave prompts out and start the server with --reply-after"
                )
        return _strip_end_tokens(rest[len(head) :])
    # an empty prompt (or one of beginning-of-sequence tokens only) tells nothing: the whole query would be
    # scored, prompt included
    if reply_after:
        at = query.rfind(reply_after)
        if at < 0:
            raise ReplyNotFound(
                f"the query has no {reply_after!r} (the server's --reply-after) to mark where the reply begins"
            )
        return _strip_end_tokens(query[at + len(reply_after) :])
    raise ReplyNotFound(
        "'prompts' is missing or empty, so the reply cannot be told from the prompt (whose own code would be scored as "
        "the reply's): send 'prompts' (OpenRLHF does), or start the server with --reply-after naming the chat "
        f"template ({', '.join(REPLY_MARKERS)}) or the text that opens the assistant's turn"
    )


class _ServiceCollector:
    """Reads the service's counters at scrape time."""

    def __init__(self, service: RewardService) -> None:
        self.service = service

    def collect(self):
        s = self.service
        yield GaugeMetricFamily(
            "rtlreward_server_queue_depth", "Admitted items waiting for an engine worker", value=s.queue_depth
        )
        yield GaugeMetricFamily(
            "rtlreward_server_in_flight", "Items being evaluated by the engine now", value=s.in_flight
        )
        yield GaugeMetricFamily(
            "rtlreward_server_capacity", "Items the server holds at once (workers + queue)", value=s.capacity
        )
        st = s.stats
        with st.lock:
            evaluations, rewards, rejected, timed_out = st.evaluations, st.rewards, st.rejected, st.timed_out
            errors = dict(st.item_errors)
            stages = dict(st.stage_results)
            cached = dict(st.stage_cached)
        yield CounterMetricFamily(
            "rtlreward_server_evaluations", "Candidates evaluated by the engine", value=evaluations
        )
        yield CounterMetricFamily(
            "rtlreward_server_rewards", "Rewards returned (one per item, duplicates included)", value=rewards
        )
        yield CounterMetricFamily(
            "rtlreward_server_rejected", "Requests refused because the queue was full (429)", value=rejected
        )
        yield CounterMetricFamily(
            "rtlreward_server_timeouts", "Items that missed their request's time limit", value=timed_out
        )
        fam = CounterMetricFamily(
            "rtlreward_server_item_errors", "Items answered with an error", labels=["status"]
        )
        for status, n in sorted(errors.items()):
            fam.add_metric([status], n)
        yield fam
        fam = CounterMetricFamily(
            "rtlreward_stage_results",
            "Stage results of evaluated candidates by stage and status (pass rate: status=passed / all)",
            labels=["stage", "status"],
        )
        for (stage, status), n in sorted(stages.items()):
            fam.add_metric([stage, status], n)
        yield fam
        fam = CounterMetricFamily(
            "rtlreward_stage_cache_hits", "Stage results served from the cache", labels=["stage"]
        )
        for stage, n in sorted(cached.items()):
            fam.add_metric([stage], n)
        yield fam


class RewardApp:
    """The ASGI application: a guard (token, request log, metrics, last-resort 500) around Starlette routes."""

    def __init__(
        self,
        service: RewardService,
        *,
        token: str | None = None,
        max_body: int = MAX_BODY,
        client_timeout: float = DEFAULT_CLIENT_TIMEOUT,
        reply_after: str | None = None,
    ) -> None:
        self.service = service
        # a chat template's name, or the literal text that opens the assistant's turn (see `reply_of`)
        self.reply_after = REPLY_MARKERS.get(reply_after, reply_after) if reply_after else None
        self.token = token or None  # an empty token is no token
        self.max_body = max_body
        self.client_timeout = client_timeout
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_ServiceCollector(service))
        self.latency = Histogram(
            "rtlreward_server_request_duration_seconds",
            "Request latency by endpoint and status, from the request line to the last byte of the answer",
            ["endpoint", "status"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, math.inf),
            registry=self.registry,
        )
        routes = [
            Route("/health", self.health, methods=["GET"]),
            Route("/tasks", self.tasks, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/score", self.score, methods=["POST"]),
            Route("/score_batch", self.score_batch, methods=["POST"]),
            Route("/get_reward", self.get_reward, methods=["POST"]),
            Route("/reward", self.get_reward, methods=["POST"]),
        ]
        self.router = Starlette(
            routes=routes,
            exception_handlers={HTTPException: self._http_error, Exception: self._internal_error},
        )

    # -- the guard --------------------------------------------------------------------------------------------
    def _authorized(self, scope: dict[str, Any]) -> bool:
        if self.token is None or scope["path"] in OPEN_PATHS:
            return True
        expected = self.token.encode()
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, given = value.partition(b" ")
                if scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), expected):
                    return True
        # For clients that cannot set a header (OpenRLHF posts to a bare URL): ?token=... (kept out of the log).
        for given in parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", []):
            if hmac.compare_digest(given.encode(), expected):
                return True
        return False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.router(scope, receive, send)
            return
        start = time.monotonic()
        scope["rtlreward"] = info = {"items": 0}
        state = {"code": 0, "done": False}

        def finish() -> None:
            # Once per request, as soon as the last byte of the answer is handed to the transport (before any
            # later request on this loop is handled, so a client that reads /metrics next sees this one).
            if state["done"]:
                return
            state["done"] = True
            took = time.monotonic() - start
            path = scope.get("path", "")
            endpoint = path if path in ENDPOINTS else "other"
            code = state["code"] or 499  # 499: the client left before an answer
            self.latency.labels(endpoint, str(code)).observe(took)
            client = scope.get("client") or ("-", 0)
            log.info(
                "%s %s %s %d %.3fs items=%d", client[0], scope.get("method"), path, code, took, info["items"]
            )

        async def send_and_note(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                state["code"] = message["status"]
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                finish()

        try:
            if self._authorized(scope):
                await self.router(scope, receive, send_and_note)
            else:
                reply = _error(
                    "missing or wrong bearer token: send 'Authorization: Bearer <token>' (the server's --token "
                    "or RTLREWARD_SERVER_TOKEN)",
                    401,
                    {"WWW-Authenticate": 'Bearer realm="rtlreward"'},
                    close=True,
                )
                await reply(scope, receive, send_and_note)
        except Exception as exc:  # the server stays up and the client learns what broke
            log.exception("unexpected error on %s %s", scope.get("method"), scope.get("path"))
            if not state["code"]:
                await _error(f"internal error: {type(exc).__name__}: {exc}", 500)(
                    scope, receive, send_and_note
                )
        finally:
            finish()

    async def _internal_error(self, request: Request, exc: Exception) -> Response:
        # Starlette answers with this, then re-raises to the guard, which logs the traceback.
        return _error(f"internal error: {type(exc).__name__}: {exc}", 500)

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            msg = f"no such endpoint {request.url.path}; see GET /health, /tasks, /metrics, POST /score, /score_batch, /get_reward"
        elif exc.status_code == 405:
            msg = f"{request.method} is not allowed on {request.url.path}"
        else:
            msg = str(exc.detail)
        return _error(msg, exc.status_code, dict(exc.headers or {}))

    # -- bodies -----------------------------------------------------------------------------------------------
    async def _json(self, request: Request) -> Any:
        length = request.headers.get("content-length")
        if length is not None:
            if not (length.isascii() and length.isdigit()):
                raise BodyError(f"bad Content-Length {length!r}: a non-negative integer")
            if int(length) > self.max_body:
                raise BodyError(
                    f"request body over {self.max_body} bytes: split the batch into smaller requests", 413
                )
        body = bytearray()
        try:
            async with asyncio.timeout(self.client_timeout):
                async for chunk in request.stream():
                    body += chunk
                    if len(body) > self.max_body:
                        raise BodyError(
                            f"request body over {self.max_body} bytes: split the batch into smaller requests",
                            413,
                        )
        except TimeoutError:
            raise BodyError(
                f"request body not received within {self.client_timeout:g} s; send it at once", 408
            ) from None
        except ClientDisconnect:
            raise _Disconnected from None
        if len(body) > PARSE_IN_THREAD:
            return await asyncio.to_thread(parse_body, bytes(body), max_body=self.max_body)
        return parse_body(bytes(body), max_body=self.max_body)

    async def _handle(self, request: Request, fn: Any) -> Response:
        try:
            body = await self._json(request)
        except BodyError as exc:
            return _error(str(exc), exc.status, close=exc.status in (408, 413))
        except _Disconnected:
            return Response(status_code=499)  # nobody reads it; the log shows it
        try:
            return await fn(request, body)
        except RequestError as exc:
            return _error(str(exc), exc.status, exc.headers)

    # -- endpoints --------------------------------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        return JSONAnswer(self.service.health())

    async def tasks(self, request: Request) -> Response:
        return JSONAnswer({"tasks": [t.id for t in self.service.tasks]})

    async def metrics(self, request: Request) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    async def score(self, request: Request) -> Response:
        async def one(request: Request, body: Any) -> Response:
            pair = self.service.parse_item(body)
            request.scope["rtlreward"]["items"] = 1
            (outcome,) = await self.service.arun([pair], client_of(request.scope), request.is_disconnected)
            if isinstance(outcome, ItemError):
                return _error(outcome.message, outcome.status)
            return JSONAnswer(answer(outcome))

        return await self._handle(request, one)

    async def score_batch(self, request: Request) -> Response:
        async def batch(request: Request, body: Any) -> Response:
            pairs, where = self.service.split_batch(body)
            request.scope["rtlreward"]["items"] = len(where)
            outcomes = (
                await self.service.arun(pairs, client_of(request.scope), request.is_disconnected)
                if pairs
                else []
            )
            return JSONAnswer(self.service.merge_batch(where, outcomes))

        return await self._handle(request, batch)

    async def get_reward(self, request: Request) -> Response:
        return await self._handle(request, self._openrlhf)

    async def _openrlhf(self, request: Request, body: Any) -> Response:
        """OpenRLHF's remote reward model: `query` holds prompt + reply as the trainer decoded them, `prompts`
        the prompts (stripped from the queries), `labels` the task ids (`--label_key` of a dataset column that
        holds them). An error is the whole request's: OpenRLHF expects one number per query and retries a
        failed request, so a wrong label must be loud, not a silent zero."""
        if not isinstance(body, dict) or not isinstance(body.get("query"), list):
            raise RequestError('an OpenRLHF request is {"query": [...], "prompts": [...], "labels": [...]}')
        queries = body["query"]
        n = len(queries)
        if n > MAX_BATCH:
            raise RequestError(f"at most {MAX_BATCH} queries per request; split the request", 413)
        prompts = body.get("prompts")
        labels = body.get("labels")
        if prompts is None:
            prompts = [None] * n
        if not isinstance(labels, list):
            raise RequestError(
                "'labels' must list the task id of each query (OpenRLHF: --data.label_key, formerly --label_key, "
                "naming a dataset column with the task ids of the server's tasks)"
            )
        if not isinstance(prompts, list) or len(prompts) != n or len(labels) != n:
            raise RequestError(f"'query', 'prompts' and 'labels' must have the same length (query has {n})")
        request.scope["rtlreward"]["items"] = n
        pairs = []
        for i, (query, prompt, label) in enumerate(zip(queries, prompts, labels, strict=True)):
            if not isinstance(query, str) or not (prompt is None or isinstance(prompt, str)):
                raise RequestError(f"query {i}: 'query' and 'prompts' entries must be strings")
            task_id = label.get("task_id") if isinstance(label, dict) else label
            try:
                pairs.append(
                    self.service.parse_item(
                        {"task_id": task_id, "completion": reply_of(query, prompt, self.reply_after)}
                    )
                )
            except RequestError as exc:
                raise RequestError(f"query {i}: {exc}", exc.status) from None
        outcomes = await self.service.arun(pairs, client_of(request.scope), request.is_disconnected)
        failed = [(i, o) for i, o in enumerate(outcomes) if isinstance(o, ItemError)]
        if failed:
            i, err = failed[0]
            raise RequestError(
                f"{len(failed)} of {n} queries not scored; query {i}: {err.message}", err.status
            )
        rewards: list[Reward] = [o for o in outcomes if isinstance(o, Reward)]
        return JSONAnswer(
            {
                "rewards": [r.total for r in rewards],
                "scores": [_normalized(r) for r in rewards],
                "extra_logs": _extra_logs(rewards),
            }
        )


def _normalized(reward: Reward) -> float:
    value = reward.metrics.get("reward/normalized")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return reward.total / reward.max_total if reward.max_total else 0.0


def _extra_logs(rewards: list[Reward]) -> dict[str, list[float]]:
    """The numeric metrics every reward has, one list per key (OpenRLHF logs them per sample)."""
    if not rewards:
        return {}
    keys = [
        k
        for k, v in rewards[0].metrics.items()
        if isinstance(v, int | float) and all(isinstance(r.metrics.get(k), int | float) for r in rewards)
    ]
    return {k: [float(r.metrics[k]) for r in rewards] for k in keys}


def make_app(service: RewardService, **options: Any) -> RewardApp:
    """The ASGI app for `service` (options: token, max_body, client_timeout)."""
    return RewardApp(service, **options)
