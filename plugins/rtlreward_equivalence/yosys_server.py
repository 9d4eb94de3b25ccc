"""A warm Yosys for the equivalence stage's proofs: libyosys loaded once, a forked child per proof.

Started by `warm.WarmYosys` inside its own sandbox (bubblewrap, a leased sandbox uid, no network, only its own
folder writable, the executor's rlimits: the memory limit holds per process, so for every proof). It never sees a
candidate's workspace: each request carries the texts the proof reads, and the answer carries back what the proof
wrote. Run as `python -I -S yosys_server.py PYOSYS_DIR HELPERS` (the folder holding the pyosys package, or a path that
does not exist to find it through the site; the folder of `rtlreward/sandbox/cell_server.py`, whose job helpers it
shares with the warm sandbox cells); Python's standard library only, besides pyosys.

Protocol (one job at a time): a request is one JSON line on stdin, {"files": {name: text}, "script": name,
"seconds": Yosys's limit, "abc": [program, args...] or null, "abc_seconds": ABC's limit, "want": [names],
"abc_unless_decided": an AIGER file's name or null}; the answer is one JSON line on stdout, {"rc", "stdout", "stderr",
"timed_out", "yosys_done", "files": {name: base64 or null}}.
The first line the server writes is {"ready": true, "pid": ...} once libyosys is loaded.

Per job: a fresh folder; a forked child in its own session with stdin, stdout and stderr on files of that folder
(the protocol's pipes closed before anything of the job is read), an alarm at Yosys's limit, the script run on a new
design; when it succeeds and `abc` is given, the child writes `yosys.done` and becomes ABC (exec), unless the
AIGER file named by `abc_unless_decided` is decided without it (`aiger_decide`: a constant-0 output, or a small
combinational miter evaluated on every input). The server waits up to both limits, kills the child's group, then
every other process it can signal (the sandbox's PID namespace holds only this server and the job: whatever the job
left running dies before the answer is written), reads what was asked for and removes the folder. This process is not dumpable, so a job cannot ptrace it
or read its pipes through /proc.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import signal
import sys
import time

MAX_TEXT = 1 << 20  # stdout/stderr kept per job (the executor's cap per stream)
MAX_FILE = (
    4 << 20
)  # an output file sent back; larger: named in "too_big" and not sent (the caller runs one-shot)
SCRATCH = (
    "/tmp",
    "/dev/shm",
    "/dev/mqueue",
)  # the sandbox's own scratch folders: emptied after every job, like the job's folder


def _read(path: str, limit: int) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit + 1)
    except OSError:
        return None


def _text(path: str) -> str:
    raw = _read(path, MAX_TEXT) or b""
    cut = len(raw) > MAX_TEXT
    return raw[:MAX_TEXT].decode("utf-8", "replace") + ("\n[output truncated]" if cut else "")


# A combinational miter (no latch) with few inputs is decided by evaluating its AIG on every input at once (one
# bit per input pattern, a Python int per node) instead of starting ABC (~20 ms of its own start-up): complete, like
# PDR, and with the first differing pattern as the counterexample. Bounded: at most 2^16 patterns and this many
# node x pattern bits, so a file no larger than the limits costs at most a few milliseconds.
EXHAUSTIVE_INPUTS = 16
EXHAUSTIVE_WORK = 1 << 26
AIGER_MAX = MAX_FILE  # what a warm answer carries; a larger miter is ABC's
_AIGER_FIELD = 20  # digits of a header field or a literal: a longer one is not a miter Yosys wrote


def aiger_decide(path: str) -> tuple[str, str, dict[int, int]] | None:
    """What the binary AIGER file at `path` says without ABC, or None when it takes a real proof: ("proved",
    "structural", {}) when its one output is the constant 0 (Yosys's optimisation already found the two sides the
    same logic); for a file with no latch and few inputs, ("proved", "exhaustive", {}) when no input pattern sets
    the output, else ("cex", "exhaustive", {input index: bit}) for the first pattern that does. Only a file with
    exactly one output and no bad-state, constraint, justice or fairness property is decided; anything else, or a
    file that does not read as AIGER, is None."""
    raw = _read(path, AIGER_MAX)
    if raw is None or len(raw) > AIGER_MAX or not raw.startswith(b"aig "):
        return None
    nl = raw.find(b"\n")
    head = raw[4:nl].split(b" ") if nl > 0 else []
    if not 5 <= len(head) <= 9 or not all(f.isdigit() and len(f) <= _AIGER_FIELD for f in head):
        return None  # "aig M I L O A [B C J F]", as Yosys writes it
    m, i, latches, outputs, ands, *extra = (int(f) for f in head)
    if outputs != 1 or any(extra) or m != i + latches + ands:
        return None
    pos = nl + 1
    for _ in range(latches):  # a latch line: next-state literal (and an init value)
        nl = raw.find(b"\n", pos)
        if nl < 0:
            return None
        pos = nl + 1
    nl = raw.find(b"\n", pos)
    line = raw[pos:nl] if nl >= 0 else b""
    if not line.isdigit() or len(line) > _AIGER_FIELD:
        return None
    out = int(line)
    pos = nl + 1
    if len(raw) - pos < 2 * ands:  # every gate takes two bytes at least: a header that promises more is not read
        return None
    if out == 0:
        return ("proved", "structural", {})
    if latches or i > EXHAUSTIVE_INPUTS or (ands + 1) << i > EXHAUSTIVE_WORK or out > 2 * m + 1:
        return None
    n = 1 << i  # patterns: pattern p gives input k the value of bit k of p
    mask = (1 << n) - 1
    values = [0] * (m + 1)
    for k in range(i):
        if k < 3:
            unit = bytes((0xAA, 0xCC, 0xF0)[k : k + 1])
        else:
            half = 1 << (k - 3)
            unit = bytes(half) + b"\xff" * half
        count = max(1, (n // 8) // len(unit))
        values[k + 1] = int.from_bytes(unit * count, "little") & mask

    def lit(x: int) -> int:
        v = values[x >> 1]
        return v ^ mask if x & 1 else v

    def number() -> int:  # AIGER's 7-bit little-endian delta encoding
        nonlocal pos
        value = shift = 0
        while True:
            if pos >= len(raw) or shift > 35:
                raise ValueError("cut short")
            byte = raw[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    try:
        for a in range(ands):
            lhs = 2 * (i + a + 1)
            rhs0 = lhs - number()
            rhs1 = rhs0 - number()
            if not 0 <= rhs1 <= rhs0 < lhs:
                return None
            values[i + a + 1] = lit(rhs0) & lit(rhs1)
    except ValueError:
        return None
    if out >> 1 > i + ands or raw[pos : pos + 1] not in (b"", b"i", b"l", b"o", b"b", b"c", b"j", b"f"):
        return None  # after the gates: nothing, the symbol table or the comment section
    hit = lit(out)
    if not hit:
        return ("proved", "exhaustive", {})
    first = (hit & -hit).bit_length() - 1
    return ("cex", "exhaustive", {k: (first >> k) & 1 for k in range(i)})


def _child(ys, job: dict, folder: str) -> None:
    """In the forked child: never returns."""
    try:
        os.setsid()
        os.chdir(folder)
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open("yosys.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err = os.open("stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.environ["TMPDIR"] = folder
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.closerange(3, 1 << 16)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(max(1, int(float(job["seconds"]) + 0.999)))
        ys.run_pass("script " + str(job["script"]), ys.Design())
        signal.alarm(0)
        abc = job.get("abc")
        decided = job.get("abc_unless_decided")  # the AIGER file that may need no ABC run (`aiger_decide`)
        if abc and isinstance(decided, str) and "/" not in decided and aiger_decide(decided) is not None:
            with open("yosys.done", "w"):
                pass
        elif abc:
            stdout = os.open("stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(stdout, 1)
            os.close(stdout)
            with open("yosys.done", "w"):
                pass
            os.execv(abc[0], [str(a) for a in abc])
    except BaseException:  # the child reports and exits, never returns into the server's loop
        import traceback

        try:
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(1)
    os._exit(0)


def serve(pyosys_dir: str, helpers: str) -> int:
    sys.path.insert(0, helpers)  # rtlreward/sandbox: the warm cells' job helpers (`cell_server`)
    import cell_server as jobs

    if os.path.isdir(pyosys_dir):
        sys.path.insert(0, pyosys_dir)
    try:
        from pyosys import libyosys as ys
    except ImportError:
        import site

        site.main()
        from pyosys import libyosys as ys
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    if not jobs.own_pid_namespace():
        sys.stderr.write("yosys_server: refusing to run outside a PID namespace of its own (bubblewrap)\n")
        return 2
    root = os.path.realpath(os.getcwd())
    proto_in = sys.stdin.buffer
    proto_out = sys.stdout.buffer
    state = jobs.process_state()
    keep = jobs.mounts()  # the sandbox's own mount points under its scratch folders
    proto_out.write(json.dumps({"ready": True, "pid": os.getpid()}).encode() + b"\n")
    proto_out.flush()
    for line in proto_in:
        job = json.loads(line)
        jobs.clear(root)
        folder = os.path.join(root, "job-" + os.urandom(8).hex())
        os.mkdir(folder, 0o700)
        for name, text in job["files"].items():
            if "/" in name or name.startswith("."):
                raise SystemExit(f"bad file name {name!r}")
            with open(os.path.join(folder, name), "w", encoding="utf-8", errors="surrogateescape") as fh:
                fh.write(text)
        start = time.monotonic()
        deadline = start + float(job["seconds"]) + float(job.get("abc_seconds") or 0) + 1.0
        pid = os.fork()
        if pid == 0:
            _child(ys, job, folder)
        status, timed_out = None, False
        while status is None:
            got, st = os.waitpid(pid, os.WNOHANG)
            if got == pid:
                status = st
                break
            if time.monotonic() > deadline:
                timed_out = True
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
                status = os.waitpid(pid, 0)[1]
                break
            time.sleep(0.002)
        rc = os.waitstatus_to_exitcode(status)
        jobs.kill_others()
        files, too_big = {}, []
        for name in job.get("want") or ():
            raw = _read(os.path.join(folder, name), MAX_FILE)
            if raw is not None and len(raw) > MAX_FILE:
                too_big.append(name)
                raw = None
            files[name] = base64.b64encode(raw).decode() if raw is not None else None
        answer = {
            "rc": rc,
            "stdout": _text(os.path.join(folder, "stdout")),
            "stderr": _text(os.path.join(folder, "stderr")),
            "timed_out": timed_out,
            "yosys_done": os.path.exists(os.path.join(folder, "yosys.done")),
            "seconds": time.monotonic() - start,
            "files": files,
            "too_big": too_big,
        }
        if not (jobs.clear(root) and jobs.tidy((root, *keep), SCRATCH, state)):
            return 3  # something of the job outlived it: no answer, the proof runs one-shot, the server is replaced
        proto_out.write(json.dumps(answer).encode() + b"\n")
        proto_out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(
        serve(sys.argv[1] if len(sys.argv) > 1 else "/nonexistent", sys.argv[2] if len(sys.argv) > 2 else "")
    )
