"""Shared by the reward-server tests: a server on a free loopback port in a background thread, raw-socket and
urllib requests (so the tests see exactly what goes over the wire), and a probe stage that records how many
evaluations run at once and can be told to take long."""

from __future__ import annotations

import contextlib
import json
import re
import select
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import engine_helpers as h

from rtlreward import Stage, Status, hookimpl
from rtlreward.engine import Engine

ROOT = Path(__file__).resolve().parents[1]
ARBITER = ROOT / "examples" / "fixed_priority_arbiter"


def reply(name: str) -> str:
    return (ARBITER / "completions" / f"{name}.txt").read_text()


@contextlib.contextmanager
def running(engine: Any, tasks: Any = (), **options: Any) -> Iterator[str]:
    """A server for (engine, tasks) on 127.0.0.1:<free port>; yields its base URL. Options are the
    RewardService's (allow_inline_tasks, jobs, max_queue, client_queue, request_timeout) and the HTTP server's
    (token, client_timeout, max_body, max_connections, reply_after)."""
    from rtlreward_server.run import serve_in_thread
    from rtlreward_server.server import RewardService

    service_keys = ("allow_inline_tasks", "jobs", "max_queue", "client_queue", "request_timeout")
    service = RewardService(engine, tasks, **{k: options.pop(k) for k in service_keys if k in options})
    server, _ = serve_in_thread(service, "127.0.0.1", 0, **options)
    try:
        yield server.url
    finally:
        server.shutdown()
        server.server_close()


def request(
    url: str, payload: Any = None, *, raw: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], Any]:
    """(status, headers with lower-case names, JSON body or text) of a GET (no payload) or POST."""
    data = raw if raw is not None else (json.dumps(payload).encode() if payload is not None else None)
    req = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            status, hdrs, body = r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        status, hdrs, body = e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()
    try:
        return status, hdrs, json.loads(body)
    except ValueError:
        return status, hdrs, body.decode(errors="replace")


def raw_exchange(url: str, head: bytes, body_parts: tuple[bytes, ...] = (), wait: float = 30.0) -> bytes:
    """Send a hand-written request over a socket and return whatever comes back before the server closes or
    `wait` seconds pass. Before each body part, an answer the server already sent (it may refuse on the head
    alone) is read instead of sending more: writing into a closed connection could reset it and lose the
    answer."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait) as s:
        s.sendall(head)
        for part in body_parts:
            if select.select([s], [], [], 2.0)[0]:
                break
            try:
                s.sendall(part)
            except OSError:  # the server answered and closed while we were still sending
                break
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_WR)
        data = b""
        try:
            while chunk := s.recv(65536):
                data += chunk
        except OSError:
            pass
        return data


def status_of(response: bytes) -> int | None:
    """The status code of a raw HTTP response, or None if there was none."""
    line = response.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) > 1 and line[1].isdigit() else None


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in a Prometheus text exposition (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.fullmatch(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)", line)
        if m and m.group(1) == name and ",".join(sorted((m.group(2) or "").split(","))).strip(",") == want:
            return float(m.group(3))
    return 0.0


class Probe(Stage):
    """Records the largest number of evaluations running at once; a reply containing SLOW<n> takes n seconds,
    anything else PROBE_SECONDS."""

    name = "probe"
    version = "1"
    requires = ("format",)
    lock = threading.Lock()
    running = 0
    peak = 0
    runs = 0
    seconds = 0.0
    started: list[str] = []  # the replies, in the order their evaluations began

    @classmethod
    def reset(cls, seconds: float = 0.0) -> None:
        with cls.lock:
            cls.running = cls.peak = cls.runs = 0
            cls.seconds = seconds
            cls.started = []

    def run(self, ctx):
        cls = type(self)
        with cls.lock:
            cls.running += 1
            cls.runs += 1
            cls.peak = max(cls.peak, cls.running)
            cls.started.append("\n".join(ctx.files.values()))
        try:
            text = "\n".join(ctx.files.values())
            delay = cls.seconds
            if "SLOW" in text:
                delay = float(text.split("SLOW", 1)[1].split()[0])
            time.sleep(delay)
            return self.result(Status.PASSED, 1.0)
        finally:
            with cls.lock:
                cls.running -= 1


class ProbePlugin:
    @hookimpl
    def rtlreward_register_stages(self, register):
        register(Probe())


# Real stages that cost milliseconds: format, safety, interface (pyslang).
CHEAP_PROFILE = {
    "name": "cheap",
    "stages": ["format", "safety", "interface"],
    "weights": {"format": 0.1, "interface": 0.2},
    "gates": ["safety"],
    "verdict": "interface",
}

PROBE_PROFILE = {"name": "probe", "stages": ["format", "probe"], "weights": {"probe": 1}, "verdict": "probe"}


def probe_engine(jobs: int = 8) -> Engine:
    """An engine whose work is the probe stage (the test format stage: the reply is the file), no cache."""
    return Engine(PROBE_PROFILE, registry=h.registry({"probe": ProbePlugin()}), cache=False, jobs=jobs)


PROBE_TASK = h.task("t1")
