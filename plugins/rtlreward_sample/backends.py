"""Where samples come from: any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, llama.cpp's server,
a hosted API) over httpx, or Tinker's sampling client.

Both answer `complete(messages, n)` with n `Reply`s. Failures come in two kinds, because they call for different
actions: `EndpointError` (wrong key, wrong URL or model, nothing listening) stops the whole run, since every
other request would fail the same way; `RequestFailed` (a prompt the server rejects, a reply that never came
within the time limit after every retry) costs only that (task, sample), which a rerun tries again.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

__all__ = [
    "RETRY_STATUSES",
    "EndpointError",
    "OpenAIChat",
    "Reply",
    "RequestFailed",
    "TinkerChat",
    "chat_url",
]

# Statuses worth waiting out: rate limits, overload, a proxy that lost the upstream, a request timeout.
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})


class EndpointError(RuntimeError):
    """The endpoint cannot serve this run at all; the message says what to change."""


class RequestFailed(RuntimeError):
    """One request failed for good (after its retries); other requests may still succeed."""


@attrs.frozen(slots=True)
class Reply:
    text: str
    finish_reason: str | None = None


def chat_url(base_url: str) -> str:
    """The chat-completions URL of a base URL given up to `/v1` (or already ending in /chat/completions)."""
    url = base_url.rstrip("/")
    return url if url.endswith("/chat/completions") else url + "/chat/completions"


def _detail(resp: Any) -> str:
    """The server's own error message (OpenAI's {"error": {"message"}}, FastAPI's {"detail"}), else its text."""
    try:
        data = resp.json()
    except ValueError:
        return " ".join(resp.text.split())[:300]
    if isinstance(data, dict):
        err = data.get("error", data.get("detail", data.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err:
            return " ".join(str(err).split())[:300]
    return " ".join(str(data).split())[:300]


def _retry_after(resp: Any, cap: float) -> float | None:
    """Seconds the server asked us to wait (Retry-After: seconds or an HTTP date), capped; None if it did not."""
    value = resp.headers.get("retry-after")
    if value is None:
        return None
    try:
        return min(cap, max(0.0, float(value)))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return min(cap, max(0.0, when.timestamp() - time.time()))


def _content(message: Any) -> str:
    """A chat message's text: a string, or OpenAI's list of content parts."""
    content = message.get("content") if isinstance(message, dict) else None
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


class OpenAIChat:
    """POST {base_url}/chat/completions, one request per sample (every server supports n=1; llama.cpp's does
    not support more, and one request per sample is what makes resume exact), with retries: 429 and 5xx wait
    for Retry-After when given, else an exponential backoff with jitter; a timeout or a dropped connection
    is retried the same way, except a connection refused before the server ever answered (nothing listens at
    the URL: EndpointError at once). `sleep` is injectable so tests need not wait."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 0.0,
        max_tokens: int = 4096,
        seed: int | None = None,
        extra_body: dict[str, Any] | None = None,
        timeout: float = 600.0,
        retries: int = 5,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        concurrency: int = 8,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.url = chat_url(base_url)
        self.model = model
        self.api_key = api_key
        self.api_key_env = api_key_env
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.seed = seed
        self.extra_body = dict(extra_body or {})
        self.timeout = timeout
        self.retries = max(0, retries)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.concurrency = concurrency
        self.sleep = sleep
        self.client: Any = None
        self.requests = 0
        self.retried = 0
        self.answered = False  # the server has sent a response (any status) this run

    async def __aenter__(self) -> OpenAIChat:
        import httpx

        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        self.client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(self.timeout),
            limits=httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency),
            trust_env=True,
        )
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self.client is not None:
            await self.client.aclose()
            self.client = None

    def body(self, messages: list[dict[str, str]], sample: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "n": 1,
        }
        if self.seed is not None:  # a distinct, reproducible seed per sample (servers that honour `seed`)
            body["seed"] = self.seed + sample
        body.update(self.extra_body)
        return body

    def _delay(self, attempt: int) -> float:
        return min(self.max_backoff, self.backoff * 2**attempt) * (0.5 + random.random() / 2)

    async def complete(self, messages: list[dict[str, str]], sample: int) -> Reply:
        import httpx

        body = self.body(messages, sample)
        last, unreachable = "", False
        for attempt in range(self.retries + 1):
            if attempt:
                self.retried += 1
            wait: float | None = None
            try:
                self.requests += 1
                resp = await self.client.post(self.url, json=body)
            except httpx.TimeoutException:
                last, unreachable = f"no reply within {self.timeout:g} s (--timeout)", False
            except httpx.ConnectError as exc:
                # Nothing listens there (refused, no such host) and it never answered this run: no retry can
                # fix that, so the run stops at once. Once it has answered, a refused connection is a restart.
                if not self.answered:
                    raise EndpointError(
                        f"cannot reach {self.url}: {exc or type(exc).__name__}; is the server running? check "
                        "--base-url (the server's URL up to /v1)"
                    ) from None
                last, unreachable = f"cannot reach {self.url}: {exc or type(exc).__name__}", True
            except httpx.TransportError as exc:
                last, unreachable = f"cannot reach {self.url}: {exc or type(exc).__name__}", True
            except httpx.HTTPError as exc:  # a reply that could not be read (bad encoding, redirect loop)
                last, unreachable = f"{type(exc).__name__}: {exc}", False
            else:
                unreachable = False
                self.answered = True
                if resp.status_code == 200:
                    return self._reply(resp)
                detail = _detail(resp)
                if resp.status_code in (401, 403):
                    hint = (
                        f"set ${self.api_key_env} to a key it accepts (or pick the variable with --api-key-env)"
                        if not self.api_key
                        else f"check the key in ${self.api_key_env}"
                    )
                    raise EndpointError(
                        f"{self.url} refused the request (HTTP {resp.status_code}: {detail}); {hint}"
                    )
                if resp.status_code in (404, 405):
                    raise EndpointError(
                        f"{self.url} answered HTTP {resp.status_code} ({detail}); check --base-url (the "
                        f"server's URL up to /v1) and --model (the name the server serves)"
                    )
                if resp.status_code not in RETRY_STATUSES:
                    raise RequestFailed(f"HTTP {resp.status_code}: {detail}")
                last = f"HTTP {resp.status_code}: {detail}"
                wait = _retry_after(resp, self.max_backoff)
            if attempt < self.retries:
                await self.sleep(self._delay(attempt) if wait is None else wait)
        tries = f"{self.retries + 1} attempt{'s' if self.retries else ''}"
        if unreachable:
            raise EndpointError(f"{last} (after {tries}); is the server running? check --base-url")
        raise RequestFailed(f"{last} (after {tries}; --retries)")

    @staticmethod
    def _reply(resp: Any) -> Reply:
        try:
            data = resp.json()
            choice = data["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            raise RequestFailed(
                f"the reply is not a chat completion (no choices[0]): {' '.join(resp.text.split())[:200]}"
            ) from None
        return Reply(text=_content(choice.get("message")), finish_reason=choice.get("finish_reason"))


class TinkerChat:
    """Tinker's sampling client over a base model (`Qwen/Qwen3-8B`) or saved sampler weights (`tinker://...`).
    The chat is rendered with tinker-cookbook's renderer for the model (the one training uses, so an evaluation
    samples exactly what an RL run would), and each sequence is parsed back into the reply's text. One request
    asks for all the samples a task still needs; the SDK retries transient failures itself."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        renderer_name: str | None = None,
        base_model: str | None = None,
        temperature: float = 0.0,
        max_tokens: int = 4096,
        seed: int | None = None,
    ) -> None:
        self.model = model
        self.base_url = base_url
        self.renderer_name = renderer_name
        self.base_model = base_model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.seed = seed
        self.client: Any = None
        self.renderer: Any = None
        self.requests = 0
        self.retried = 0

    async def __aenter__(self) -> TinkerChat:
        import tinker
        from tinker_cookbook import renderers
        from tinker_cookbook.tokenizer_utils import get_tokenizer

        service = tinker.ServiceClient(base_url=self.base_url) if self.base_url else tinker.ServiceClient()
        if self.model.startswith("tinker://"):
            self.client = await service.create_sampling_client_async(model_path=self.model)
            if not self.base_model:
                self.base_model = await self.client.get_base_model_async()
        else:
            self.client = await service.create_sampling_client_async(base_model=self.model)
            self.base_model = self.base_model or self.model
        self.renderer_name = self.renderer_name or recommended_renderer(self.base_model)
        self.renderer = renderers.get_renderer(
            self.renderer_name, get_tokenizer(self.base_model), model_name=self.base_model
        )
        return self

    async def __aexit__(self, *exc: Any) -> None:
        return None

    async def complete_many(self, messages: list[dict[str, str]], n: int, first_sample: int) -> list[Reply]:
        import tinker
        from tinker_cookbook.renderers import get_text_content

        prompt = self.renderer.build_generation_prompt(messages)
        params = tinker.SamplingParams(
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            stop=self.renderer.get_stop_sequences(),
            seed=None if self.seed is None else self.seed + first_sample,
        )
        self.requests += 1
        resp = await self.client.sample_async(prompt, num_samples=n, sampling_params=params)
        replies = []
        for seq in resp.sequences:
            message, _termination = self.renderer.parse_response(list(seq.tokens))
            replies.append(Reply(text=get_text_content(message), finish_reason=str(seq.stop_reason)))
        return replies


def recommended_renderer(model_name: str) -> str:
    """The cookbook's recommended renderer for a model; `role_colon` (plain `role: text` turns) for a model it
    does not know, as the tinker plugin does."""
    from tinker_cookbook import model_info

    try:
        return model_info.get_recommended_renderer_name(model_name)
    except Exception:  # ConfigurationError for an unknown model (its type moved between cookbook versions)
        return "role_colon"
