"""A content-addressed store of stage results (sqlite), so a candidate seen before costs a lookup, not a simulation.

The key of one stage's result is a hash of everything that can change it: the task's namespace (`Task.origin`:
a task sent in a request never shares an entry with a dataset task), the fingerprint of the WHOLE task (every
field: a stage may read any of them, the reference and the prompt included), the stage's inputs (the answer's
files for a stage that needs them, the raw candidate for the stage that provides them, plus any other product it
needs), the stage's name and version, the versions of the tools it runs, its options from the profile, its limits,
and what the executor says about itself. Change any of these and the old entry is simply never asked for again.

Only verdicts about the candidate are stored: an `error` (the stage or its tool broke) is recomputed next time, so
an infrastructure hiccup never sticks to an answer. A `timeout` is not stored either by default: on a loaded
machine a correct design can time out, and a cached timeout would stick to it. `ResultCache(cache_timeouts=True)`
stores a stage's own timeouts (the limit is part of the key) when a looping design should cost its time only once;
the engine's deadline guard (code `engine-deadline`: the stage itself hung) is never stored.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from rtlreward.model import StageResult, Status, hash_json

SCHEMA_VERSION = 2  # 2: whole-task fingerprint, task namespace, inputs by product
CACHEABLE = frozenset({Status.PASSED, Status.FAILED})


def default_cache_dir() -> Path:
    env = os.environ.get("RTLREWARD_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rtlreward"


def stage_key(
    *,
    task_fingerprint: str,
    inputs: Any,
    stage: str,
    version: str,
    tool_versions: Any,
    options: Any,
    executor: Any,
    limits: Any = None,
    namespace: str = "",
) -> str:
    """The cache key of one stage run: a sha256 over everything that can change its result. `task_fingerprint`
    is `Task.fingerprint()` (the whole task); `namespace` is `Task.origin`."""
    return hash_json(
        {
            "schema": SCHEMA_VERSION,
            "namespace": namespace,
            "task": task_fingerprint,
            "inputs": inputs,
            "stage": stage,
            "version": version,
            "tools": tool_versions,
            "options": options,
            "executor": executor,
            "limits": limits,
        }
    )


def _jsonable_artifacts(artifacts: dict[str, Any]) -> dict[str, Any]:
    """Keep the artifacts that survive JSON (a files provider's files); drop the rest rather than fail."""
    out = {}
    for k, v in artifacts.items():
        try:
            json.dumps(v)
        except (TypeError, ValueError):
            continue
        out[k] = v
    return out


class ResultCache:
    """Thread-safe: one sqlite connection per thread, WAL journal so readers never block the writer."""

    def __init__(self, path: str | Path | None = None, *, cache_timeouts: bool = False) -> None:
        self.path = Path(path) if path else default_cache_dir() / "cache.sqlite"
        self.cache_timeouts = cache_timeouts
        self._local = threading.local()
        self._lock = threading.Lock()
        self._generation = 0  # bumped when the file is recreated so threads reopen
        self._disabled = False
        self.hits = 0
        self.misses = 0
        self._open_checked()

    # -- connections ----------------------------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, stage TEXT NOT NULL, result TEXT NOT NULL,"
            " artifacts TEXT NOT NULL, created REAL NOT NULL)"
        )
        conn.execute("SELECT count(*) FROM results WHERE key = ''").fetchone()
        return conn

    def _open_checked(self) -> None:
        try:
            conn = self._connect()
            conn.execute("PRAGMA quick_check").fetchone()
            conn.close()
        except sqlite3.DatabaseError as exc:
            self._recreate(exc)
        except OSError as exc:
            warnings.warn(f"rtlreward cache at {self.path} is unusable ({exc}); caching is off", stacklevel=3)
            self._disabled = True

    def _recreate(self, exc: Exception) -> None:
        with self._lock:
            warnings.warn(f"rtlreward cache {self.path} is corrupt ({exc}); starting a new one", stacklevel=3)
            for suffix in ("", "-wal", "-shm"):
                try:
                    Path(str(self.path) + suffix).unlink()
                except FileNotFoundError:
                    pass
                except OSError:
                    self._disabled = True
            self._generation += 1
            try:
                self._connect().close()
            except (sqlite3.DatabaseError, OSError) as exc2:
                warnings.warn(f"cannot recreate the rtlreward cache ({exc2}); caching is off", stacklevel=3)
                self._disabled = True

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "generation", -1) != self._generation:
            if conn is not None:
                conn.close()
            conn = self._connect()
            self._local.conn = conn
            self._local.generation = self._generation
        return conn

    # -- API ------------------------------------------------------------------------------------------------------
    def get(self, key: str) -> StageResult | None:
        if self._disabled:
            return None
        try:
            row = (
                self._conn().execute("SELECT result, artifacts FROM results WHERE key = ?", (key,)).fetchone()
            )
        except sqlite3.DatabaseError as exc:
            self._recreate(exc)
            return None
        if row is None:
            self.misses += 1
            return None
        try:
            result = StageResult.from_dict(json.loads(row[0]), artifacts=json.loads(row[1]))
        except (ValueError, KeyError, TypeError):
            self.misses += 1
            return None
        self.hits += 1
        return StageResult.from_dict({**result.to_dict(), "cached": True}, artifacts=result.artifacts)

    def put(self, key: str, result: StageResult) -> bool:
        """Store a verdict; errors and (unless asked) timeouts are refused (see the module docstring)."""
        if self._disabled:
            return False
        if result.status not in CACHEABLE and not (self.cache_timeouts and result.status is Status.TIMEOUT):
            return False
        if any(d.code == "engine-deadline" for d in result.diagnostics):
            return False
        data = json.dumps({**result.to_dict(), "cached": False}, default=str)
        arts = json.dumps(_jsonable_artifacts(result.artifacts))
        try:
            self._conn().execute(
                "INSERT OR REPLACE INTO results (key, stage, result, artifacts, created) VALUES (?, ?, ?, ?, ?)",
                (key, result.name, data, arts, time.time()),
            )
        except sqlite3.DatabaseError as exc:
            self._recreate(exc)
            return False
        return True

    def stats(self) -> dict[str, Any]:
        if self._disabled:
            return {"path": str(self.path), "entries": 0, "disabled": True}
        rows = self._conn().execute("SELECT stage, count(*) FROM results GROUP BY stage").fetchall()
        return {
            "path": str(self.path),
            "entries": sum(n for _, n in rows),
            "by_stage": dict(rows),
            "hits": self.hits,
            "misses": self.misses,
        }

    def clear(self) -> int:
        if self._disabled:
            return 0
        cur = self._conn().execute("DELETE FROM results")
        return cur.rowcount

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
