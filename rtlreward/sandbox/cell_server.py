"""The process inside a warm sandbox cell (`rtlreward.sandbox.cells`): runs one command at a time, as a forked job.

Started by the local executor inside a bubblewrap sandbox of its own (the executor's file system, a leased sandbox
uid, no network, no capabilities, no_new_privs, its own PID namespace), whose only writable folder is the cell's
slot, where the candidate's workspace lives. Run as `python -I -S cell_server.py`; the standard library only. Its job
helpers (`kill_others`, `own_pid_namespace`, `clear`) also serve the equivalence stage's warm Yosys server.

Protocol (one job at a time): the first line written is {"ready": true, "pid": N}. A request is one JSON line on
stdin: {"argv": [...], "cwd": path, "env": {...}, "timeout": s, "rlimits": {"as": bytes, "fsize": bytes,
"nproc": n} (absent or null: not set), "stdin": base64 or null, "cap": bytes kept per stream}. The answer is one
JSON line on stdout: {"rc", "stdout", "stderr" (base64, at most `cap` + 1 bytes each), "dropped": [n, n],
"timed_out", "seconds"}.

Per job, the same as a command of its own sandbox would get: a child in its own session and process group with
the limits set before exec (address space, file size, processes, no core), SIGPIPE and SIGXFSZ back to their
defaults, the given environment and folder, stdin/stdout/stderr on pipes (output past the cap is read and
dropped); the wall clock enforced here (the group killed at the limit). When the command ends (or at the limit)
every other process this server may signal is killed (`kill(-1)`: the PID namespace holds only this server and the
job, so whatever the job left running, daemonised or not, dies before the answer is written), and `tidy` empties
the sandbox's own scratch folders (/tmp, /dev/shm, /dev/mqueue) and the uid's keyrings: nothing of one job is there
for the next. What it cannot remove (System V IPC objects, sockets in the namespace, a folder it cannot delete) or
a change a job made to this process through its pid (limits, nice value, affinity, scheduling, I/O priority) ends
the server without an answer. This process is not dumpable, so a job (same uid) cannot ptrace it or reach its pipes
through /proc; a job that kills it ends the cell (the executor replaces it and runs the command on its own).
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import re
import resource
import selectors
import signal
import stat
import sys
import time

SCRATCH = ("/tmp", "/dev/shm", "/dev/mqueue")  # /dev/mqueue: POSIX message queues (mounted in cells)
DRAIN_GRACE = 0.5  # seconds of reading the pipes after the command ended or was killed
_WAKE = [-1]  # the read end of the signal wake-up pipe (SIGCHLD)
_LIMITS = (("as", resource.RLIMIT_AS), ("fsize", resource.RLIMIT_FSIZE), ("nproc", resource.RLIMIT_NPROC))
_DEFAULT_SIGNALS = (
    signal.SIGPIPE,
    signal.SIGXFSZ,
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGALRM,
    signal.SIGCHLD,
)


def kill_others() -> None:
    """SIGKILL to every process this one may signal but itself (and the namespace's init), until none is left."""
    for _ in range(50):
        try:
            os.kill(-1, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.001)
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass


def own_pid_namespace() -> bool:
    """Whether PID 1 here is bubblewrap's init: only then does `kill(-1)` reach just the jobs' processes."""
    try:
        with open("/proc/1/cmdline", "rb") as fh:
            first = fh.read().split(b"\0")[0]
    except OSError:
        return False
    return os.path.basename(first) == b"bwrap"


def _remove(path: str) -> None:
    """Remove `path` and everything under it, opening folders a job made unreadable (mode 000) first."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        with contextlib.suppress(OSError):
            os.chmod(path, 0o700)
        for name in os.listdir(path):
            _remove(os.path.join(path, name))
        os.rmdir(path)
    else:
        os.unlink(path)


def clear(root: str, keep: str | tuple[str, ...] = ()) -> bool:
    """Remove everything in `root` (the job's uid owns all of it: only the job's processes wrote there) but
    `keep` and the folders on the way to them: the cell's slot, where the candidate's workspace lives, lies under
    the sandbox's /tmp when the workspaces do under the host's, and so may folders mounted read-only (`mounts`).
    (Also the warm Yosys server's, with its folder.) Whether nothing else is left: a caller that finds something
    left must not serve another job."""
    keeps = (keep,) if isinstance(keep, str) else tuple(keep)
    keeps = tuple(k for k in keeps if k)
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    clean = True
    for name in names:
        path = os.path.join(root, name)
        if path in keeps:
            continue
        if any(k.startswith(path + os.sep) for k in keeps):
            clean = clear(path, keeps) and clean
            continue
        try:
            _remove(path)
        except (OSError, RecursionError):
            clean = False
    return clean


def mounts() -> tuple[str, ...]:
    """The mount points of this sandbox (what bubblewrap bound: never a job's to remove)."""
    out = []
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) > 4:
                    out.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    except OSError:
        pass
    return tuple(out)


# What a job running as this server's uid could change in this process, and every later job would inherit: its
# limits (prlimit), nice value, CPU affinity, scheduling policy and I/O priority. Compared after every job.
_SYSCALLS = {"x86_64": {"ioprio_get": 252, "keyctl": 250}, "aarch64": {"ioprio_get": 31, "keyctl": 219}}
_NR = _SYSCALLS.get(os.uname().machine, {})
_LIBC = ctypes.CDLL(None, use_errno=True)


def _ioprio() -> int | None:
    nr = _NR.get("ioprio_get")
    return None if nr is None else _LIBC.syscall(nr, 1, 0)  # IOPRIO_WHO_PROCESS, this process


def process_state() -> tuple:
    limits = tuple(
        (name, resource.getrlimit(getattr(resource, name)))
        for name in sorted(dir(resource))
        if name.startswith("RLIMIT_")
    )
    return (
        limits,
        os.getpriority(os.PRIO_PROCESS, 0),
        tuple(sorted(os.sched_getaffinity(0))),
        os.sched_getscheduler(0),
        os.sched_getparam(0).sched_priority,
        _ioprio(),
    )


def clear_keyrings() -> None:
    """Empty the uid's user, user-session and persistent keyrings: the kernel keeps them while the uid has
    processes (this server; the persistent one for days), so a key one job adds would be there for the next.
    Where the sandbox's seccomp filter (rtlreward.sandbox.seccomp) is loaded no job can add one, and these calls
    fail harmlessly; this is for the machines without it."""
    nr = _NR.get("keyctl")
    if nr is None:
        return
    for ring in (-4, -5):  # KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING
        _LIBC.syscall(nr, 7, ring)  # KEYCTL_CLEAR
    persistent = _LIBC.syscall(
        nr, 22, -1, -2
    )  # KEYCTL_GET_PERSISTENT (own uid), linked into the process keyring
    if persistent > 0:
        _LIBC.syscall(nr, 7, persistent)


def _any_listed(paths: tuple[str, ...]) -> bool:
    """Whether any of these /proc tables lists an entry below its header line."""
    for path in paths:
        try:
            with open(path) as fh:
                if len(fh.read().splitlines()) > 1:
                    return True
        except OSError:
            continue
    return False


def ipc_objects() -> bool:
    """Whether System V shared memory, message queues or semaphores exist in this IPC namespace: they belong to
    no process, so nothing of a job's end removes them."""
    return _any_listed(tuple(f"/proc/sysvipc/{k}" for k in ("shm", "msg", "sem")))


def sockets() -> bool:
    """Whether any socket exists in this network namespace (a TIME_WAIT entry, a unix socket parked in a
    descriptor-passing cycle): they outlive the job that made them, and the namespace is the cell's. Read from
    the namespace's counters (`sockstat`: sockets in use, per protocol in use, TIME_WAIT) and the unix and packet
    tables; /proc/net/tcp would walk the host's whole TCP hash table (~3.5 ms a read here)."""
    if _any_listed(("/proc/net/unix", "/proc/net/packet")):
        return True
    for path in ("/proc/net/sockstat", "/proc/net/sockstat6"):
        try:
            with open(path) as fh:
                text = fh.read()
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split(":", 1)[-1].split()
            for key, value in zip(words[::2], words[1::2], strict=False):
                if key in ("used", "inuse", "tw") and value != "0":
                    return True
    return False


def keep_output(buf: bytearray, chunk: bytes, cap: int) -> int:
    """Append `chunk` to `buf` while it holds at most `cap` + 1 bytes (one more than kept: it was cut); returns how
    many bytes were dropped. (Also the local executor's own pump.)"""
    room = cap + 1 - len(buf)
    if room > 0:
        buf += chunk[:room]
    return max(0, len(chunk) - max(room, 0))


def tidy(keep: str | tuple[str, ...], scratch: tuple[str, ...], state: tuple) -> bool:
    """After a job (its processes killed): empty the scratch folders (but `keep`, as in `clear`) and the keyrings,
    and check that nothing of it is left in this process (`state`, from `process_state` at start) or the
    namespaces (IPC objects, sockets). False: something is, and the server must end (the executor then runs the
    command in a sandbox of its own and gives the candidate's next commands and the worker's next candidate a new
    cell)."""
    clean = all(clear(d, keep) for d in scratch if os.path.isdir(d))
    clear_keyrings()
    return clean and not ipc_objects() and not sockets() and process_state() == state


def _child(job: dict, fds: tuple[int, int, int]) -> None:
    """In the forked child: never returns."""
    try:
        os.setsid()
        for sig in _DEFAULT_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        limits = job.get("rlimits") or {}
        for key, which in _LIMITS:
            value = limits.get(key)
            if value:  # never above what it inherits (the executor checks): a failure ends the job
                resource.setrlimit(which, (int(value), int(value)))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.chdir(job["cwd"])
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, 1 << 16)
        argv = [str(a) for a in job["argv"]]
        os.execvpe(argv[0], argv, {str(k): str(v) for k, v in job["env"].items()})
    except BaseException as exc:  # reported as the command's own failure to start (exit 127, as a shell does)
        with contextlib.suppress(BaseException):
            os.write(2, f"cannot run {job['argv'][0]!r}: {exc}\n".encode(errors="replace"))
        os._exit(127)


def own_limits() -> dict[str, int | None]:
    """This process's hard limits (None: unlimited), which every job inherits."""
    out: dict[str, int | None] = {}
    for key, which in _LIMITS:
        hard = resource.getrlimit(which)[1]
        out[key] = None if hard == resource.RLIM_INFINITY else hard
    return out


def _which(name: str, path: str, cwd: str) -> str | None:
    """What execvpe would run for `name` with PATH `path` (its first executable match)."""
    if "/" in name:
        return name
    for d in path.split(":"):
        full = os.path.join(d or cwd, name)
        if os.path.isfile(full) and os.access(full, os.X_OK):
            return full
    return None


def _spawn(job: dict, fds: tuple[int, int, int], slot: str) -> int | None:
    """The command started without a copy of this process (posix_spawn: vfork and exec) when its limits are the
    ones it inherits from here anyway; None when they are lower (the fork path sets them) or it cannot start."""
    wanted = job.get("rlimits") or {}
    mine = own_limits()
    if any((wanted.get(k) or None) != mine[k] for k, _ in _LIMITS):
        return None
    env = {str(k): str(v) for k, v in job["env"].items()}
    argv = [str(a) for a in job["argv"]]
    try:
        os.chdir(job["cwd"])
    except OSError:
        return None
    try:
        path = _which(argv[0], env.get("PATH", ""), job["cwd"])
        if path is None:
            return None
        return os.posix_spawn(
            path,
            argv,
            env,
            file_actions=[(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(fds)],
            setsid=True,
            setsigdef=_DEFAULT_SIGNALS,
            setsigmask=(),
        )
    except OSError:
        return None
    finally:
        os.chdir(slot)


def run_job(job: dict, slot: str) -> dict:
    cap = int(job.get("cap") or (1 << 20))
    stdin = base64.b64decode(job["stdin"]) if job.get("stdin") is not None else None
    in_r, in_w = os.pipe() if stdin is not None else (os.open(os.devnull, os.O_RDONLY), -1)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    start = time.monotonic()
    deadline = start + float(job["timeout"])
    pid = _spawn(job, (in_r, out_w, err_w), slot)
    if pid is None:
        pid = os.fork()
        if pid == 0:
            _child(job, (in_r, out_w, err_w))
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    sel = selectors.DefaultSelector()
    bufs = {out_r: bytearray(), err_r: bytearray()}
    dropped = {out_r: 0, err_r: 0}
    for fd in bufs:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    view = memoryview(stdin) if stdin else None
    if in_w >= 0:
        if view is None:
            os.close(in_w)
        else:
            os.set_blocking(in_w, False)
            sel.register(in_w, selectors.EVENT_WRITE)
    wake = _WAKE[0]
    sel.register(
        wake, selectors.EVENT_READ
    )  # SIGCHLD: the command's exit is seen at once, not at the next poll
    status: int | None = None
    timed_out = False
    ended_at: float | None = None
    # Until its pipes close and it is seen to exit: GNU tools (`timeout`, Icarus's driver) close stdout at exit, just
    # before they end, so the pipes' end is not the command's; a SIGKILL then would turn a clean exit into -9 whenever
    # the machine is loaded (a compile read as failed, a trace as cut short). One that runs on is cut at its deadline.
    while True:
        now = time.monotonic()
        if status is None:
            got, st = os.waitpid(pid, os.WNOHANG)
            if got == pid:
                status, ended_at = st, now
                kill_others()  # what it left behind goes now, so the pipes close
        if status is None and ended_at is None and now >= deadline:
            timed_out, ended_at = True, now
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            status = os.waitpid(pid, 0)[1]
            kill_others()
        if status is not None and len(sel.get_map()) == 1:
            break  # seen to exit, and its pipes are closed: only the wake-up pipe is left (no wait for it)
        if ended_at is not None and now >= ended_at + DRAIN_GRACE:
            break
        limit = deadline if ended_at is None else ended_at + DRAIN_GRACE
        # The command's exit is seen by waitpid (woken by SIGCHLD), not by the pipes (a leftover may hold them).
        for key, _ in sel.select(timeout=max(0.0, min(limit - now, 0.05))):
            fd = key.fileobj
            if fd == wake:
                with contextlib.suppress(OSError):
                    while os.read(wake, 4096):
                        pass
                continue
            if fd == in_w:
                try:
                    n = os.write(in_w, view[:65536])
                    view = view[n:]
                except OSError:
                    view = view[:0]
                if not view:
                    sel.unregister(in_w)
                    os.close(in_w)
                continue
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                sel.unregister(fd)
                continue
            dropped[fd] += keep_output(bufs[fd], chunk, cap)
    sel.unregister(wake)
    for fd in list(sel.get_map()):
        with contextlib.suppress(OSError):
            os.close(fd)
    sel.close()
    for fd in (out_r, err_r):
        with contextlib.suppress(OSError):
            os.close(fd)
    kill_others()
    return {
        "rc": os.waitstatus_to_exitcode(status),
        "stdout": base64.b64encode(bytes(bufs[out_r])).decode(),
        "stderr": base64.b64encode(bytes(bufs[err_r])).decode(),
        "dropped": [dropped[out_r], dropped[err_r]],
        "timed_out": timed_out,
        "seconds": time.monotonic() - start,
    }


def serve() -> int:
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    if not own_pid_namespace():
        sys.stderr.write("cell_server: refusing to run outside a PID namespace of its own (bubblewrap)\n")
        return 2
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(w)
    _WAKE[0] = r
    proto_in = sys.stdin.buffer
    proto_out = sys.stdout.buffer
    proto_out.write(json.dumps({"ready": True, "pid": os.getpid(), "limits": own_limits()}).encode() + b"\n")
    proto_out.flush()
    slot = os.path.realpath(os.getcwd())  # the cell's only writable folder: the workspaces' home
    keep = (slot, *mounts())  # what the scratch folders hold that is the sandbox's, not a job's
    state = process_state()
    for line in proto_in:
        answer = run_job(json.loads(line), slot)
        if not tidy(keep, SCRATCH, state):
            return 3  # something of the job outlived it: no answer, the cell ends
        proto_out.write(json.dumps(answer).encode() + b"\n")
        proto_out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(serve())
