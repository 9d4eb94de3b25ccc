"""Warm sandbox cells for the local executor: one bubblewrap sandbox per worker, reused for its candidates' commands.

A small task's command (an `iverilog` of a few lines, a `vvp` of a few hundred cycles) takes a few milliseconds;
setting up its own bubblewrap sandbox (mount tree, namespaces, `setpriv`, `prlimit`) took about as long again, on
every command. A cell is that sandbox set up once: `LocalExecutor.spawn` starts `cell_server.py` in it (the same
file system, leased sandbox uid, namespaces, no network, no capabilities), and its only writable folder is the
cell's *slot*, in which the executor makes each candidate's workspace (`make_workspace`), so the workspace path is
the same inside and out and argv paths work unchanged. A command of that workspace is then a forked job of the
server (`cell_server.py` says what each job gets), and the candidate's files are never copied.

What keeps each command's guarantees (docs/security.md, "Warm cells"):
- one job at a time per server; a cell starts a second server (its own sandbox, PID namespace and /tmp, in the same
  slot) when a candidate runs two commands at once, and a command that finds every server busy runs in a sandbox
  of its own (same uid: the cell's lease is shared, as concurrent commands of one workspace always share one);
- each job's limits (address space, file size, processes, no core) set in its process before exec; its wall clock
  enforced by the server (the group killed at the limit) and by this side (the whole cell killed a little later);
- when a job ends, every other process in the server's PID namespace is killed and its /tmp, /dev/shm and
  /dev/mqueue are emptied, so nothing of one command (a daemon, a file in /tmp) reaches the next, as when each
  command's PID namespace and /tmp died with it; what the server cannot remove (System V IPC objects, sockets, a
  change to its own limits or scheduling) ends the cell (`cell_server.tidy`);
- the slot folder is root's (0755) and the workspace the only folder in it, handed to the uid before every job as
  before; between candidates the slot is emptied as root, and the cell only ever holds one candidate's workspace;
- anything unusual ends the cell: a server that dies (a job may kill it: same uid), stalls past the limit, answers
  garbage, or a cancelled workspace. The command then runs in a sandbox of its own (or reports the cancellation),
  and the worker's next candidate gets a new cell. A cell retires after `RETIRE_AFTER` candidates.
Commands a cell cannot serve as a sandbox of their own would (extra bind mounts, read-only folders or PATH entries
that change the mount tree, network) run in a sandbox of their own, as before. `RTLREWARD_WARM_SANDBOX=0` (or
`LocalExecutor(warm=False)`) turns cells off.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import select
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rtlreward.sandbox import MAX_OUTPUT_BYTES, CommandResult, Limits, truncate_output
from rtlreward.sandbox.naming import make_workspace, workspace_root

log = logging.getLogger(__name__)

SERVER = Path(__file__).with_name("cell_server.py")
WARM_VAR = "RTLREWARD_WARM_SANDBOX"
RETIRE_AFTER = 500  # candidates per cell at most
READY_WAIT = 15.0  # seconds for a new cell's server to start
ANSWER_GRACE = 5.0  # seconds past a job's limit (and the server's drain) before the whole cell is killed
MAX_ANSWER = 8 * MAX_OUTPUT_BYTES  # an answer line longer than this is garbage: the cell ends
MAX_LEARNED = 32  # read-only folders and PATH entries a cell learns to mount, at most
MAX_SERVERS = 2  # servers per cell: concurrent commands of one candidate served warm


def wanted(default: bool = True) -> bool:
    v = os.environ.get(WARM_VAR, "").strip().lower()
    if v in ("0", "false", "no", "off"):
        return False
    if v in ("1", "true", "yes", "on"):
        return True
    return default


class _Server:
    """One server process of a cell (its own PID namespace and /tmp); `job` runs one command in it."""

    def __init__(self, spawned: Any) -> None:
        self.spawned = spawned
        self.lock = threading.Lock()  # held while a job runs
        self.limits: dict[str, int | None] = {}  # its own hard limits (None: unlimited), from its hello
        self._buf = b""

    def _line(self, deadline: float) -> bytes | None:
        """The server's next line by `deadline`, or None (EOF, too long, too late)."""
        out = self.spawned.proc.stdout
        if out is None:
            return None
        fd = out.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or len(self._buf) > MAX_ANSWER:
                return None
            try:
                ready, _, _ = select.select([fd], [], [], left)
            except (OSError, ValueError):
                return None
            if not ready:
                continue
            try:
                chunk = os.read(fd, 1 << 20)
            except OSError:
                return None
            if not chunk:
                return None
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def ready(self) -> bool:
        line = self._line(time.monotonic() + READY_WAIT)
        try:
            hello = json.loads(line) if line else {}
        except ValueError:
            return False
        if not isinstance(hello, dict) or hello.get("ready") is not True:
            return False
        self.limits = {k: hello.get("limits", {}).get(k) for k in ("as", "fsize", "nproc")}
        return True

    def job(self, request: Mapping[str, Any], wait: float) -> dict | None:
        """Send one request, wait up to `wait` s for its answer. None on anything unusual (the pool ends the cell)."""
        stdin = self.spawned.proc.stdin
        try:
            stdin.write(json.dumps(request).encode() + b"\n")
            stdin.flush()
        except (OSError, ValueError, AttributeError):
            return None
        line = self._line(time.monotonic() + wait)
        try:
            answer = json.loads(line) if line else None
        except ValueError:
            answer = None
        return answer if isinstance(answer, dict) and "rc" in answer else None


class Cell:
    """One warm sandbox slot: its servers (a second one is started when a candidate runs two commands at once;
    each has its own PID namespace and /tmp, as two sandboxes of their own would), its slot folder, its uid."""

    def __init__(
        self,
        server: _Server,
        slot: Path,
        seen: tuple[tuple[str, ...], tuple[str, ...]],
        limits: Limits,
        version: int,
    ) -> None:
        self.servers = [server]
        self.slot = slot
        self.read_only, self.path_prepend = seen  # folders outside the workspace mounted in this cell
        self.spawn_limits = limits  # what its servers were started with (a second server gets the same)
        self.version = version  # of the pool's learned folders when the cell started
        self.uid: int | None = server.spawned.uid
        self.limits = server.limits
        self.workspace: Path | None = None  # the candidate's workspace while it is lent out
        self.served = 0
        self.dead = False
        self.growing = False  # a second server is being started

    def take(self) -> _Server | None:
        """An idle server, locked for one job; None when every server is busy."""
        for server in list(self.servers):
            if server.lock.acquire(blocking=False):
                return server
        return None

    def allows(self, wanted: Mapping[str, int | None]) -> bool:
        """Whether every job limit is at most the cell's own (a job can only lower what it inherits)."""
        for key, value in wanted.items():
            have = self.limits.get(key)
            if have is not None and (value is None or value > have):
                return False
        return True

    def close(self) -> None:
        """Kill the servers and everything in their sandboxes. A server running a job is only killed: the thread
        waiting for its answer sees the end of its pipe and closes it (`CellPool.run`); closing a pipe under a
        reader would let its descriptor number be reused. The slot folder stays (a candidate's workspace may still
        be in it, its remaining commands running in sandboxes of their own): the pool removes it."""
        self.dead = True
        for server in list(self.servers):
            server.spawned.kill()
            if server.lock.acquire(blocking=False):  # idle: closed now, and never lent again
                server.spawned.close(remove=False)

    @property
    def lent(self) -> bool:
        """Whether a candidate's workspace is in the slot."""
        return self.workspace is not None and self.workspace != self.slot and os.path.lexists(self.workspace)


class CellPool:
    """The local executor's cells: one per candidate being scored, up to `slots` x 2 + 2 (a candidate's reference
    being timed holds a second); beyond that a candidate gets a plain workspace (its commands run one sandbox
    each). `spawn(slot, read_only, path_prepend, limits, first) -> Spawned` starts a cell's server in `slot` with
    those mounted and those limits (`first`: the slot is new and handed to the uid; else it is not touched); `hand_over(path, uid)` gives a workspace to
    the cell's uid before each job."""

    def __init__(
        self,
        spawn: Callable[[Path, list[str], list[str], Limits, bool], Any],
        hand_over: Callable[[Path, int], None],
        remove: Callable[[Path], None],
        slots: int = 2,
    ) -> None:
        self._spawn, self._hand_over, self._remove = spawn, hand_over, remove
        self.slots = max(1, slots)
        self._cells: list[Cell] = []
        self._lock = threading.Lock()
        self._stats: dict[str, int] = {}
        # Read-only folders and PATH entries outside any workspace that commands asked for: mounted in every cell
        # started after they were learned (a command needing one a cell lacks runs in a sandbox of its own).
        self._read_only: list[str] = []
        self._path_prepend: list[str] = []
        # The limits new cells get (jobs inherit them, or lower them in a forked child): the highest asked for.
        self._limits = Limits(timeout=0.0)
        self._version = 0
        self._pid = os.getpid()

    def _forked(self) -> None:
        """In a forked child: forget the parent's cells (their servers answer the parent, on pipes it reads)."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._lock = threading.Lock()
            self._cells = []

    def _count(self, key: str) -> None:
        self._stats[key] = self._stats.get(key, 0) + 1

    def stats(self) -> dict[str, int]:
        """`warm` (commands run as a cell's job), `cells` (cells started), `ended: <why>`, `fallback`."""
        with self._lock:
            return dict(self._stats)

    def learn(self, read_only: list[str], path_prepend: list[str]) -> None:
        """Mount these (outside every workspace) in the cells started from now on; idle older cells are replaced."""
        with self._lock:
            ro = [p for p in read_only if p not in self._read_only]
            pp = [p for p in path_prepend if p not in self._path_prepend]
            if (
                not (ro or pp)
                or len(self._read_only) + len(self._path_prepend) + len(ro) + len(pp) > MAX_LEARNED
            ):
                return
            self._read_only += ro
            self._path_prepend += pp
            self._version += 1

    def _learn_limits(self, limits: Limits) -> None:
        with self._lock:
            cur = self._limits

            def top(a: int | None, b: int | None) -> int | None:
                return None if a is None or b is None else max(a, b)

            new = Limits(
                timeout=0.0,
                memory_mb=top(cur.memory_mb, limits.memory_mb),
                file_size_mb=top(cur.file_size_mb, limits.file_size_mb),
                pids=top(cur.pids, limits.pids),
            )
            if new != cur:
                self._limits = new
                self._version += 1

    def size(self, slots: int) -> None:
        with self._lock:
            self.slots = max(self.slots, int(slots))

    # -- workspaces ---------------------------------------------------------------------------------------------
    def make_workspace(self, task_id: str, root: str | os.PathLike[str] | None) -> Path:
        self._forked()
        cell = self._acquire(root)
        if cell is None:
            return make_workspace(task_id, root)
        try:
            ws = make_workspace(task_id, cell.slot)
        except Exception:
            self._end(cell, "its workspace could not be made")
            raise
        with self._lock:
            cell.workspace = Path(os.path.realpath(ws))
        return ws

    def _acquire(self, root: str | os.PathLike[str] | None) -> Cell | None:
        base = Path(os.path.realpath(workspace_root(root)))
        with self._lock:
            stale = [c for c in self._cells if c.workspace is None and (c.dead or c.version != self._version)]
            for cell in self._cells:
                if cell.workspace is None and cell not in stale and cell.slot.parent == base:
                    cell.workspace = cell.slot  # taken; the real workspace is set by the caller
                    cell.served += 1
                    break
            else:
                cell = None
            seen = (tuple(self._read_only), tuple(self._path_prepend))
            version, limits = self._version, self._limits
            full = len(self._cells) >= 2 * self.slots + 2
        for old in stale:
            self._end(old, "new mounts were learned")
        if cell is not None or full:
            return cell
        slot = make_workspace("cell", root)
        try:
            spawned = self._spawn(slot, list(seen[0]), list(seen[1]), limits, True)
        except Exception as exc:
            log.warning("could not start a warm sandbox cell (%s): commands run in a sandbox each", exc)
            self._remove(slot)
            return None
        server = _Server(spawned)
        if not server.ready():
            log.warning("a warm sandbox cell did not start: commands run in a sandbox each")
            spawned.close(remove=False)
            self._remove(slot)
            return None
        cell = Cell(server, Path(os.path.realpath(slot)), seen, limits, version)
        if cell.uid is not None:
            # The slot is root's: the uid reaches the workspace through it but cannot leave anything beside it.
            os.chown(cell.slot, 0, 0, follow_symlinks=False)
            os.chmod(cell.slot, 0o755, follow_symlinks=False)
        with self._lock:
            cell.workspace, cell.served = cell.slot, 1
            self._cells.append(cell)
            self._count("cells")
        return cell

    def serving(self, workspace: Path) -> Cell | None:
        """The cell lent to the candidate whose workspace holds `workspace` (resolved), if any."""
        self._forked()
        ws = str(workspace)
        with self._lock:
            for cell in self._cells:
                w = cell.workspace
                if w is not None and w != cell.slot and (ws == str(w) or ws.startswith(str(w) + os.sep)):
                    return None if cell.dead else cell
        return None

    def release_workspace(self, workspace: Path) -> None:
        self._forked()
        ws = Path(os.path.realpath(workspace))
        with self._lock:
            cell = next((c for c in self._cells if c.workspace == ws), None)
        if cell is None:
            return
        if os.path.lexists(ws):
            # The caller keeps it (RTLREWARD_KEEP_WORKSPACE) where it told the user it is: the cell ends and leaves
            # its slot to the workspace (removed with it by the reaper once this process is gone, like any).
            with self._lock:
                if not cell.dead:
                    self._count("ended: its workspace is kept")
                if cell in self._cells:
                    self._cells.remove(cell)
            cell.close()
            return
        # Decided while the cell is still lent (no other candidate can take it meanwhile).
        if cell.dead or cell.served >= RETIRE_AFTER or not self._wipe(cell):
            self._end(cell, "retired")  # the workspace is gone: the cell is forgotten, its slot removed
            return
        with self._lock:
            cell.workspace = None

    def _wipe(self, cell: Cell) -> bool:
        """Empty the slot (as root; nothing of the uid can write there, this is a second lock)."""
        try:
            for name in os.listdir(cell.slot):
                path = cell.slot / name
                if path.is_dir() and not path.is_symlink():
                    self._remove(path)
                else:
                    path.unlink()
            return not os.listdir(cell.slot)
        except OSError:
            return False

    def _end(self, cell: Cell, why: str) -> None:
        """Kill the cell; once no candidate's workspace is in its slot, forget it and remove the slot (else that
        happens when the workspace is released)."""
        with self._lock:
            if not cell.dead:
                self._count(f"ended: {why}")
        cell.close()
        with self._lock:
            if cell.lent or cell not in self._cells:
                return
            self._cells.remove(cell)
        self._remove(cell.slot)

    def cancel(self, workspace: str) -> None:
        """End the cells serving `workspace` or anything inside it (their running job dies with them)."""
        self._forked()
        with self._lock:
            doomed = [
                c
                for c in self._cells
                if c.workspace is not None
                and c.workspace != c.slot
                and (str(c.workspace) == workspace or str(c.workspace).startswith(workspace + os.sep))
            ]
        for cell in doomed:
            cell.close()

    def close(self) -> None:
        self._forked()
        with self._lock:
            cells = list(self._cells)
        for cell in cells:
            self._end(cell, "closed")

    def _grow(self, cell: Cell) -> None:
        """Start a second server in the cell's slot, in the background (once; at most MAX_SERVERS)."""
        with self._lock:
            if cell.dead or cell.growing or len(cell.servers) >= MAX_SERVERS:
                return
            cell.growing = True

        def grow() -> None:
            try:
                spawned = self._spawn(
                    cell.slot, list(cell.read_only), list(cell.path_prepend), cell.spawn_limits, False
                )
            except Exception as exc:
                log.warning("could not start a second server in a warm sandbox cell: %s", exc)
                return
            finally:
                cell.growing = False
            server = _Server(spawned)
            ok = server.ready() and server.limits == cell.limits
            with self._lock:
                if ok and not cell.dead:
                    cell.servers.append(server)
                    self._count("servers")
                    return
            spawned.close(remove=False)

        threading.Thread(target=grow, daemon=True, name="rtlreward-cell-grow").start()

    # -- commands -----------------------------------------------------------------------------------------------
    def run(
        self,
        cell: Cell,
        argv: list[str],
        workspace: Path,
        cwd: Path,
        env: Mapping[str, str],
        limits: Limits,
        stdin: str | None,
    ) -> CommandResult | None:
        """Run one command as the cell's job; None when the cell is busy or ended (run it on its own instead)."""
        server = cell.take()
        if server is None:  # every server busy: a sandbox of its own now, a second server for what follows
            self._grow(cell)
            return None
        try:
            if cell.dead:
                return None
            mib = 1024 * 1024
            rlimits = {
                "as": limits.memory_mb * mib if limits.memory_mb else None,
                "fsize": limits.file_size_mb * mib if limits.file_size_mb else None,
                "nproc": limits.pids or None,
            }
            if not cell.allows(rlimits):  # higher than the cell's: a sandbox of its own; later cells get them
                self._learn_limits(limits)
                return None
            if cell.uid is not None:
                self._hand_over(workspace, cell.uid)
            request = {
                "argv": argv,
                "cwd": str(cwd),
                "env": dict(env),
                "timeout": float(limits.timeout),
                "rlimits": rlimits,
                "stdin": base64.b64encode(stdin.encode()).decode() if stdin is not None else None,
                "cap": MAX_OUTPUT_BYTES,
            }
            try:
                answer = server.job(request, float(limits.timeout) + ANSWER_GRACE)
            except BaseException:
                # Interrupted while its job runs (the caller's Ctrl-C): the job's answer would come later and be
                # read as the next command's, so the cell ends with its job.
                self._end(cell, "interrupted")
                raise
            if answer is None:
                self._end(cell, "no answer")
                with self._lock:
                    self._count("fallback")
                return None
            if answer.get("timed_out"):
                cell.served = RETIRE_AFTER  # a new cell for the next candidate
            with self._lock:
                self._count("warm")
        finally:
            if (
                cell.dead
            ):  # ended meanwhile (here, or by `cancel`): this thread owns the pipes, it closes them
                server.spawned.close(remove=False)
            else:
                server.lock.release()
        dropped = answer.get("dropped") or [0, 0]
        out, t1 = truncate_output(base64.b64decode(answer.get("stdout") or ""), int(dropped[0]))
        err, t2 = truncate_output(base64.b64decode(answer.get("stderr") or ""), int(dropped[1]))
        return CommandResult(
            argv=tuple(argv),
            returncode=int(answer["rc"]),
            stdout=out,
            stderr=err,
            duration=float(answer.get("seconds") or 0.0),
            timed_out=bool(answer.get("timed_out")),
            truncated=t1 or t2,
            sandboxed=True,
        )
