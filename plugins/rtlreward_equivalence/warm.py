"""Warm Yosys servers for the equivalence stage (issue 16): libyosys loaded once per server, a forked child per
proof, instead of a fresh Python + libyosys (+ a sandbox) per proof.

Only where the executor can `spawn` a long-lived sandbox (the local executor under bubblewrap); elsewhere, or when
a server cannot start or stops answering, the stage runs its one-shot command as before. Servers are shared by
every executor with the same sandbox settings in this process, one proof at a time each, so concurrent proofs take
concurrent servers; an idle one is closed after IDLE_SECONDS, all of them at exit. `RTLREWARD_WARM_YOSYS=0` turns
them off. What keeps each guarantee is in `yosys_server`'s docstring and docs/performance.md.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import selectors
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rtlreward.sandbox import Limits
from rtlreward.sandbox.cells import SERVER as CELL_SERVER
from rtlreward.sandbox.reaper import make_workspace

SERVER = Path(__file__).with_name("yosys_server.py")
IDLE_SECONDS = 120.0
START_SECONDS = 30.0  # libyosys loaded and the ready line written, on a loaded machine
RETRY_SECONDS = 60.0  # after a server fails to start, the one-shot path for this long before trying again
ENV_SWITCH = "RTLREWARD_WARM_YOSYS"
MAX_ANSWER = 24 << 20  # one answer line: 3 files of at most 4 MiB in base64, and the capped streams
JOBS_PER_SERVER = 1000  # then a fresh server: nothing a long run of jobs could build up outlives it
CANCEL_POLL = 0.2  # how often a waiting job looks whether its candidate was given up (`executor.cancel`)


class _Server:
    def __init__(self, spawned: Any) -> None:
        self.spawned = spawned
        self.buf = bytearray()
        self.last_used = time.monotonic()
        self.jobs = 0

    @property
    def alive(self) -> bool:
        return self.spawned.proc.poll() is None

    def read_line(self, deadline: float, cancelled: Callable[[], bool] | None = None) -> bytes | None:
        out = self.spawned.proc.stdout
        fd = out.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            seen = 0  # the buffer before this has no newline: look only at what arrives after it
            while (end := self.buf.find(b"\n", seen)) < 0:
                seen = len(self.buf)
                if seen > MAX_ANSWER:
                    return None
                left = deadline - time.monotonic()
                if left <= 0 or (cancelled is not None and cancelled()):
                    return None
                if not sel.select(min(left, CANCEL_POLL)):
                    continue
                chunk = os.read(fd, 1 << 22)
                if not chunk:
                    return None
                self.buf += chunk
        line = bytes(self.buf[:end])
        del self.buf[: end + 1]
        return line

    def send(self, obj: Mapping[str, Any]) -> bool:
        try:
            self.spawned.proc.stdin.write(json.dumps(obj).encode("utf-8", "surrogateescape") + b"\n")
            self.spawned.proc.stdin.flush()
            return True
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        self.spawned.close()


class WarmYosys:
    """The servers of one sandbox configuration (see `pool_for`)."""

    def __init__(self, executor: Any, memory_mb: int, pyosys_dir: str) -> None:
        self.executor = executor
        self.memory_mb = memory_mb
        self.pyosys_dir = pyosys_dir
        self._idle: list[_Server] = []
        self._lock = threading.Lock()
        self._failed_at = 0.0

    def _start(self) -> _Server | None:
        if time.monotonic() - self._failed_at < RETRY_SECONDS:
            return None
        folder = make_workspace("yosys-warm")
        try:
            spawned = self.executor.spawn(
                [self.executor.python, "-I", "-S", str(SERVER), self.pyosys_dir, str(CELL_SERVER.parent)],
                workspace=folder,
                limits=Limits(memory_mb=self.memory_mb),
            )
        except Exception:
            self._failed_at = time.monotonic()
            with contextlib.suppress(OSError):
                os.rmdir(folder)
            return None
        server = _Server(spawned)
        line = server.read_line(time.monotonic() + START_SECONDS)
        try:
            ready = line is not None and json.loads(line).get("ready") is True
        except ValueError:
            ready = False
        if not ready:
            server.close()
            self._failed_at = time.monotonic()
            return None
        return server

    def _take(self) -> _Server | None:
        with self._lock:
            now = time.monotonic()
            stale = [s for s in self._idle if now - s.last_used > IDLE_SECONDS or not s.alive]
            self._idle = [s for s in self._idle if s not in stale]
            server = self._idle.pop() if self._idle else None
        for s in stale:
            s.close()
        return server or self._start()

    def _give_back(self, server: _Server) -> None:
        server.last_used = time.monotonic()
        with self._lock:
            self._idle.append(server)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for s in idle:
            s.close()

    def prove(
        self,
        files: Mapping[str, str],
        script: str,
        seconds: float,
        abc: Sequence[str] | None,
        abc_seconds: float,
        want: Sequence[str],
        cancelled: Callable[[], bool] | None = None,
        abc_unless_decided: str | None = None,
        builtin_techmap: bool = False,
    ) -> dict[str, Any] | None:
        """Run one job (see `yosys_server`); None when no server could take it, it did not answer in time, or
        `cancelled()` turned true meanwhile (its server is then killed with the job; the caller runs its one-shot
        command, which a cancelled executor refuses at once). Files in the answer are bytes, or None. ABC is not
        started when the AIGER file `abc_unless_decided` names is decided without it (`yosys_server.aiger_decide`).
        `builtin_techmap`: the script's bare `techmap` lines use the library the server read once."""
        server = self._take()
        if server is None:
            return None
        job = {
            "files": dict(files),
            "script": script,
            "seconds": seconds,
            "abc": list(abc) if abc else None,
            "abc_seconds": abc_seconds,
            "want": list(want),
            "abc_unless_decided": abc_unless_decided,
            "builtin_techmap": builtin_techmap,
        }
        start = time.monotonic()
        line = None
        if server.send(job):
            line = server.read_line(start + seconds + abc_seconds + 15.0, cancelled)
        try:
            answer = json.loads(line) if line is not None else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or "rc" not in answer:
            server.close()  # killed by its job, or stuck: a fresh one next time
            return None
        server.jobs += 1
        if server.jobs >= JOBS_PER_SERVER:
            server.close()
        else:
            self._give_back(server)
        if answer.get("too_big"):
            return None  # what the proof wrote is larger than a warm answer carries: the one-shot command decides
        answer["files"] = {
            k: (base64.b64decode(v) if isinstance(v, str) else None)
            for k, v in answer.get("files", {}).items()
        }
        answer["duration"] = time.monotonic() - start
        return answer


_POOLS: dict[tuple, WarmYosys] = {}
_POOLS_LOCK = threading.Lock()


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def pool_for(executor: Any, memory_mb: int, pyosys_dir: str | None) -> WarmYosys | None:
    """The warm servers for this executor's sandbox settings, or None where they cannot run (no pyosys here, an
    executor that cannot spawn, switched off)."""
    if not enabled() or not pyosys_dir or not getattr(executor, "can_spawn", False):
        return None
    key = (
        type(executor).__name__,
        getattr(executor, "bwrap", None),
        getattr(executor, "route", None),
        bool(getattr(executor, "drops_privileges", False)),
        executor.python,
        tuple(getattr(executor, "extra_path", ())),
        tuple(getattr(executor, "hide", ())),
        int(memory_mb),
        pyosys_dir,
        os.getpid(),  # a forked child never talks to its parent's servers (their pipes are the parent's)
    )
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = WarmYosys(executor, int(memory_mb), pyosys_dir)
        return pool


@atexit.register
def close_all() -> None:
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for p in pools:
        p.close()
