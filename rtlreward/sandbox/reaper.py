"""Leftovers of a dead rtlreward process: its containers and its workspaces.

A trainer that is `kill -9`-ed (OOM killer, preemption, a hung job cancelled) runs no `finally:`; its containers
keep running until their own time limit and stay on the daemon, its workspaces stay on disk. Everything rtlreward
starts therefore carries its owner, so the next start of an executor can clean up after it:

- a container is labelled `rtlreward=1`, `rtlreward.owner_pid`, `rtlreward.owner_start` (the owner's start time,
  from /proc, against pid reuse), `rtlreward.owner_boot` (the kernel's boot id: after a reboot no pid is the
  owner), `rtlreward.owner_host`, `rtlreward.started` and `rtlreward.deadline` (epoch seconds after which it must
  not exist, whoever owns it), and `rtlreward.executor` (the executor that started it: `close()` removes its own
  by that label, never another executor's of the same process);
- a workspace carries its owner in its NAME (`rtlreward-<task>-<random>.o<pid>-<start>-<host hash>`), not in a
  file: the candidate can write anything inside its workspace, but cannot rename the folder that is its mount
  point, so it can neither keep a dead run's folder alive nor get a live run's folder deleted.

An owner is dead when no process has its pid, the process is a zombie, the pid now belongs to a process that
started at another time, or (containers) the machine was rebooted since. Owners on another host (a shared daemon or workspace folder) are never judged by pid;
their containers go once their deadline has passed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from rtlreward.sandbox.naming import (
    WORKSPACE_RE,
    host_hash,
    host_name,
    make_workspace,
    proc_start_time,
    workspace_root,
)
from rtlreward.sandbox.users import sandbox_user

__all__ = [
    "DEADLINE_GRACE",
    "container_labels",
    "make_workspace",
    "owner_alive",
    "proc_start_time",
    "reap_containers",
    "reap_containers_once",
    "reap_stale_workspaces",
    "reap_stale_workspaces_once",
    "remove_containers",
    "workspace_root",
]

log = logging.getLogger(__name__)

LABEL = "rtlreward"
# Seconds between a container's own time limit and the deadline on its label: start-up, log flushing and a
# busy machine's scheduling must never let the reaper remove a container its live owner is still reading.
DEADLINE_GRACE = 60


def _zombie(pid: int) -> bool:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return data[data.rindex(b")") + 2 :][:1] == b"Z"


def owner_alive(pid: int, start: int | None = None) -> bool:
    """Whether the process that recorded (pid, start) still runs. A pid we may not signal (another user's
    process) counts as alive: when in doubt, keep."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if _zombie(pid):  # killed, not yet waited for by its parent: it will never clean up
        return False
    if start is not None:
        now = proc_start_time(pid)
        if now is not None and now != start:  # the pid was reused by a younger process
            return False
    return True


def boot_id() -> str:
    """This boot of the kernel ("" when unknown): a container labelled with another boot's id has no live owner,
    whatever process now holds its owner's pid and start time."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def container_labels(
    limit: float, *, now: float | None = None, executor: str | None = None
) -> dict[str, str]:
    """The labels of a container that must end within `limit` seconds of `now` (its own time limit), started by
    `executor` (an id unique to one executor object, for its `close()`)."""
    now = time.time() if now is None else now
    pid = os.getpid()
    start = proc_start_time(pid)
    labels = {
        LABEL: "1",
        f"{LABEL}.owner_pid": str(pid),
        f"{LABEL}.owner_start": "" if start is None else str(start),
        f"{LABEL}.owner_boot": boot_id(),
        f"{LABEL}.owner_host": host_name(),
        f"{LABEL}.started": str(int(now)),
        f"{LABEL}.deadline": str(int(now + limit) + 1 + DEADLINE_GRACE),
    }
    if executor:
        labels[f"{LABEL}.executor"] = executor
    return labels


def _int(text: Any) -> int | None:
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return None


def _container_is_stale(labels: dict[str, str], now: float) -> str | None:
    """Why a labelled container must go, or None to keep it."""
    deadline = _int(labels.get(f"{LABEL}.deadline"))
    if deadline is not None and now > deadline:
        return "past its deadline"
    if labels.get(f"{LABEL}.owner_host") != host_name():
        return None
    pid = _int(labels.get(f"{LABEL}.owner_pid"))
    if pid is None:
        return None
    boot, now_boot = labels.get(f"{LABEL}.owner_boot"), boot_id()
    if boot and now_boot and boot != now_boot:
        return f"its owner (pid {pid}) ran before the last reboot"
    if not owner_alive(pid, _int(labels.get(f"{LABEL}.owner_start"))):
        return f"its owner (pid {pid}) is dead"
    return None


def reap_containers(client: Any = None, *, now: float | None = None) -> int:
    """Kill and remove every container labelled `rtlreward=1` whose owner on this host is dead or whose
    deadline has passed (running or exited). Containers without our label are never touched. Returns how many
    went. Never raises for a daemon problem: reaping must not stop an evaluation from starting."""
    try:
        if client is None:
            from rtlreward.sandbox.image import docker_client

            client = docker_client(timeout=60)
        found = client.api.containers(all=True, filters={"label": f"{LABEL}=1"})
    except Exception as exc:
        log.warning("could not list rtlreward containers to reap: %s", exc)
        return 0
    now = time.time() if now is None else now
    gone = 0
    for c in found:
        labels = c.get("Labels") or {}
        if labels.get(LABEL) != "1":
            continue
        why = _container_is_stale(labels, now)
        if why is None:
            continue
        try:  # force: SIGKILL, then remove
            client.api.remove_container(c["Id"], force=True)
        except Exception as exc:  # already gone (its owner or another reaper was faster)
            log.debug("reaping %s: %s", c["Id"][:12], exc)
            continue
        log.info("removed container %s: %s", c["Id"][:12], why)
        gone += 1
    return gone


def remove_containers(client: Any, labels: dict[str, str]) -> int:
    """Kill and remove every container (running or not) that carries all of `labels`, e.g. one executor's own
    (`rtlreward.executor`) when it closes. Returns how many went; never raises for a daemon problem."""
    try:
        found = client.api.containers(all=True, filters={"label": [f"{k}={v}" for k, v in labels.items()]})
    except Exception as exc:
        log.warning("could not list containers to remove: %s", exc)
        return 0
    gone = 0
    for c in found:
        if any((c.get("Labels") or {}).get(k) != v for k, v in labels.items()):
            continue
        try:
            client.api.remove_container(c["Id"], force=True)
        except Exception as exc:  # already gone
            log.debug("removing %s: %s", c["Id"][:12], exc)
            continue
        gone += 1
    return gone


_ONCE_LOCK = threading.Lock()
_REAPED_IN: set[int] = set()
_REAPED_ROOTS: set[tuple[int, str]] = set()


def reap_containers_once(client: Any = None) -> int:
    """`reap_containers` the first time this process (pid) asks, 0 afterwards."""
    with _ONCE_LOCK:
        if os.getpid() in _REAPED_IN:
            return 0
        _REAPED_IN.add(os.getpid())
    return reap_containers(client)


def _own_uids() -> set[int]:
    uids = {os.getuid()}
    if os.getuid() == 0:  # the docker executor hands a root caller's workspaces to the sandbox user
        uids.add(sandbox_user()[0])
    return uids


def reap_stale_workspaces_once(root: str | os.PathLike[str] | None = None) -> int:
    """`reap_stale_workspaces(root)` the first time this process asks for that root (resolved), 0 afterwards.
    Never raises: reaping is housekeeping, never the reason an evaluation fails."""
    key = (os.getpid(), os.path.realpath(workspace_root(root)))
    with _ONCE_LOCK:
        if key in _REAPED_ROOTS:
            return 0
        _REAPED_ROOTS.add(key)
    try:
        gone = reap_stale_workspaces(root)
    except Exception as exc:
        log.warning("could not remove stale workspaces under %s: %r", key[1], exc)
        return 0
    if gone:
        log.info("removed %d workspace(s) left by dead rtlreward processes under %s", gone, key[1])
    return gone


def reap_stale_workspaces(root: str | os.PathLike[str] | None = None, *, prefix: str = "rtlreward-") -> int:
    """Remove the workspaces under `root` (as in `make_workspace`) whose owner on this host is dead; returns
    how many went. Only folders named by `make_workspace`, owned by us and not symlinks are considered."""
    from rtlreward.sandbox.local import remove_workspace

    base = workspace_root(root)
    try:
        entries = list(os.scandir(base))
    except OSError:
        return 0
    host, uids, gone = host_hash(), _own_uids(), 0
    for entry in entries:
        m = WORKSPACE_RE.match(entry.name)
        if m is None or not entry.name.startswith(prefix) or m.group(3) != host:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not entry.is_dir(follow_symlinks=False) or st.st_uid not in uids:
            continue
        if owner_alive(int(m.group(1)), int(m.group(2)) if m.group(2) else None):
            continue
        with contextlib.suppress(OSError):
            remove_workspace(Path(entry.path))
        if not os.path.lexists(entry.path):
            log.info("removed the workspace of a dead run: %s", entry.path)
            gone += 1
    return gone
