"""The default executor: a subprocess in its own session and process group, with rlimits, a wall-clock limit
that kills everything the command started, a scrubbed environment, an unprivileged uid when the trainer is root,
and bubblewrap (an empty root with only the system folders, the interpreter and the workspace in it, no network,
no capabilities, own PID namespace) where bubblewrap works.

Least privilege, and why it is built this way (see docs/security.md for what is *not* covered):
- who runs the command: when the trainer is root, every command runs as a dedicated host uid/gid (default
  200000 + slot, no supplementary groups), leased per workspace through flock files in /run/rtlreward-sandbox so
  concurrent runs in different workspaces -- threads, processes, Ray workers on one machine -- never share a uid,
  while concurrent stages of ONE candidate (same workspace) do share one (otherwise each run's hand-over would
  take the other's files away). A per-run uid makes three kernel mechanisms work that do nothing for root:
  file permissions (root-only 0600/0700 files are unreadable even where they are visible), RLIMIT_NPROC (the
  kernel counts processes per uid and exempts root), and `kill(-1)` as that uid, which reaps every process a run
  left behind, however it daemonised or rewrote its environment. Before a run the workspace tree is handed to
  the uid (chown, never following symlinks, never chowning a root-owned file with other hard links; the
  workspace folder itself becomes root:<uid> 01770 so the uid cannot move it away; a root-owned entry with no
  write bit stays root's, which is how the trainer freezes a harness for a run); when the last run of the
  lease ends, the workspace folder goes back to root:root 0700, so the next workspace leased the same uid cannot
  reach this one, and without bubblewrap every process of the uid is killed (under bubblewrap the PID namespace
  already did that; a lease whose holder died is cleared the same way before reuse). The parent (root) reads
  results and removes the workspace as before. Unused uids only: ids in /etc/passwd, /etc/group, /etc/subuid
  and /etc/subgid are skipped (RTLREWARD_SANDBOX_UID_BASE / RTLREWARD_SANDBOX_UID_COUNT move the range).
- how the uid is entered under bubblewrap: root runs bwrap in its privileged mode WITHOUT a user namespace
  (bwrap builds the mount tree, then keeps only CAP_SETUID/SETGID/SETPCAP), and `setpriv` inside the sandbox
  switches to the sandbox uid, clears groups, the bounding set and inheritable capabilities before exec
  (no_new_privs is set by bwrap). Why not "drop to the uid, then unprivileged bwrap --unshare-user": bubblewrap
  0.8 canonicalises every bind source with the caller's credentials (even `--bind-fd`), so an unprivileged
  bwrap cannot bind an interpreter behind a 0700 folder (pyenv in /root) or a workspace under pytest's 0700
  /tmp/pytest-of-root. And a user namespace created BY root maps its ids onto root outside, which is no
  privilege drop at all. That unprivileged route remains the fallback for root where the kernel refuses
  privileged mounts but allows user namespaces (paths the uid cannot reach then fail with a clear error), and
  it is the route for a non-root trainer (`--unshare-user`, running as the caller).
- what the command sees: an empty tmpfs root holding read-only /usr, /bin, /sbin, /lib* (symlinks kept as
  symlinks on merged-usr systems) and /etc; a new /dev and /proc; a private /tmp (1777); the interpreter's
  prefix and site-packages, rtlreward's and its plugins' package folders, `path_prepend`, `extra_path` and
  `read_only` paths, read-only at their own paths (missing parent folders are created 0755, so a prefix under
  /root is reachable without /root itself); the workspace read-write; `binds` at their sandbox paths; then the
  root is remounted read-only. Everything else (/root, /home, /work, /var, /srv, /opt, /mnt, /media, /run and
  docker.sock, other workspaces, the project's tests and data) does not exist in the sandbox.
- wall clock: the command runs in a new session; on expiry its process group is killed. Under bubblewrap the
  command is also in its own PID namespace whose init dies with bwrap (`--die-with-parent`), so daemons that
  `setsid()` away from the group die too. Without bubblewrap, every descendant carries a per-run marker in its
  environment and is found in /proc and killed after the run; with a sandbox uid, `kill(-1)` as that uid
  catches even those that dropped the marker.
- memory / file size / processes: RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC set in the child before it execs, or,
  when root runs bubblewrap, by `prlimit` in front of bwrap (no preexec function: subprocess can vfork instead
  of copying the trainer's page tables); bwrap needs only a few MB, so the limits reach the command unchanged. RLIMIT_NPROC holds for the sandbox
  uid (and for a non-root caller); only a root trainer that keeps root (`drop_privileges=False`, or without
  bubblewrap when the uid cannot reach the interpreter) is left with the PID namespace and the wall clock.
- without bubblewrap: the same uid drop when the sandbox uid can run the interpreter and reach the workspace
  (checked by permission bits; otherwise the run stays root and a one-time warning says why), plus
  no_new_privs. There is no file-system or network isolation beyond what file permissions give.
- output: read incrementally; anything past MAX_OUTPUT_BYTES is drained and dropped, so a `$display` flood can
  never grow the trainer's memory.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import hashlib
import os
import resource
import select
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Literal

from rtlreward.sandbox import MAX_OUTPUT_BYTES, CommandResult, Limits, truncate_output
from rtlreward.sandbox.cell_server import keep_output
from rtlreward.sandbox.cells import SERVER as CELL_SERVER
from rtlreward.sandbox.cells import Cell, CellPool
from rtlreward.sandbox.cells import wanted as warm_wanted
from rtlreward.sandbox.naming import make_workspace
from rtlreward.sandbox.seccomp import open_filter

BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
RUN_MARKER = "RTLREWARD_SANDBOX_RUN"  # env var carried by every process of one run (no-bwrap cleanup)
_DRAIN_GRACE = 0.5  # seconds to keep reading pipes after the command ended or was killed
CANCELLED = "[cancelled: the caller gave up on this workspace]"

# What every tool needs from the host, read-only. /lib32, /libx32 and friends only where they exist.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
UID_BASE_VAR = "RTLREWARD_SANDBOX_UID_BASE"
UID_COUNT_VAR = "RTLREWARD_SANDBOX_UID_COUNT"
STATE_DIR_VAR = "RTLREWARD_SANDBOX_STATE_DIR"
DEFAULT_UID_BASE = 200_000
DEFAULT_UID_COUNT = 1024
PROBE_UID = 65534  # nobody: only for the one-time probe of what bubblewrap can do here, never for a run

Route = Literal["privileged", "userns"]

_warned: set[str] = set()
_warned_no_bwrap = False


class LocalExecutor:
    """Runs commands on this machine. `use_bwrap=None` picks bubblewrap when the kernel lets it work.

    `drop_privileges` (only matters when the trainer is root): None runs every command as a leased sandbox uid
    under bubblewrap, and without bubblewrap whenever that uid can reach the interpreter and the run's paths;
    True always drops (without bubblewrap even when Python commands then cannot start: for installs whose Python
    lives outside /root); False keeps root (debugging only: root-only files become readable again and
    RLIMIT_NPROC does not hold).

    `hide` lists host paths that must stay invisible even where a bound folder contains them (bound over by an
    empty tmpfs). Nothing outside the bound folders exists in the sandbox anyway; the default (the invoking
    user's home, /root, /home) only matters if one of them lies under a bound folder.
    """

    name = "local"

    def __init__(
        self,
        *,
        use_bwrap: bool | None = None,
        extra_path: Sequence[str] = (),
        hide: Sequence[str | Path] | None = None,
        drop_privileges: bool | None = None,
        warm: bool | None = None,
    ) -> None:
        self.is_root = os.geteuid() == 0
        self.drop_privileges = drop_privileges
        self._fits: dict[tuple, bool] = {}  # _cell_fits, per workspace root, cell mounts and command
        self._fits_lock = threading.Lock()
        drop = self.is_root and drop_privileges is not False
        bwrap = shutil.which("bwrap")
        route = _bwrap_route(bwrap, drop) if bwrap and use_bwrap is not False else None
        if use_bwrap is None:
            use_bwrap = route is not None
        elif use_bwrap and route is None:
            raise RuntimeError(
                "bubblewrap was requested but is not usable here; install it with `apt-get install bubblewrap` "
                "(and allow user namespaces, or run as root with CAP_SYS_ADMIN) or pass use_bwrap=False"
            )
        if not use_bwrap:
            _warn_no_bwrap()
        self.bwrap = bwrap if use_bwrap else None
        self.route: Route | None = route if use_bwrap else None
        self.setpriv = _setpriv()
        self.extra_path = list(extra_path)
        self.python = _python()
        if hide is None:
            hide = [p for p in {str(Path.home()), "/root", "/home"} if os.path.isdir(p)]
        self.hide = sorted({os.path.realpath(p) for p in hide})
        self._keep = _interpreter_paths()
        # Whether commands run as a leased sandbox uid (root trainers only); "auto": decided per run (no bwrap).
        self._drop: bool | Literal["auto"] = False
        if drop:
            if self.bwrap or drop_privileges:
                self._drop = True
            else:
                blocked = _unreachable([self.python, *self._keep])
                self._drop = "auto" if blocked is None else False
                if blocked is not None:
                    _warn_once(
                        f"keep-root:{blocked}",
                        f"commands run as ROOT without bubblewrap: the unprivileged sandbox uid cannot reach {blocked} "
                        "(a folder on the way is not searchable by others), so root-only files are readable and "
                        "RLIMIT_NPROC does not hold. Install Python outside /root, install bubblewrap, or pass "
                        "drop_privileges=True for commands that do not need Python.",
                    )
        if self._drop and self.route == "userns":
            # An unprivileged bwrap canonicalises bind sources as the sandbox uid: keep what it can reach.
            blocked = [p for p in self._keep if _unreachable([p]) is not None]
            if blocked:
                _warn_once(
                    "userns-keep",
                    "bubblewrap runs unprivileged here (no privileged mounts for root), and the sandbox uid cannot "
                    f"reach {', '.join(blocked)}: commands needing them will fail. Install Python where others can "
                    "read it, or give the trainer CAP_SYS_ADMIN.",
                )
                self._keep = [p for p in self._keep if p not in blocked]
        # Commands running now (workspace -> {process group: run marker}) and the workspaces whose commands are
        # killed and refused (`cancel`).
        self._running: dict[str, dict[int, str]] = {}
        self._cancelled: set[str] = set()
        self._running_lock = threading.Lock()
        # Warm sandbox cells (rtlreward.sandbox.cells): workspaces made by `make_workspace` live in one, whose
        # commands then run as forked jobs of a sandbox set up once. Needs bubblewrap (a PID namespace).
        self._cells: CellPool | None = None
        if self.bwrap and warm_wanted(True if warm is None else bool(warm)):
            self._cells = CellPool(self._spawn_cell, hand_over, remove_workspace)

    # -- warm cells (rtlreward.sandbox.cells) ----------------------------------------------------------------------
    def _spawn_cell(
        self, slot: Path, read_only: list[str], path_prepend: list[str], limits: Limits, first: bool
    ) -> Spawned:
        return self.spawn(
            [self.python, "-I", "-S", str(CELL_SERVER)],
            workspace=slot,
            limits=limits,
            read_only=[Path(p) for p in read_only],
            path_prepend=path_prepend,
            hand_over_folder=first,
        )

    def make_workspace(self, task_id: str, root: str | os.PathLike[str] | None = None) -> Path:
        """A fresh private folder for one candidate (as `rtlreward.sandbox.reaper.make_workspace`), inside a warm
        sandbox cell when cells are on: its commands then run there until `release_workspace`."""
        if self._cells is None:
            return make_workspace(task_id, root)
        return self._cells.make_workspace(task_id, root)

    def release_workspace(self, workspace: Path) -> None:
        """The caller is done with `workspace` (removed it, or keeps it: then its cell ends and leaves it in place)."""
        if self._cells is not None:
            self._cells.release_workspace(workspace)

    def size_pool(self, slots: int, *, root: str | os.PathLike[str] | None = None) -> None:
        """Up to `slots` candidates scored at once (an engine passes its jobs): as many warm cells."""
        if self._cells is not None:
            self._cells.size(slots)

    def stats(self) -> dict[str, int]:
        """Counters of the warm cells: `warm` (commands run as a cell's job), `cells` (started), `fallback`, ..."""
        return self._cells.stats() if self._cells is not None else {}

    def close(self) -> None:
        """End every warm cell (new ones start when asked for)."""
        if self._cells is not None:
            self._cells.close()

    def cancel(self, workspace: Path) -> int:
        """Kill now every command running in `workspace` (or a folder inside it), and refuse new ones there: for
        a caller that gives up on a candidate (a stage past its deadline, an engine that is stopping). A killed
        or refused command reports a timeout (never cached). Returns how many commands were killed."""
        ws = os.path.realpath(workspace)
        with self._running_lock:
            self._cancelled.add(ws)
            doomed = [(pg, m) for w, runs in self._running.items() if _under(w, ws) for pg, m in runs.items()]
        for pgid, marker in doomed:
            self._kill(pgid, marker)
        if self._cells is not None:
            self._cells.cancel(ws)
        return len(doomed)

    def _is_cancelled(self, workspace: str) -> bool:
        with self._running_lock:
            return any(_under(workspace, c) for c in self._cancelled)

    def is_cancelled(self, workspace: Path) -> bool:
        """Whether `cancel` gave up on `workspace` (or a folder holding it): for work done outside `run` on its
        behalf (a warm server's job), which must stop too."""
        return self._is_cancelled(os.path.realpath(workspace))

    @property
    def supports_binds(self) -> bool:
        """Whether `run(..., binds=...)` can mount folders at fixed sandbox paths (needs bubblewrap)."""
        return self.bwrap is not None

    @property
    def drops_privileges(self) -> bool:
        """Whether commands run as a leased unprivileged uid (root trainers; without bubblewrap when possible)."""
        return bool(self._drop)

    def describe(self) -> dict[str, str]:
        return {
            "executor": self.name,
            "isolation": "bubblewrap" if self.bwrap else "none",
            "user": "sandbox-uid" if self._drop else ("root" if self.is_root else "caller"),
        }

    def which(self, tool: str) -> str | None:
        """Where `tool` is found on the PATH this executor's commands get (None: a command naming it would exit
        127)."""
        return shutil.which(tool, path=":".join([*self.extra_path, os.path.dirname(self.python), BASE_PATH]))

    def _env(
        self, workspace: Path, env: Mapping[str, str] | None, path_prepend: Sequence[str] = ()
    ) -> dict[str, str]:
        path = ":".join([*path_prepend, *self.extra_path, os.path.dirname(self.python), BASE_PATH])
        base = {
            "PATH": path,
            "HOME": str(workspace),
            "TMPDIR": "/tmp" if self.bwrap else str(workspace),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        if env:
            base.update(env)
        return base

    def _filesystem(
        self,
        workspace: Path,
        read_only: Sequence[Path],
        path_prepend: Sequence[str],
        binds: Mapping[str, str] | None,
    ) -> list[str]:
        """bwrap arguments building the sandbox's file system from an empty root (see the module docstring)."""
        ws = str(workspace)
        tree = _system_tree()
        for h in self.hide:
            if tree.visible(h) and not _under(ws, h):
                tree.special(["--tmpfs", h], h)
        for p in [*self._keep, *path_prepend, *self.extra_path, *(str(q) for q in read_only)]:
            given = os.path.abspath(p)
            rp = os.path.realpath(p)
            if _under(given, ws) and not _under(rp, ws):
                continue  # a workspace path the command turned into a symlink out of it: never bind that
            if not os.path.exists(rp) or _under(rp, ws):
                continue
            if not tree.visible(rp):
                tree.bind(rp, rp, content=True)
            if given != rp and not tree.visible(given) and not any(_under(given, s) for s in SYSTEM_DIRS):
                tree.bind(rp, given, content=True)
        tree.bind(ws, ws, content=True, writable=True)
        for p in read_only:  # read-only folders inside the workspace, bound over its writable bind
            rp = os.path.realpath(p)
            if _under(os.path.abspath(p), ws) and _under(rp, ws) and rp != ws and os.path.exists(rp):
                tree.bind(rp, rp, content=True)
        args = tree.args()
        for host, target in (binds or {}).items():  # {host path: sandbox path[:ro]}, in the caller's order
            dest, _, mode = str(target).partition(":")
            args += tree.parents(dest)
            args += ["--ro-bind" if mode == "ro" else "--bind", os.path.realpath(host), dest]
        return [*args, "--remount-ro", "/"]

    def _argv(
        self,
        argv: Sequence[str],
        workspace: Path,
        cwd: Path | str,
        limits: Limits,
        read_only: Sequence[Path],
        path_prepend: Sequence[str] = (),
        binds: Mapping[str, str] | None = None,
        uid: int | None = None,
    ) -> list[str]:
        if not self.bwrap:
            if binds:
                raise ValueError(
                    "bind mounts need bubblewrap (`apt-get install bubblewrap`); check "
                    "`executor.supports_binds` and rewrite the paths instead"
                )
            return list(argv)
        cmd = [self.bwrap, *self._filesystem(workspace, read_only, path_prepend, binds)]
        cmd += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if not limits.network:
            cmd.append("--unshare-net")
        if self.route == "userns":
            cmd.append("--unshare-user")
        cmd += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        tail = list(argv)
        if self.route == "privileged" and uid is not None:
            cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
            tail = [*_setpriv_argv(self.setpriv, uid), *argv]
        return [*cmd, "--chdir", str(cwd), "--", *tail]

    def _cell_fits(
        self, cell: Cell, workspace: Path, read_only: Sequence[Path], path_prepend: Sequence[str]
    ) -> bool:
        """Whether the cell's mount tree already holds the command's read-only folders and PATH entries (it may
        hold more: folders other commands asked for, read-only). One it lacks, outside the workspace, is learned
        for the cells started next; a read-only folder inside the workspace always needs a sandbox of its own."""
        if not read_only and not path_prepend:
            return True
        ws = str(workspace)
        # The answer for folders apart from the workspace depends on the workspace only through where it lies
        # (its parent): remembered per cell mount set, the first answer's check stands (~1 ms a command).
        related = [os.path.abspath(str(p)) for p in [*read_only, *path_prepend]]
        memo = None
        if not any(_under(p, ws) or _under(ws, p) for p in related):
            memo = (
                str(workspace.parent),
                tuple(cell.read_only),
                tuple(cell.path_prepend),
                tuple(map(str, read_only)),
                tuple(path_prepend),
            )
            known = self._fits.get(memo)
            if known is not None:
                return known
        fits = self._cell_fits_checked(cell, workspace, read_only, path_prepend)
        if memo is not None:
            with self._fits_lock:
                if len(self._fits) > 256:
                    self._fits.clear()
                self._fits[memo] = fits
        return fits

    def _cell_fits_checked(
        self, cell: Cell, workspace: Path, read_only: Sequence[Path], path_prepend: Sequence[str]
    ) -> bool:
        ro_cell = [Path(p) for p in cell.read_only]
        have = self._filesystem(workspace, ro_cell, cell.path_prepend, None)
        if (
            self._filesystem(workspace, [*ro_cell, *read_only], [*cell.path_prepend, *path_prepend], None)
            == have
        ):
            return True
        ws = str(workspace)
        outside = [os.path.abspath(p) for p in read_only]
        if self._cells is not None and not any(_under(p, ws) or _under(ws, p) for p in outside):
            self._cells.learn(outside, [os.path.abspath(p) for p in path_prepend])
        return False

    def _sandbox_uid_wanted(
        self, workspace: Path, read_only: Sequence[Path], path_prepend: Sequence[str]
    ) -> bool:
        """Whether this run gets a leased uid. Raises when the unprivileged bwrap route cannot reach a path."""
        if not self._drop:
            return False
        needed = [str(workspace.parent), *path_prepend, *self.extra_path, *(str(p) for p in read_only)]
        needed = [p for p in needed if not _under(os.path.realpath(p), str(workspace))]
        if self.route == "privileged":
            return True
        blocked = _unreachable(needed)
        if blocked is None:
            return True
        if self.route == "userns":
            raise RuntimeError(
                f"the sandbox uid cannot reach {blocked} (a folder on the way is not searchable by others) and "
                "bubblewrap cannot bind it for that uid here: put workspaces and tools where others can read them "
                "(RTLREWARD_WORKSPACE_DIR), or give the trainer CAP_SYS_ADMIN so bubblewrap mounts as root"
            )
        if self._drop == "auto":
            _warn_once(
                f"keep-root-run:{blocked}",
                f"a command runs as ROOT without bubblewrap: the sandbox uid cannot reach {blocked}; put workspaces "
                "under a folder others can search (RTLREWARD_WORKSPACE_DIR) or install bubblewrap",
            )
            return False
        return True  # drop_privileges=True: drop anyway

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
        binds: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """`binds` ({host path inside the workspace: sandbox path, ":ro" suffix for read-only}) mounts folders
        where a harness expects them (CVDP's /code/rtl, /src); with binds `cwd` is a path inside the sandbox."""
        limits = limits or Limits()
        workspace = Path(workspace).resolve()
        if self._is_cancelled(str(workspace)):
            return CommandResult(
                argv=tuple(argv),
                returncode=-9,
                stderr=CANCELLED,
                timed_out=True,
                sandboxed=self.bwrap is not None,
            )
        sandbox_cwd: Path | str
        if binds:
            for host in binds:
                if not _under(os.path.realpath(host), str(workspace)):
                    raise ValueError(f"bind source {host} is outside the workspace {workspace}")
            sandbox_cwd, cwd = str(cwd or workspace), workspace
        else:
            cwd = Path(cwd).resolve() if cwd else workspace
            if not _under(str(cwd), str(workspace)):
                raise ValueError(f"cwd {cwd} is outside the workspace {workspace}")
            sandbox_cwd = cwd
        cell = self._cells.serving(workspace) if self._cells is not None else None
        if (
            cell is not None
            and not binds
            and not limits.network
            and self._cell_fits(cell, workspace, read_only, path_prepend)
        ):
            env_ = self._env(workspace, env, path_prepend)
            res = self._cells.run(cell, list(argv), workspace, Path(cwd), env_, limits, stdin)
            if res is not None:
                return res
            if self._is_cancelled(str(workspace)):
                return CommandResult(
                    argv=tuple(argv), returncode=-9, stderr=CANCELLED, timed_out=True, sandboxed=True
                )
        # Commands of one candidate share a uid: in a cell, the cell's (leased for its slot).
        key = str(cell.slot) if cell is not None else str(workspace)
        lease = (
            _slots().acquire(key) if self._sandbox_uid_wanted(workspace, read_only, path_prepend) else None
        )
        try:
            return self._run(
                argv, workspace, cwd, sandbox_cwd, env, limits, stdin, read_only, path_prepend, binds, lease
            )
        finally:
            if lease is not None:
                # Under bubblewrap the PID namespace already took every process of the run with it.
                lease.release(lambda: _reclaim(workspace), kill=self.bwrap is None)

    def _run(
        self,
        argv: Sequence[str],
        workspace: Path,
        cwd: Path,
        sandbox_cwd: Path | str,
        env: Mapping[str, str] | None,
        limits: Limits,
        stdin: str | None,
        read_only: Sequence[Path],
        path_prepend: Sequence[str],
        binds: Mapping[str, str] | None,
        lease: _Lease | None,
    ) -> CommandResult:
        uid = lease.uid if lease is not None else None
        if uid is not None:
            hand_over(workspace, uid)
        full = self._argv(argv, workspace, sandbox_cwd, limits, read_only, path_prepend, binds, uid)
        run_env = self._env(workspace, env, path_prepend)
        marker = uuid.uuid4().hex
        if not self.bwrap:
            run_env[RUN_MARKER] = marker
        # The privileged route starts bwrap as root and setpriv drops inside; the others drop before exec.
        user = uid if uid is not None and self.route != "privileged" else None
        preexec: Callable[[], None] | None = _limiter(
            limits, no_new_privs=user is not None and not self.bwrap
        )
        prlimit = _prlimit() if self.is_root and user is None and self.bwrap else None
        if prlimit is not None:
            # The same rlimits set by util-linux's prlimit in front of bwrap instead of a preexec function: without
            # one, subprocess can vfork, which saves a copy of the trainer's page tables on every command (~5-10 ms
            # in a process of a few hundred MB). Root only: it may raise any limit, so prlimit cannot fail.
            full = [*_prlimit_argv(prlimit, limits), *full]
            preexec = None

        start = time.monotonic()
        seccomp = _with_seccomp(full) if self.bwrap else None
        try:
            proc = subprocess.Popen(
                full,
                pass_fds=(seccomp,) if seccomp is not None else (),
                cwd=cwd,
                env=run_env,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=preexec,
                user=user,
                group=user,
                extra_groups=[] if user is not None else None,
            )
        except OSError as e:  # the program does not exist, is not executable, ...
            return CommandResult(
                argv=tuple(argv),
                returncode=127,
                stderr=f"cannot run {argv[0]!r}: {e}",
                duration=time.monotonic() - start,
                sandboxed=self.bwrap is not None,
            )
        finally:
            if seccomp is not None:
                os.close(seccomp)
        key = str(workspace)
        with self._running_lock:
            self._running.setdefault(key, {})[proc.pid] = marker
        if self._is_cancelled(key):  # `cancel` ran while this command started
            self._kill(proc.pid, marker)
        timed_out = pumped = False
        try:
            out, err, dropped, timed_out = _pump(
                proc,
                stdin.encode() if stdin is not None else None,
                start + limits.timeout,
                lambda: self._kill(proc.pid, marker),
            )
            pumped = True
        finally:
            try:
                if pumped and not timed_out:
                    # A program may close its pipes just before it exits (GNU tools do, at exit): it is waited for
                    # until its deadline, so its own exit status is reported rather than the SIGKILL meant for its
                    # leftovers; one that closed them and runs on is cut there, as a timeout. (Not after an
                    # exception, an interrupt of the caller: the command is killed at once.)
                    timed_out = not _exited_by(proc, start + limits.timeout)
            finally:  # a second interrupt during that wait still kills the command
                with self._running_lock:  # before the wait: once reaped, its pid may be another process's
                    runs = self._running.get(key, {})
                    runs.pop(proc.pid, None)
                    if not runs:
                        self._running.pop(key, None)
                self._kill(proc.pid, marker)  # stragglers a command left behind (daemonised children)
                proc.wait()
        stdout, t1 = truncate_output(out, dropped[0])
        stderr, t2 = truncate_output(err, dropped[1])
        if self._is_cancelled(key):  # killed by `cancel`: the caller's doing, not the command's
            timed_out, stderr = True, (stderr + "\n" if stderr else "") + CANCELLED
        return CommandResult(
            argv=tuple(argv),
            returncode=proc.returncode,
            stdout=stdout,
            stderr=stderr,
            duration=time.monotonic() - start,
            timed_out=timed_out,
            truncated=t1 or t2,
            sandboxed=self.bwrap is not None,
        )

    def _kill(self, pgid: int, marker: str) -> None:
        _kill_group(pgid)
        if not self.bwrap:
            kill_marked(marker)

    @property
    def can_spawn(self) -> bool:
        """Whether `spawn` can start a long-lived sandboxed process (needs bubblewrap: its PID namespace)."""
        return self.bwrap is not None

    def spawn(
        self,
        argv: Sequence[str],
        *,
        workspace: Path,
        limits: Limits,
        env: Mapping[str, str] | None = None,
        read_only: Sequence[Path] = (),
        path_prepend: Sequence[str] = (),
        hand_over_folder: bool = True,
    ) -> Spawned:
        """Start `argv` as a long-lived process in a sandbox of its own (the same file system, namespaces, uid and
        rlimits as `run`; `limits.timeout` is not applied: the caller owns the process and bounds what it asks of
        it). `workspace` is the process's only writable folder, created empty by the caller and removed by
        `Spawned.close`. Pipes on stdin and stdout; stderr is discarded. For servers that hold a warm tool and
        fork a child per job (the equivalence stage's Yosys): each job's limits are theirs to set.
        `hand_over_folder=False`: the folder is already set up for the uid leased for it (a second server of a warm
        cell in a slot that holds a candidate's workspace) and is not touched."""
        if not self.bwrap:
            raise RuntimeError("spawn needs bubblewrap (a PID namespace of its own)")
        workspace = Path(workspace).resolve()
        lease = (
            _slots().acquire(str(workspace))
            if self._sandbox_uid_wanted(workspace, read_only, path_prepend)
            else None
        )
        try:
            uid = lease.uid if lease is not None else None
            if uid is not None and hand_over_folder:
                hand_over(workspace, uid)
            full = self._argv(argv, workspace, workspace, limits, read_only, path_prepend, None, uid)
            # POSIX message queues visible (and so removable) at /dev/mqueue: a long-lived sandbox's IPC namespace
            # outlives each job, so its server must be able to see what a job left there.
            at = full.index("--remount-ro")
            full[at:at] = ["--mqueue", "/dev/mqueue"]
            user = uid if uid is not None and self.route != "privileged" else None
            preexec: Callable[[], None] | None = _limiter(limits)
            prlimit = _prlimit() if self.is_root and user is None else None
            if prlimit is not None:
                full, preexec = [*_prlimit_argv(prlimit, limits), *full], None
            seccomp = _with_seccomp(full)
            kwargs = dict(
                pass_fds=(seccomp,) if seccomp is not None else (),
                cwd=workspace,
                env=self._env(workspace, env),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=preexec,
                user=user,
                group=user,
                extra_groups=[] if user is not None else None,
            )
            # bwrap's --die-with-parent ties the sandbox to the thread that forks it: fork from a thread that
            # lives as long as this process, not from a stage's short-lived one.
            try:
                proc = _spawner().call(lambda: subprocess.Popen(full, **kwargs))
            finally:
                if seccomp is not None:
                    os.close(seccomp)
        except BaseException:
            if lease is not None:
                lease.release(lambda: _reclaim(workspace), kill=True)
            raise
        return Spawned(proc, workspace, lease)


class Spawned:
    """A process started by `LocalExecutor.spawn`. `close` kills it and everything in its sandbox, returns its
    uid and removes its folder; safe to call twice."""

    def __init__(self, proc: subprocess.Popen, workspace: Path, lease: _Lease | None) -> None:
        self.proc, self.workspace, self._lease = proc, workspace, lease
        self._closed = False
        self._lock = threading.Lock()

    @property
    def uid(self) -> int | None:
        """The sandbox uid the process runs as (None: the caller's own)."""
        return self._lease.uid if self._lease is not None else None

    def kill(self) -> None:
        """Kill the process and its sandbox now, leaving its pipes open (another thread may be reading them: a
        pipe closed under a reader lets its descriptor number be reused by the next one opened). `close` after."""
        _kill_group(self.proc.pid)

    def close(self, remove: bool = True) -> None:
        """`remove=False` keeps the folder (a warm cell's slot that still holds a candidate's workspace)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        _kill_group(self.proc.pid)
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError, ValueError):
                if f is not None:
                    f.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        if self._lease is not None:
            self._lease.release(lambda: _reclaim(self.workspace), kill=True)
        if remove:
            remove_workspace(self.workspace)


class _Spawner:
    """One daemon thread that forks long-lived sandboxes (see `LocalExecutor.spawn`)."""

    def __init__(self) -> None:
        import queue

        self._jobs: queue.Queue = queue.Queue()
        threading.Thread(target=self._loop, name="rtlreward-spawner", daemon=True).start()

    def _loop(self) -> None:
        while True:
            fn, box, done = self._jobs.get()
            try:
                box.append((True, fn()))
            except BaseException as e:  # handed back to the caller
                box.append((False, e))
            done.set()

    def call(self, fn: Callable[[], subprocess.Popen]) -> subprocess.Popen:
        box: list = []
        done = threading.Event()
        self._jobs.put((fn, box, done))
        done.wait()
        ok, value = box[0]
        if not ok:
            raise value
        return value


_SPAWNER: tuple[int, _Spawner] | None = None


def _spawner() -> _Spawner:
    """This process's spawner thread (a forked child has none of its parent's threads: it starts its own)."""
    global _SPAWNER
    with _SLOTS_LOCK:
        if _SPAWNER is None or _SPAWNER[0] != os.getpid():
            _SPAWNER = (os.getpid(), _Spawner())
        return _SPAWNER[1]


class _Tree:
    """The sandbox's mounts, emitted parents first (a mount at /a/b must follow the one at /a)."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, list[str]]] = []  # (sandbox path, bwrap arguments)
        self.content: list[str] = []  # sandbox paths showing the host's folder of the same path
        self.masks: list[str] = []  # sandbox paths covered by something else (tmpfs, /dev, /proc)
        self.made: set[str] = {"/"}

    def visible(self, path: str) -> bool:
        """Whether `path` already shows the host's content at the same path (nothing to bind)."""
        best = max((c for c in self.content if _under(path, c)), key=len, default=None)
        if best is None:
            return False
        return not any(_under(path, m) and len(m) > len(best) for m in self.masks)

    def _exists(self, path: str) -> bool:
        return path in self.made or (self.visible(path) and os.path.isdir(path))

    def bind(self, source: str, dest: str, *, content: bool, writable: bool = False) -> None:
        self.ops.append((dest, ["--bind" if writable else "--ro-bind", source, dest]))
        self.made.add(dest)
        if content and source == dest:
            self.content.append(dest)
        else:
            self.masks.append(dest)

    def symlink(self, target: str, dest: str) -> None:
        self.ops.append((dest, ["--symlink", target, dest]))
        self.made.add(dest)

    def special(self, args: list[str], dest: str) -> None:
        self.ops.append((dest, args))
        self.made.add(dest)
        self.masks.append(dest)

    def parents(self, dest: str) -> list[str]:
        """`--dir` (0755) for the missing parent folders of `dest`: bwrap would create them with the host
        folder's mode (0700 for /root), leaving the bound path unreachable for the sandbox uid."""
        out: list[str] = []
        parts = Path(dest).parts[1:-1]
        for i in range(len(parts)):
            p = "/" + "/".join(parts[: i + 1])
            if not self._exists(p):
                out += ["--perms", "0755", "--dir", p]
                self.made.add(p)
        return out

    def args(self) -> list[str]:
        ordered = sorted(self.ops, key=lambda op: len(Path(op[0]).parts))
        saved = self.made
        self.made = {"/"}
        out: list[str] = []
        for dest, args in ordered:
            out += self.parents(dest)
            out += args
            self.made.add(dest)
        self.made |= saved
        return out


# -- the sandbox uid ---------------------------------------------------------------------------------------------


def hand_over(workspace: Path, uid: int) -> None:
    """Give the workspace tree to the sandbox uid (and its group) before a run.

    The tree may hold what an earlier command of the candidate left: symlinks are never followed (every entry is
    opened O_NOFOLLOW relative to its already-open folder and changed through that descriptor), and a root-owned
    file with more than one link is left alone (it could be a hard link to a host file). A root-owned entry with
    no write bit at all is the trainer's way to freeze it for the run (a harness folder): it stays root's, so the
    command can neither write it nor chmod it back (the owner could). The workspace folder itself becomes
    root:<uid> 01770, not the uid's: writable through the group, but the uid cannot rename it away (from a sticky
    /tmp) and plant a symlink where the trainer, as root, will write next, and (sticky) cannot move or delete a
    root-owned entry in it. Deeper down, a frozen entry's name in a folder the uid owns can still be moved."""
    sandbox = set(_sandbox_uids())
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    stack: list[tuple[int, Iterator[str]]] = []

    def enter(dfd: int, owner: int = uid, mode: int | None = None) -> None:
        """Take the folder (already open, so it is the one checked) and queue its entries."""
        try:
            st = os.fstat(dfd)
            if mode is None and _frozen(st):
                pass
            elif (st.st_uid, st.st_gid) != (owner, uid):
                os.fchown(dfd, owner, uid)
            if mode is not None and stat.S_IMODE(st.st_mode) != mode:
                os.fchmod(dfd, mode)
            with os.scandir(dfd) as it:
                names = [e.name for e in it]
        except OSError:
            names = []
        stack.append((dfd, iter(names)))

    enter(os.open(workspace, flags), owner=0, mode=0o1770)  # see the docstring
    while stack:  # depth first, one open folder per level (a wide tree does not exhaust descriptors)
        dfd, names = stack[-1]
        name = next(names, None)
        if name is None:
            os.close(dfd)
            stack.pop()
            continue
        try:
            enter(os.open(name, flags, dir_fd=dfd))
            continue
        except OSError as e:
            if e.errno not in (errno.ENOTDIR, errno.ELOOP):
                continue  # vanished meanwhile, or out of descriptors: left as it is
        try:
            fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if stat.S_ISLNK(st.st_mode) or (st.st_uid, st.st_gid) == (uid, uid):
                continue
            if (st.st_nlink > 1 and st.st_uid not in sandbox) or _frozen(st):
                continue
            os.chown(f"/proc/self/fd/{fd}", uid, uid)  # the inode checked above, whatever the name is now
        except OSError:
            pass
        finally:
            os.close(fd)


def _frozen(st: os.stat_result) -> bool:
    return st.st_uid == 0 and not st.st_mode & 0o222


def _reclaim(workspace: Path) -> None:
    """After the lease's last run: the workspace root back to root:root 0700, so whoever gets this uid next cannot
    enter it (the files inside stay the uid's; the folder is the only way in)."""
    with contextlib.suppress(OSError):
        os.chown(workspace, 0, 0, follow_symlinks=False)
        os.chmod(workspace, 0o700, follow_symlinks=False)


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid`: `kill(-1)` as that uid signals exactly them, under the task-list lock, so a
    fork racing the call cannot escape it. Spawned through setpriv when it exists (subprocess can then vfork
    instead of copying a large trainer's page tables)."""
    setpriv = _setpriv()
    if setpriv is not None:
        argv = [
            setpriv,
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--",
            "/bin/sh",
            "-c",
            _KILL_ALL,
        ]
        kw: dict = {}
    else:
        argv = ["/bin/sh", "-c", _KILL_ALL]
        kw = {"user": uid, "group": uid, "extra_groups": []}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            argv,
            cwd="/",
            env={"PATH": BASE_PATH},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            **kw,
        )


_KILL_ALL = "kill -9 -1 2>/dev/null; exit 0"


class _Lease:
    """One run's hold on a sandbox uid (shared by concurrent runs in the same workspace)."""

    def __init__(self, pool: _SlotPool, uid: int, fd: int) -> None:
        self.pool, self.uid, self.fd = pool, uid, fd

    def release(self, on_last: Callable[[], None], kill: bool = True) -> None:
        with self.pool.meta():
            try:
                try:
                    fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return  # another run in this workspace still holds the uid
                if kill:
                    _kill_uid(self.uid)
                on_last()
                self.pool.set_owner(self.uid, "")
            finally:
                os.close(self.fd)


class _SlotPool:
    """Leases of sandbox uids across every process on this machine: `<uid>.lock` is held shared by the runs
    using the uid, `<uid>.owner` names their workspace, and `meta.lock` serialises taking and returning.
    `ws-<hash of the workspace>` holds the uid last leased for a workspace, so finding the uid of a workspace
    reads two files instead of every uid's owner (a hint only: the owner file decides)."""

    def __init__(self, uids: Sequence[int], state_dir: str) -> None:
        self.uids = list(uids)
        self._known = frozenset(self.uids)
        self.dir = state_dir

    @contextlib.contextmanager
    def meta(self) -> Iterator[None]:
        fd = os.open(os.path.join(self.dir, "meta.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def owner(self, uid: int) -> str:
        try:
            with open(os.path.join(self.dir, f"{uid}.owner")) as fh:
                return fh.read()
        except OSError:
            return ""

    def _index(self, workspace: str) -> str:
        digest = hashlib.sha256(workspace.encode("utf-8", "surrogateescape")).hexdigest()[:32]
        return os.path.join(self.dir, f"ws-{digest}")

    def leased(self, workspace: str) -> int | None:
        """The uid leased for `workspace` now, if any (call under meta.lock)."""
        try:
            with open(self._index(workspace)) as fh:
                uid = int(fh.read().strip() or -1)
        except (OSError, ValueError):
            return None
        return uid if uid in self._known and self.owner(uid) == workspace else None

    def set_owner(self, uid: int, workspace: str) -> None:
        before = self.owner(uid)
        if before and before != workspace:
            with contextlib.suppress(OSError):
                os.unlink(self._index(before))
        if workspace:
            tmp = os.path.join(self.dir, f".ws-{uid}.tmp")
            with open(tmp, "w") as fh:
                fh.write(str(uid))
            os.replace(tmp, self._index(workspace))
        fd = os.open(
            os.path.join(self.dir, f"{uid}.owner"),
            os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
            0o600,
        )
        with os.fdopen(fd, "w") as fh:
            fh.write(workspace)

    def acquire(self, workspace: str) -> _Lease:
        while True:
            with self.meta():
                lease = self._take(workspace)
            if lease is not None:
                return lease
            time.sleep(0.05)  # every uid is busy: wait for one

    def _take(self, workspace: str) -> _Lease | None:
        # The uid already leased for this workspace comes first, whatever its place in the pool: a concurrent run
        # in the same workspace (another stage of the candidate) must share it. Taking a free uid instead would
        # hand the workspace to a second uid, and whichever lease ended first would lock the other run out of it.
        uid_of = self.leased(workspace)
        mine = [uid_of] if uid_of is not None else []
        order = [*mine, *(u for u in self.uids if u != uid_of)]
        for uid in order:
            fd = os.open(os.path.join(self.dir, f"{uid}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if self.owner(uid) == workspace:  # join the runs already in this workspace
                    with contextlib.suppress(BlockingIOError):
                        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                        return _Lease(self, uid, fd)
                os.close(fd)
                continue
            if self.owner(uid):  # its last holder died without returning it: clear what it left running
                _kill_uid(uid)
            self.set_owner(uid, workspace)
            fcntl.flock(fd, fcntl.LOCK_SH)  # downgrade; safe, every lock change happens under meta.lock
            return _Lease(self, uid, fd)
        return None


_SLOTS: _SlotPool | None = None
_SLOTS_LOCK = threading.Lock()


def _slots() -> _SlotPool:
    global _SLOTS
    with _SLOTS_LOCK:
        if _SLOTS is None:
            _SLOTS = _SlotPool(_sandbox_uids(), _state_dir())
        return _SLOTS


def _state_dir() -> str:
    d = os.environ.get(STATE_DIR_VAR) or (
        "/run/rtlreward-sandbox"
        if os.access("/run", os.W_OK)
        else os.path.join(tempfile.gettempdir(), "rtlreward-sandbox-root")
    )
    with contextlib.suppress(FileExistsError):
        os.mkdir(d, 0o700)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise RuntimeError(
            f"{d} holds the sandbox uid leases and must be a folder owned by root, writable only by root: "
            f"remove it, or point {STATE_DIR_VAR} at such a folder"
        )
    return d


@functools.cache
def _sandbox_uids() -> tuple[int, ...]:
    """The uid range for sandboxed runs, minus every id the system already uses (accounts, groups, the
    subordinate ranges of rootless containers)."""
    base = int(os.environ.get(UID_BASE_VAR) or DEFAULT_UID_BASE)
    count = int(os.environ.get(UID_COUNT_VAR) or DEFAULT_UID_COUNT)
    if base < 1000 or count < 1:
        raise ValueError(f"{UID_BASE_VAR} must be >= 1000 and {UID_COUNT_VAR} >= 1")
    taken: set[int] = set()
    ranges: list[tuple[int, int]] = []
    for path in ("/etc/passwd", "/etc/group"):
        with contextlib.suppress(OSError):
            for line in Path(path).read_text().splitlines():
                fields = line.split(":")
                if len(fields) > 2 and fields[2].isdigit():
                    taken.add(int(fields[2]))
    for path in ("/etc/subuid", "/etc/subgid"):
        with contextlib.suppress(OSError):
            for line in Path(path).read_text().splitlines():
                fields = line.split(":")
                if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
                    ranges.append((int(fields[1]), int(fields[1]) + int(fields[2])))
    uids = tuple(
        u for u in range(base, base + count) if u not in taken and not any(lo <= u < hi for lo, hi in ranges)
    )
    if not uids:
        raise RuntimeError(f"no unused uid in [{base}, {base + count}): set {UID_BASE_VAR} to a free range")
    return uids


def _unreachable(paths: Sequence[str]) -> str | None:
    """The first path an unrelated unprivileged user cannot reach (by permission bits: every folder on the way
    searchable by others, the path itself readable), or None. Both the given and the resolved path count."""
    for p in paths:
        for q in dict.fromkeys([os.path.abspath(p), os.path.realpath(p)]):
            parts = Path(q).parts
            for i in range(1, len(parts)):
                folder = os.path.join(*parts[:i])
                try:
                    st = os.stat(folder)
                except OSError:
                    return folder
                if not st.st_mode & stat.S_IXOTH:
                    return folder
            try:
                st = os.stat(q)
            except OSError:
                continue  # a missing path is not bound either
            need = stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else stat.S_IROTH
            if not st.st_mode & need:
                return q
    return None


def _system_tool(name: str) -> str | None:
    """`name` from the system's own folders only (never a PATH entry the caller or a candidate could plant)."""
    found = shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")
    return (
        found
        if found and any(_under(os.path.realpath(found), d) for d in ("/usr", "/bin", "/sbin"))
        else None
    )


def _setpriv() -> str | None:
    return _system_tool("setpriv")


def _setpriv_argv(setpriv: str | None, uid: int) -> list[str]:
    if setpriv is None:
        raise RuntimeError("setpriv (util-linux) is missing: install util-linux")
    return [
        setpriv,
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
    ]


@functools.cache
def _prctl() -> Callable[..., int]:
    return ctypes.CDLL(None, use_errno=True).prctl


@functools.cache
def _prlimit() -> str | None:
    return _system_tool("prlimit")


def _prlimit_argv(prlimit: str, limits: Limits) -> list[str]:
    """What `_limiter` sets, as a prlimit command line (soft = hard)."""
    argv = [prlimit]
    if limits.memory_mb:
        n = limits.memory_mb * 1024 * 1024
        argv.append(f"--as={n}:{n}")
    if limits.file_size_mb:
        n = limits.file_size_mb * 1024 * 1024
        argv.append(f"--fsize={n}:{n}")
    if limits.pids:
        argv.append(f"--nproc={limits.pids}:{limits.pids}")
    return [*argv, "--core=0:0", "--"]


def _limiter(limits: Limits, no_new_privs: bool = False):
    """The preexec function: rlimits in the child, inherited by bwrap and everything it starts."""
    mem = limits.memory_mb * 1024 * 1024 if limits.memory_mb else None
    fsize = limits.file_size_mb * 1024 * 1024 if limits.file_size_mb else None
    pids = limits.pids
    prctl = _prctl() if no_new_privs else None

    def preexec() -> None:
        if mem:
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        if fsize:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        if pids:  # holds for the sandbox uid (setpriv keeps it); the kernel ignores it for root
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NPROC, (pids, pids))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if prctl is not None:
            prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: a setuid file the candidate left cannot lift it

    return preexec


def _exited_by(proc: subprocess.Popen, deadline: float) -> bool:
    """Wait until the command exits or its deadline passes; True when it exited. Woken by the exit itself (a pidfd),
    not by `Popen.wait`'s polling, whose growing sleeps cost a command that closes its pipes just before it exits
    (every GNU tool, every bubblewrap sandbox) up to milliseconds each."""
    if proc.poll() is not None:
        return True
    try:
        fd = os.pidfd_open(proc.pid)  # not reaped yet (poll above), so the pid is still this command's
    except OSError:  # a kernel without pidfds
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        while proc.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            select.select([fd], [], [], left)
        return True
    finally:
        os.close(fd)


def _pump(
    proc: subprocess.Popen, stdin: bytes | None, deadline: float, kill
) -> tuple[bytes, bytes, list[int], bool]:
    """Feed stdin, read both pipes until EOF, keep at most MAX_OUTPUT_BYTES of each, enforce the deadline.

    `communicate()` would buffer everything a command prints; a hostile simulation can print gigabytes.
    """
    sel = selectors.DefaultSelector()
    bufs = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    dropped = {proc.stdout: 0, proc.stderr: 0}
    for f in bufs:
        os.set_blocking(f.fileno(), False)
        sel.register(f, selectors.EVENT_READ)
    view = memoryview(stdin) if stdin else None
    if proc.stdin is not None:
        if view is None:
            proc.stdin.close()
        else:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin, selectors.EVENT_WRITE)
    timed_out = False
    ended_at: float | None = None
    while sel.get_map():
        now = time.monotonic()
        if ended_at is None and proc.poll() is not None:
            ended_at = now
            kill()  # the command is done; whatever it left behind goes now so the pipes close
        if ended_at is None and now >= deadline:
            timed_out = True
            kill()
            ended_at = now
        if ended_at is not None and now >= ended_at + _DRAIN_GRACE:
            break
        limit = deadline if ended_at is None else ended_at + _DRAIN_GRACE
        for key, _ in sel.select(timeout=max(0.0, min(limit - now, 0.05))):
            f = key.fileobj
            if f is proc.stdin:
                try:
                    n = os.write(f.fileno(), view[:65536])
                    view = view[n:]
                except (BrokenPipeError, OSError):
                    view = view[:0]
                if not view:
                    sel.unregister(f)
                    f.close()
                continue
            try:
                chunk = os.read(f.fileno(), 65536)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                sel.unregister(f)
                continue
            dropped[f] += keep_output(bufs[f], chunk, MAX_OUTPUT_BYTES)
    sel.close()
    for f in (proc.stdout, proc.stderr, proc.stdin):
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()
    return (
        bytes(bufs[proc.stdout]),
        bytes(bufs[proc.stderr]),
        [dropped[proc.stdout], dropped[proc.stderr]],
        timed_out,
    )


def _with_seccomp(full: list[str]) -> int | None:
    """Add bubblewrap's `--seccomp FD` (rtlreward.sandbox.seccomp: no kernel keys) to a bwrap command line, in
    place; returns the descriptor to pass to the child (the caller closes it), None where there is no filter."""
    fd = open_filter()
    if fd is not None:
        at = full.index("--chdir")  # bubblewrap's own options end with --chdir DIR -- COMMAND
        full[at:at] = ["--seccomp", str(fd)]
    return fd


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def kill_marked(marker: str) -> int:
    """Kill every process whose environment carries RUN_MARKER=marker (daemons that left the process group)."""
    needle = f"{RUN_MARKER}={marker}".encode()
    killed = 0
    for _ in range(3):  # a fork racing the scan is caught by the next pass
        found = 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as fh:
                    if needle not in fh.read().split(b"\0"):
                        continue
                os.kill(int(entry.name), signal.SIGKILL)
                found += 1
            except (OSError, ValueError):
                continue
        killed += found
        if not found:
            break
    return killed


def _make_writable(path: str) -> None:
    """Add the owner's rwx to `path` itself, never to what it points to: a command may have left a symlink to a
    host file (/dev/null, /etc/...) where a locked folder was, and chmod follows links. The inode is pinned with
    O_PATH|O_NOFOLLOW and changed through /proc/self/fd, so a swap between the check and the chmod changes
    nothing outside."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
            os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_workspace(path: Path) -> None:
    """Delete a workspace even when the command inside chmod-ed folders to 000 (a non-root parent could not)."""

    def onerror(func, p, _exc):  # make the parent folder and the entry writable, then retry once
        for q in (os.path.dirname(p), p):
            _make_writable(q)
        with contextlib.suppress(FileNotFoundError):
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, onerror=lambda *a: None)
            else:
                os.unlink(p)

    shutil.rmtree(path, onerror=onerror)


TEMP_ROOTS = ("/tmp", "/var/tmp", "/run", "/dev/shm")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _python() -> str:
    return sys.executable


def _interpreter_paths() -> list[str]:
    """What the sandbox needs of the interpreter: its prefixes, the sys.path entries from the standard library on
    (site-packages and what .pth files add), and rtlreward's and its plugins' package folders. Entries before the
    standard library (the script's folder, PYTHONPATH, pytest's rootdir) are the caller's, not the interpreter's,
    and stay out: they are where a project's tests and data live."""
    prefixes = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        os.path.dirname(sys.executable),
    }
    paths = {p for p in prefixes if p not in TEMP_ROOTS}
    real_prefixes = [os.path.realpath(p) for p in prefixes]
    entries = [p for p in sys.path if p and os.path.exists(p)]
    # The standard library marks where the interpreter's own entries begin. Not "the first entry under a prefix":
    # a package may put its own folder first (Ray adds site-packages/ray/thirdparty_files at sys.path[0] when it is
    # imported), and everything between it and the standard library (the caller's cwd, pytest's rootdir) would
    # come into the sandbox with it.
    stdlib = {
        os.path.realpath(p) for p in (sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")) if p
    }
    start = next((i for i, p in enumerate(entries) if os.path.realpath(p) in stdlib), None)
    if start is None:
        start = next(
            (i for i, p in enumerate(entries) if any(_under(os.path.realpath(p), q) for q in real_prefixes)),
            len(entries),
        )
    for p in entries[start:]:
        rp = os.path.realpath(p)
        # A script run from /tmp puts its folder on sys.path: binding that back would lay the host's /tmp over the
        # sandbox's private one (read-only, and showing other runs' files). Only packages come back from there.
        in_temp = any(_under(rp, t) for t in TEMP_ROOTS)
        if in_temp and not any(_under(rp, q) for q in real_prefixes) and "-packages" not in rp:
            continue
        paths.add(p)
    paths.update(_collapse(_package_roots()))
    # Drop entries already covered by a shorter one (by real path; the given path is bound too when it differs).
    out: list[str] = []
    for p in sorted(paths, key=lambda q: len(os.path.realpath(q))):
        if not any(_under(os.path.realpath(p), os.path.realpath(q)) for q in out) or p != os.path.realpath(p):
            out.append(p)
    return out


def _collapse(dirs: Sequence[str]) -> list[str]:
    """Sibling package folders as their parent when the parent holds nothing but packages (plugins/): one mount
    instead of twenty, and still only code."""
    by_parent: dict[str, set[str]] = {}
    for d in dirs:
        by_parent.setdefault(os.path.dirname(d), set()).add(d)
    out: list[str] = []
    for parent, members in by_parent.items():
        only_code = len(members) > 1
        if only_code:
            try:
                with os.scandir(parent) as it:
                    entries = [(e.path, e.name, e.is_dir(follow_symlinks=False)) for e in it]
            except OSError:
                entries = [("", "", False)]
            only_code = all(
                path in members
                or (is_dir and (name == "__pycache__" or os.path.isfile(f"{path}/__init__.py")))
                for path, name, is_dir in entries
            )
        out += [parent] if only_code else sorted(members)
    return out


@functools.cache
def _package_roots() -> tuple[str, ...]:
    """The folders (or module files) of rtlreward, cvdp_adapter and every plugin's top-level package. An editable
    install is reached through an import hook, not sys.path, so they must be named to come into the sandbox; the
    packages themselves, not the checkout holding them, so the project's tests, data and .git stay out."""
    import importlib.metadata
    import importlib.util

    names = {"rtlreward"}  # and every package an entry point of the group names (cvdp_adapter among them)
    with contextlib.suppress(Exception):
        names.update(
            ep.value.split(":")[0].split(".")[0] for ep in importlib.metadata.entry_points(group="rtlreward")
        )
    roots: list[str] = []
    for name in sorted(names):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        locations = list(spec.submodule_search_locations or ())
        if not locations and spec.origin and os.path.isfile(spec.origin):
            locations = [spec.origin]
        roots += [os.path.realpath(loc) for loc in locations]
    return tuple(dict.fromkeys(r for r in roots if r not in ("/", *TEMP_ROOTS)))


def _warn_once(key: str, message: str) -> None:
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(message, stacklevel=3)


def _warn_no_bwrap() -> None:
    global _warned_no_bwrap
    if _warned_no_bwrap:
        return
    _warned_no_bwrap = True
    warnings.warn(
        "bubblewrap (bwrap) is not usable here: commands run WITHOUT file-system or network isolation "
        "(time, memory, file-size and process limits still apply). Install it with `apt-get install bubblewrap`, "
        "or use the docker executor (`rtlreward sandbox build-image`).",
        stacklevel=3,
    )


TMP_SIZE_MB = 512  # the private /tmp of a bubblewrap sandbox


def _system_tree() -> _Tree:
    """The part of the sandbox every command gets: system folders read-only, new /dev and /proc, private /tmp."""
    tree = _Tree()
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            tree.symlink(os.readlink(d), d)
        elif os.path.isdir(d):
            tree.bind(d, d, content=True)
    tree.special(["--dev", "/dev"], "/dev")
    tree.special(["--proc", "/proc"], "/proc")
    # /tmp lives in RAM and RLIMIT_AS does not count it: cap it like the docker executor's.
    tree.special(["--perms", "1777", "--size", str(TMP_SIZE_MB << 20), "--tmpfs", "/tmp"], "/tmp")
    return tree


_ROUTES: dict[tuple[str, bool], Route | None] = {}


def _bwrap_route(bwrap: str, drop: bool) -> Route | None:
    """How bubblewrap can run here, probed once: "privileged" (root: bwrap mounts as root, setpriv drops to the
    sandbox uid inside), "userns" (an unprivileged user namespace), or None (refused: some containers forbid
    both)."""
    key = (bwrap, drop)
    if key not in _ROUTES:
        if os.geteuid() == 0:
            setpriv = _setpriv() if drop else None
            if (not drop or setpriv) and _probe(bwrap, "privileged", setpriv, None):
                _ROUTES[key] = "privileged"
            elif _probe(bwrap, "userns", None, PROBE_UID if drop else None):
                _ROUTES[key] = "userns"
            else:
                _ROUTES[key] = None
        else:
            _ROUTES[key] = "userns" if _probe(bwrap, "userns", None, None) else None
    return _ROUTES[key]


def _probe(bwrap: str, route: Route, setpriv: str | None, user: int | None) -> bool:
    argv = [
        bwrap,
        *_system_tree().args(),
        "--remount-ro",
        "/",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-net",
    ]
    argv += ["--unshare-uts", "--die-with-parent", "--cap-drop", "ALL"]
    if route == "userns":
        argv.append("--unshare-user")
    tail = ["true"]
    if setpriv is not None:
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
        tail = [*_setpriv_argv(setpriv, PROBE_UID), "true"]
    try:
        r = subprocess.run(
            [*argv, "--", *tail],
            capture_output=True,
            timeout=10,
            cwd="/",
            env={"PATH": BASE_PATH},
            user=user,
            group=user,
            extra_groups=[] if user is not None else None,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


def _bwrap_works(bwrap: str) -> bool:
    """bwrap can be installed yet refused by the kernel (no user namespaces in some containers)."""
    return _bwrap_route(bwrap, os.geteuid() == 0) is not None
