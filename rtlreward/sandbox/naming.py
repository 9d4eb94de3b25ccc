"""How workspaces are named and where they are made: a folder per candidate whose name carries its owner
(pid, start time, host), so the reaper (`rtlreward.sandbox.reaper`) can remove what a dead run left. No rtlreward
imports: the executors and the reaper all build on it."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import tempfile
from pathlib import Path

WORKSPACE_RE = re.compile(r"^rtlreward-.*\.o(\d+)-(\d*)-([0-9a-f]{8})$")


def proc_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), or None when it is
    unknown (no such process, no /proc)."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    try:  # the command name (field 2) may hold spaces and parentheses: split after the LAST ')'
        return int(data[data.rindex(b")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return None


_HOST: str | None = None


def host_name() -> str:
    global _HOST
    if _HOST is None:
        _HOST = socket.gethostname()
    return _HOST


def host_hash() -> str:
    return hashlib.sha256(host_name().encode()).hexdigest()[:8]


def workspace_root(root: str | os.PathLike[str] | None = None) -> Path:
    """The folder workspaces are made in: `root`, else $RTLREWARD_WORKSPACE_DIR, else the temp dir."""
    return Path(root or os.environ.get("RTLREWARD_WORKSPACE_DIR") or tempfile.gettempdir())


def make_workspace(task_id: str, root: str | os.PathLike[str] | None = None) -> Path:
    """A fresh private folder (0700) for one candidate of `task_id` under `root` ($RTLREWARD_WORKSPACE_DIR or
    the temp dir when None), named after its owner so `reap_stale_workspaces` can remove it once this process
    is gone."""
    base = workspace_root(root)
    base.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", task_id)[:40] or "task"
    pid = os.getpid()
    start = proc_start_time(pid)
    suffix = f".o{pid}-{'' if start is None else start}-{host_hash()}"
    return Path(tempfile.mkdtemp(prefix=f"rtlreward-{slug}-", suffix=suffix, dir=base))
