"""Running the app: uvicorn with a deep listen backlog, a deadline for request headers, and the bind rules.

Why Starlette on uvicorn (the `server` extra): both are maintained by the Encode team (with httpx, the client
here), are the most used ASGI pair in Python, and are what OpenRLHF's own reward server runs on. Starlette is
the toolkit FastAPI is built on, without FastAPI's request-model layer: this server must read the raw body
itself (size cap while streaming, nesting depth checked before any parser runs), which a framework that parses
JSON for its handlers would do first. uvicorn serves every connection from one event loop, so a slow or idle
client costs a socket, not a thread (the old server's 300 slow clients held all of its threads); the engine's
threads are a separate, bounded pool (`RewardService`). Its pure-Python h11 parser refuses a malformed or
negative Content-Length at the protocol level.

What uvicorn does not do, added here:
- a deadline for the request line and headers: uvicorn's keep-alive timer runs only between requests, so a
  client that connects and trickles its headers would hold its connection forever. `_GuardedH11` closes a
  connection that has not sent a complete request head `client_timeout` seconds after it started waiting for
  one; the body has its own deadline in the app (408). Between requests uvicorn's keep-alive timer closes an
  idle connection (`timeout_keep_alive`).
- a cap on connections per client address (`max_connections`): 300 connections from one address that each send
  half a request would otherwise hold 300 sockets until their deadlines; beyond the cap a connection is answered
  503 (JSON) and closed at once, so one address cannot crowd out the others, and GET /health from elsewhere is
  answered throughout.
- binding the socket ourselves, so the listen backlog is ours (2048, not 5: 160 of 200 simultaneous clients
  got connection resets with the old server) and the real port of `--port 0` is known before serving.
- refusing to listen beyond loopback without a bearer token: the server runs hostile code on request.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
import time
from collections import Counter
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from .app import DEFAULT_CLIENT_TIMEOUT, RewardApp
from .server import RewardService

BACKLOG = 2048
MIN_TOKEN_LENGTH = 16
DEFAULT_MAX_CONNECTIONS = 256  # per client address


class BindError(ValueError):
    """The server may not listen as asked; the message says what to do."""


class _GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request head (request line + headers)."""

    header_timeout: float = DEFAULT_CLIENT_TIMEOUT
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    open_connections: Counter[str]  # per address; each server's protocol class has its own (make_server)

    def connection_made(self, transport: Any) -> None:
        self._head_timer: Any = None
        peer = transport.get_extra_info("peername")
        self._peer = str(peer[0]) if isinstance(peer, tuple) and peer else "-"
        self.open_connections[self._peer] += 1
        self._refused = False
        super().connection_made(transport)
        if self.max_connections and self.open_connections[self._peer] > self.max_connections:
            self._refuse(
                503,
                f"too many connections from your address (at most {self.max_connections} at once, the "
                "server's --max-connections): reuse connections or close idle ones",
            )
            return
        self._watch()

    def _refuse(self, status: int, message: str) -> None:
        """Answer `status` with a JSON error and close without a reset: the client's request, sent or still
        coming, is read and dropped until it half-closes or a second passes (closing with unread data in the
        socket would make the kernel answer with a reset, and the client would never see the answer)."""
        self._refused = True
        body = json.dumps({"error": message}).encode("ascii")
        reason = b"Service Unavailable" if status == 503 else b"Bad Request"
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"retry-after: 1\r\ncontent-length: %d\r\n\r\n%s" % (status, reason, len(body), body)
        )
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(1.0, self.transport.close)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)

    def eof_received(self) -> bool | None:
        if self._refused:
            self.transport.close()
            return None
        return super().eof_received()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request h11 cannot parse (a bad chunk, two Content-Lengths, a bad header), as
        JSON like every other answer. A request whose head was read already has the app running: it is marked
        gone, so the app's own answer is dropped instead of raising inside h11 (a traceback in the log per
        malformed request, reachable without a token)."""
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            self._refuse(400, f"malformed HTTP request: {msg}")
        else:  # our answer had begun: nothing valid can follow it
            self.transport.close()

    def handle_events(self) -> None:
        super().handle_events()
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.open_connections[self._peer] -= 1
        if self.open_connections[self._peer] <= 0:
            del self.open_connections[self._peer]
        super().connection_lost(exc)

    def _watch(self) -> None:
        # IDLE on the client's side: we are waiting for (the rest of) a request head. The timer is armed once
        # per wait and not reset by data, so trickling a byte at a time does not extend it.
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(self.header_timeout, self._too_slow)
        else:
            self._disarm()

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _too_slow(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def is_loopback(host: str) -> bool:
    """True when every address `host` resolves to is a loopback address (127.0.0.0/8, ::1)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    try:
        return bool(infos) and all(
            ipaddress.ip_address(str(i[4][0]).split("%")[0]).is_loopback for i in infos
        )
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """BindError unless this is a safe way to listen: beyond loopback a token is required, and a token given
    must be long enough not to be guessed (an empty token is no token)."""
    if token and len(token) < MIN_TOKEN_LENGTH:
        raise BindError(
            f"the token is {len(token)} characters; use at least {MIN_TOKEN_LENGTH}, e.g. "
            "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
        )
    if not token and not is_loopback(host):
        raise BindError(
            f"refusing to listen on {host!r} without a token: the server runs the code it is sent, so anyone who "
            "can reach it could use the machine. Set RTLREWARD_SERVER_TOKEN (or --token) to a secret and send "
            "'Authorization: Bearer <token>', or listen on 127.0.0.1 and tunnel to it"
        )


def bind(host: str, port: int, backlog: int = BACKLOG) -> socket.socket:
    """A listening socket on (host, port); port 0 picks a free one (`sock.getsockname()`)."""
    family, kind, proto, _, addr = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


def make_server(
    service: RewardService,
    *,
    token: str | None = None,
    client_timeout: float = DEFAULT_CLIENT_TIMEOUT,
    backlog: int = BACKLOG,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    **app_options: Any,
) -> uvicorn.Server:
    """A uvicorn server for `service` (not started; `server.run(sockets=[bind(...)])`). `max_connections`:
    connections one client address may hold open (0: no cap)."""
    app = RewardApp(service, token=token, client_timeout=client_timeout, **app_options)
    protocol = type(
        "GuardedH11",
        (_GuardedH11,),
        {"header_timeout": client_timeout, "max_connections": max_connections, "open_connections": Counter()},
    )
    config = uvicorn.Config(
        app,
        http=protocol,
        ws="none",
        lifespan="off",
        backlog=backlog,
        access_log=False,  # our own request log has the item count (rtlreward.server.access)
        log_config=None,  # leave the caller's logging alone
        timeout_keep_alive=5,
        timeout_graceful_shutdown=10,
        server_header=False,
        # The client's address is the socket's peer: with proxy headers on (uvicorn's default, trusting
        # loopback), any local client could name itself in X-Forwarded-For and so escape its address's queue
        # limit and turns, and forge the access log.
        proxy_headers=False,
    )
    return uvicorn.Server(config)


class RunningServer:
    """A server running in a background thread (tests, notebooks, benches)."""

    def __init__(self, server: uvicorn.Server, sock: socket.socket, thread: threading.Thread) -> None:
        self.server = server
        self.sock = sock
        self.thread = thread
        host, port = sock.getsockname()[:2]
        self.server_address = (host, port)
        self.url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    @property
    def app(self) -> RewardApp:
        return self.server.config.app

    def shutdown(self, timeout: float = 30.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        self.app.service.close()

    def server_close(self) -> None:  # the old ThreadingHTTPServer API; shutdown() did the work
        self.sock.close()


def serve_in_thread(
    service: RewardService, host: str = "127.0.0.1", port: int = 0, **options: Any
) -> tuple[RunningServer, threading.Thread]:
    """Start a server for `service` in a daemon thread and wait until it accepts connections."""
    check_bind(host, options.get("token"))
    server = make_server(service, **options)
    sock = bind(host, port, server.config.backlog)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="rtlreward-server", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    if not server.started:
        server.should_exit = True
        sock.close()
        raise RuntimeError("the reward server did not start; see the log above")
    running = RunningServer(server, sock, thread)
    return running, thread
