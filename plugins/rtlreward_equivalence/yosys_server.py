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
import re
import select
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


# A miter is decided from its AIG, without ABC (~40 ms of its own start-up, more than the rest of a small proof),
# where that is cheap and sound, in this order:
# - "structural": its one output is the constant 0 (Yosys's optimisation found the two sides the same logic);
# - "exhaustive": no latch and few inputs: the AIG evaluated on every input pattern at once (one bit per pattern, a
#   Python int per node): proved, or the first pattern that differs;
# - "explicit": latches (from their initial values: Yosys writes `-zinit`) and few inputs the gates read: every
#   reachable state visited breadth first, each on every input pattern at once: proved when no reachable state and
#   input sets the output, else the shortest input sequence that does;
# - "random": seeded random input sequences (a lane per bit of a Python int, some lanes biased towards 0 or 1) run
#   from the initial state: a sequence that sets the output is a counterexample; none found decides nothing.
# Every step is bounded in gates x patterns x states (a few milliseconds); past the bounds, ABC decides. The same
# file gives the same verdict every time (the random inputs are seeded from the file), so the host's reading of
# the file and the server's agree.
EXHAUSTIVE_INPUTS = 16
EXHAUSTIVE_WORK = 1 << 26
EXPLICIT_INPUTS = 10  # inputs the gates read (the wrapper's clock is read by none)
EXPLICIT_LATCHES = 64
EXPLICIT_WORK = 1 << 17  # states x (gates + patterns)
RANDOM_LANES = 64
RANDOM_FRAMES = 24
RANDOM_WORK = 1 << 15  # gates x frames
DECODE_ANDS = 1 << 14  # gates decoded at most (~1-2 us each in Python): a larger miter is ABC's
AIGER_MAX = MAX_FILE  # what a warm answer carries; a larger miter is ABC's
_AIGER_FIELD = 20  # digits of a header field or a literal: a longer one is not a miter Yosys wrote


def aiger_decide(path: str) -> tuple[str, str, tuple[dict[int, int], ...]] | None:
    """What the binary AIGER file at `path` says without ABC, or None when it takes a real proof: (verdict,
    engine, frames) with verdict "proved" or "cex", engine "structural", "exhaustive", "explicit" or "random" (see
    above), and for a counterexample the value of every input (by index) in each frame, the output set in the last.
    Only a file with exactly one output and no bad-state, constraint, justice or fairness property is decided;
    anything else, or a file that does not read as AIGER, is None."""
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
    if len(raw) < latches * 2:  # every latch line takes two bytes at least
        return None
    pos = nl + 1
    lines: list[bytes] = []
    for _ in range(latches):  # a latch line: next-state literal (and an init value)
        nl = raw.find(b"\n", pos)
        if nl < 0:
            return None
        lines.append(raw[pos:nl])
        pos = nl + 1
    nl = raw.find(b"\n", pos)
    line = raw[pos:nl] if nl >= 0 else b""
    if not line.isdigit() or len(line) > _AIGER_FIELD:
        return None
    out = int(line)
    pos = nl + 1
    if len(raw) - pos < 2 * ands:  # every gate takes two bytes at least: a header promising more is not read
        return None
    if out == 0:
        return ("proved", "structural", ())
    if out > 2 * m + 1:
        return None
    if ands > DECODE_ANDS:
        return None
    if latches:
        nexts, inits = _latches(lines, m, i)
        if nexts is None:
            return None
    else:
        nexts, inits = [], []
    gates = _gates(raw, pos, i + latches, ands)
    if gates is None:
        return None
    r0, r1, pos = gates
    if raw[pos : pos + 1] not in (b"", b"i", b"l", b"o", b"b", b"c", b"j", b"f"):
        return None  # after the gates: nothing, the symbol table or the comment section
    aig = _Aig(m, i, nexts, inits, out, r0, r1)
    if not latches and i <= EXHAUSTIVE_INPUTS and (ands + 1) << i <= EXHAUSTIVE_WORK:
        return _exhaustive(aig)
    if latches:
        if any(v is None for v in inits):
            return None  # an initial value left open: any of them would have to be tried
        got = _explicit(aig)
        if got is not None:
            return got
    return _random(aig, raw)


class _Aig:
    __slots__ = ("i", "inits", "m", "nexts", "out", "r0", "r1")

    def __init__(self, m, i, nexts, inits, out, r0, r1) -> None:
        self.m, self.i, self.nexts, self.inits, self.out, self.r0, self.r1 = m, i, nexts, inits, out, r0, r1

    def used_inputs(self) -> list[int]:
        """The input variables (1..I) a gate, a latch or the output reads."""
        seen = {x >> 1 for x in (*self.r0, *self.r1, *self.nexts, self.out)}
        return [v for v in range(1, self.i + 1) if v in seen]

    def evaluate(self, values: list[int], mask: int) -> None:
        """Each gate's value from the inputs' and latches' in `values` (a bit per pattern or lane)."""
        base = self.i + len(self.nexts) + 1
        for a, (x, y) in enumerate(zip(self.r0, self.r1, strict=True)):
            vx = values[x >> 1] ^ mask if x & 1 else values[x >> 1]
            vy = values[y >> 1] ^ mask if y & 1 else values[y >> 1]
            values[base + a] = vx & vy

    @staticmethod
    def lit(values: list[int], x: int, mask: int) -> int:
        return values[x >> 1] ^ mask if x & 1 else values[x >> 1]


def _latches(lines: list[bytes], m: int, i: int) -> tuple[list[int] | None, list[int | None]]:
    nexts: list[int] = []
    inits: list[int | None] = []
    for k, line in enumerate(lines):
        parts = line.split(b" ")
        if not 1 <= len(parts) <= 2 or not all(p.isdigit() and len(p) <= _AIGER_FIELD for p in parts):
            return None, []
        nxt = int(parts[0])
        init = int(parts[1]) if len(parts) == 2 else 0
        own = 2 * (i + k + 1)
        if nxt > 2 * m + 1 or init not in (0, 1, own):
            return None, []
        nexts.append(nxt)
        inits.append(None if init == own else init)  # its own literal: left open (any value)
    return nexts, inits


def _gates(raw: bytes, pos: int, first: int, ands: int) -> tuple[list[int], list[int], int] | None:
    """The gates' two inputs (AIGER's 7-bit little-endian deltas), checked to read only earlier literals."""
    r0: list[int] = []
    r1: list[int] = []
    size = len(raw)

    for a in range(ands):
        lhs = 2 * (first + a + 1)
        deltas = []
        for _ in range(2):
            value = shift = 0
            while True:
                if pos >= size or shift > 35:
                    return None
                byte = raw[pos]
                pos += 1
                value |= (byte & 0x7F) << shift
                if not byte & 0x80:
                    break
                shift += 7
            deltas.append(value)
        x = lhs - deltas[0]
        y = x - deltas[1]
        if not 0 <= y <= x < lhs:
            return None
        r0.append(x)
        r1.append(y)
    return r0, r1, pos


def _patterns(k: int, n: int, mask: int) -> int:
    """The bit pattern of input number k over n = 2^K patterns: pattern p gives it bit k of p."""
    if k < 3:
        unit = bytes((0xAA, 0xCC, 0xF0)[k : k + 1])
    else:
        half = 1 << (k - 3)
        unit = bytes(half) + b"\xff" * half
    count = max(1, (n // 8) // len(unit))
    return int.from_bytes(unit * count, "little") & mask


def _exhaustive(aig: _Aig) -> tuple[str, str, tuple[dict[int, int], ...]]:
    n = 1 << aig.i
    mask = (1 << n) - 1
    values = [0] * (aig.m + 1)
    for k in range(aig.i):
        values[k + 1] = _patterns(k, n, mask)
    aig.evaluate(values, mask)
    hit = aig.lit(values, aig.out, mask)
    if not hit:
        return ("proved", "exhaustive", ())
    first = (hit & -hit).bit_length() - 1
    return ("cex", "exhaustive", ({k: (first >> k) & 1 for k in range(aig.i)},))


def _explicit(aig: _Aig) -> tuple[str, str, tuple[dict[int, int], ...]] | None:
    used = aig.used_inputs()
    latches = len(aig.nexts)
    if len(used) > EXPLICIT_INPUTS or latches > EXPLICIT_LATCHES:
        return None
    n = 1 << len(used)
    mask = (1 << n) - 1
    base = [0] * (aig.m + 1)
    for k, var in enumerate(used):
        base[var] = _patterns(k, n, mask)
    start = "".join(str(v) for v in aig.inits)
    parent: dict[str, tuple[str, int] | None] = {start: None}
    queue = [start]
    cost = len(aig.r0) + n + latches
    for state in queue:  # grows while it is read: breadth first
        if len(parent) * cost > EXPLICIT_WORK:
            return None
        values = list(base)
        for k, bit in enumerate(state):
            values[aig.i + 1 + k] = mask if bit == "1" else 0
        aig.evaluate(values, mask)
        hit = aig.lit(values, aig.out, mask)
        if hit:
            steps = [(hit & -hit).bit_length() - 1]
            at = parent[state]
            while at is not None:
                steps.append(at[1])
                at = parent[at[0]]
            slot = {v: k for k, v in enumerate(used)}
            frames = tuple(
                {v - 1: (p >> slot[v]) & 1 if v in slot else 0 for v in range(1, aig.i + 1)}
                for p in reversed(steps)
            )
            return ("cex", "explicit", frames)
        columns = zip(*(format(aig.lit(values, x, mask), f"0{n}b")[::-1] for x in aig.nexts), strict=True)
        for p, column in enumerate(columns):
            nxt = "".join(column)
            if nxt not in parent:
                parent[nxt] = (state, p)
                queue.append(nxt)
    return ("proved", "explicit", ())


def _random(aig: _Aig, raw: bytes) -> tuple[str, str, tuple[dict[int, int], ...]] | None:
    import hashlib
    import random

    frames_max = RANDOM_FRAMES if aig.nexts else 4  # a combinational miter: each frame is just more patterns
    frames_max = min(frames_max, RANDOM_WORK // max(1, len(aig.r0)))
    if frames_max < 1:
        return None
    rng = random.Random(hashlib.sha256(raw).digest())
    lanes = RANDOM_LANES
    mask = (1 << lanes) - 1
    quarter = lanes // 4
    # lanes 0-15: p(1) = 1/2; 16-31: 1/8; 32-47: 7/8; 48-63: 1/2 held for 8 frames at a time
    low, high, held = (
        ((1 << quarter) - 1) << quarter,
        ((1 << quarter) - 1) << (2 * quarter),
        ((1 << quarter) - 1) << (3 * quarter),
    )
    even = (1 << quarter) - 1
    used = aig.used_inputs()
    state = [mask if v else 0 for v in aig.inits]
    history: list[dict[int, int]] = []
    last: dict[int, int] = {}
    for frame in range(frames_max):
        values = [0] * (aig.m + 1)
        row: dict[int, int] = {}
        for var in used:
            a, b, c = rng.getrandbits(lanes), rng.getrandbits(lanes), rng.getrandbits(lanes)
            slow = last.get(var, a) if frame % 8 else a
            v = (a & even) | (a & b & c & low) | ((a | b | c) & high) | (slow & held)
            row[var] = values[var] = v
        last = row
        history.append(row)
        for k, st in enumerate(state):
            values[aig.i + 1 + k] = st
        aig.evaluate(values, mask)
        hit = aig.lit(values, aig.out, mask)
        if hit:
            lane = (hit & -hit).bit_length() - 1
            keep = history if aig.nexts else [row]
            return (
                "cex",
                "random",
                tuple({v - 1: (r.get(v, 0) >> lane) & 1 for v in range(1, aig.i + 1)} for r in keep),
            )
        state = [aig.lit(values, x, mask) for x in aig.nexts]
    return None


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


# Yosys's `techmap` reads its built-in library (+/techmap.v) from source on every call: ~15 ms, more than the rest of
# a small proof. The server reads it once, as `techmap` does, into a saved design its forked children inherit; a job
# that asks (`builtin_techmap`) has each bare `techmap` line of its script map with that design instead (the same
# modules: the same AIGER file, byte for byte, `tests/test_warm_yosys.py`).
SAVED_TECHMAP = "rtlreward_builtin_techmap"
_TECHMAP_LINE = re.compile(r"^techmap[ \t]*$", re.M)


def _preload_techmap(ys) -> str | None:
    """Read the built-in techmap library into a saved design, Yosys's log kept off the protocol's stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        design = ys.Design()
        ys.run_pass("read_verilog -nooverwrite -noblackbox -icells +/techmap.v", design)
        ys.run_pass(f"design -save {SAVED_TECHMAP}", design)
        return SAVED_TECHMAP
    except Exception:  # a Yosys without it: every job reads the library itself, as before
        return None
    finally:
        ctypes.CDLL(None).fflush(None)  # Yosys's log, still buffered, goes to /dev/null, not into a child's log
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def _wait(pid: int, deadline: float) -> tuple[int, bool]:
    """(the job's wait status, whether it was killed at `deadline`). Woken the moment the child exits, through a
    pidfd (Linux 5.3; polling every 2 ms cost ~1 ms a proof), else by polling."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    poller = select.poll()
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    try:
        while True:
            got, status = os.waitpid(pid, os.WNOHANG)
            if got == pid:
                return status, False
            left = deadline - time.monotonic()
            if left <= 0:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
                return os.waitpid(pid, 0)[1], True
            if pidfd is not None:
                poller.poll(max(1, int(left * 1000) + 1))  # readable once the child has exited
            else:
                time.sleep(0.002)
    finally:
        if pidfd is not None:
            os.close(pidfd)


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
    techmap = _preload_techmap(ys)
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
            if techmap and job.get("builtin_techmap") and name == job["script"]:
                text = _TECHMAP_LINE.sub(f"techmap -map %{techmap}", text)
            with open(os.path.join(folder, name), "w", encoding="utf-8", errors="surrogateescape") as fh:
                fh.write(text)
        start = time.monotonic()
        deadline = start + float(job["seconds"]) + float(job.get("abc_seconds") or 0) + 1.0
        pid = os.fork()
        if pid == 0:
            _child(ys, job, folder)
        status, timed_out = _wait(pid, deadline)
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
