"""A stand-in OpenAI-compatible chat-completions server on 127.0.0.1 (the standard library's threaded HTTP
server, no model): it answers `POST /v1/chat/completions` with a reply chosen by a function of the chat, counts
every request, and can be told to fail (any status, with `Retry-After: 0` on 429/503 so tests never wait), to
demand an API key, or to hold requests until released (a slow model, a run killed mid-way).

It speaks the subset of the API that vLLM, SGLang and llama.cpp's server share: `model`, `messages`,
`temperature`, `max_tokens`, `n`, `seed`; the reply has `choices[0].message.content` and `finish_reason`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["StubOpenAI", "last_user"]


def last_user(messages: list[dict[str, Any]]) -> str:
    return next((str(m.get("content", "")) for m in reversed(messages) if m.get("role") == "user"), "")


class StubOpenAI:
    """`with StubOpenAI(reply) as stub: stub.base_url` -> http://127.0.0.1:PORT/v1."""

    def __init__(
        self,
        reply: Callable[[list[dict[str, Any]]], str],
        *,
        model: str | None = "stub-model",  # None: serve any model name
        api_key: str | None = None,
    ) -> None:
        self.reply = reply
        self.model = model
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []  # every request body, in arrival order
        self.failures: dict[str, list[int]] = {}  # substring of the user message -> statuses to answer first
        self.hold_after: int | None = None  # requests past this many wait for `release`
        self.release = threading.Event()
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control ---------------------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def count(self, needle: str = "") -> int:
        """Requests whose user message contains `needle` (all requests for "")."""
        with self.lock:
            return sum(needle in last_user(b.get("messages", [])) for b in self.requests)

    def start(self) -> StubOpenAI:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                return None

            def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(
                        200, {"object": "list", "data": [{"id": stub.model or "any", "object": "model"}]}
                    )
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                if stub.api_key is not None and self.headers.get("Authorization") != f"Bearer {stub.api_key}":
                    self._send(401, {"error": {"message": "Incorrect API key provided", "type": "auth"}})
                    return
                if stub.model is not None and body.get("model") != stub.model:
                    self._send(
                        404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}}
                    )
                    return
                user = last_user(body.get("messages", []))
                with stub.lock:
                    stub.requests.append(body)
                    held = stub.hold_after is not None and len(stub.requests) > stub.hold_after
                    status = 200
                    for needle, statuses in stub.failures.items():
                        if needle in user and statuses:
                            status = statuses.pop(0)
                            break
                if held:
                    stub.release.wait(120)
                if status != 200:
                    retry = {"Retry-After": "0"} if status in (429, 503) else {}
                    self._send(status, {"error": {"message": f"stub says {status}"}}, retry)
                    return
                text = stub.reply(body.get("messages", []))
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{len(stub.requests)}",
                        "object": "chat.completion",
                        "model": body.get("model"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": text},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    },
                )

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> StubOpenAI:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
