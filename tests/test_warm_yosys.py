"""The warm Yosys server of the equivalence stage (issue 16): libyosys loaded once, a forked child per proof, in a
sandbox of its own. Each job's guarantees are the one-shot command's: its own time limit, the memory limit, nothing
it started outlives it, no write outside the server's folder, and a server a job breaks is replaced, never trusted.
Real bubblewrap, real libyosys; the jobs' "ABC" is a shell where a test needs a hostile program after Yosys."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest

from rtlreward.sandbox.local import LocalExecutor
from rtlreward_equivalence import _pyosys_dir, warm

NOOP = "design -reset\n"  # a Yosys script that succeeds, so the job's program runs after it


@pytest.fixture()
def pool():
    ex = LocalExecutor()
    if not ex.can_spawn or not _pyosys_dir():
        pytest.skip("needs bubblewrap and the pyosys wheel")
    p = warm.WarmYosys(ex, 1024, _pyosys_dir())
    yield p
    p.close()


def job(pool, program: str, *, seconds: float = 10.0, abc_seconds: float = 10.0, want=()):
    return pool.prove({"t.ys": NOOP}, "t.ys", seconds, ["/bin/sh", "-c", program], abc_seconds, want)


def test_a_real_proof_job_runs_yosys_then_abc(pool):
    miter = "read_verilog -sv a.v\nhierarchy -top a\nproc\nflatten\naigmap\nwrite_aiger -zinit -map eq.aim eq.aig\n"
    design = "module a(input x, output trigger); assign trigger = x & ~x; endmodule\n"
    exe = os.path.join(_pyosys_dir(), "pyosys", "yosys-abc")
    got = pool.prove(
        {"eq.ys": miter, "a.v": design},
        "eq.ys",
        10.0,
        [exe, "-c", "read_aiger eq.aig; strash; pdr -T 5; write_cex -n pdr.cex"],
        10.0,
        ("eq.aig", "eq.aim"),
    )
    assert got is not None and got["yosys_done"] and got["rc"] == 0, got
    assert "pdr -T 5" in got["stdout"] and "Property" in got["stdout"], got["stdout"]  # ABC ran, in the job
    assert got["files"]["eq.aig"] and got["files"]["eq.aim"] is not None


def test_abc_is_not_started_when_the_miter_is_decided_without_it(pool):
    miter = "read_verilog -sv a.v\nhierarchy -top a\nproc\nflatten\nopt\ntechmap\ndffunmap\naigmap\nwrite_aiger -zinit eq.aig\n"
    abc = ["/bin/sh", "-c", "echo abc-ran"]
    latch = "reg r = 0; always @(posedge x) r <= y[0];"
    # a register of 12 input bits that must take one value while the inputs take another: too many inputs to
    # walk every state on every pattern, too unlikely to meet at random: ABC's
    wide = "reg [11:0] w = 0; always @(posedge x) w <= y;"
    cases = (
        ("x & ~x", False),  # the constant 0
        ("x & y[0]", False),  # combinational, few inputs: every pattern
        (f"r; {latch}", False),  # a register: every reachable state
        (f"(w == 12'habc) & (y == 12'h123); {wide}", True),
    )
    for trigger, runs in cases:
        trigger, _, extra = trigger.partition(";")
        design = (
            f"module a(input x, input [11:0] y, output trigger); {extra} assign trigger = {trigger}; endmodule\n"
        )
        got = pool.prove(
            {"eq.ys": miter, "a.v": design}, "eq.ys", 10.0, abc, 10.0, ("eq.aig",), abc_unless_decided="eq.aig"
        )
        assert got is not None and got["yosys_done"] and got["rc"] == 0, got
        assert ("abc-ran" in got["stdout"]) is runs, (trigger, got["stdout"])


def test_nothing_a_job_started_outlives_it(pool):
    first = job(pool, "(sleep 30 &) ; (setsid sleep 31 &) ; echo started")
    assert first is not None and "started" in first["stdout"]
    # The next job on the same server lists the processes of the sandbox: bwrap's init, the server, this job.
    second = job(pool, "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done")
    assert second is not None
    assert "sleep" not in second["stdout"], second["stdout"]


def test_a_job_past_its_limit_is_killed_and_the_server_serves_the_next(pool):
    slow = job(pool, "sleep 60", seconds=1.0, abc_seconds=1.0)
    assert slow is not None and slow["timed_out"] and slow["duration"] < 10, slow
    after = job(pool, "echo alive")
    assert after is not None and "alive" in after["stdout"]


def test_yosys_past_its_own_limit_is_cut_by_its_alarm(pool):
    body = "".join(f"  assign w[{i}] = w[{i - 1}] ^ x;\n" for i in range(1, 40000))
    big = f"module big(input x, output y);\n  wire [39999:0] w;\n  assign w[0] = x;\n{body}  assign y = w[39999];\nendmodule\n"
    script = "read_verilog -sv big.v\nhierarchy -top big\nproc\nflatten\nopt\nopt\nopt\n"
    got = pool.prove({"t.ys": script, "big.v": big}, "t.ys", 1.0, ["/bin/echo", "abc ran"], 5.0, ())
    assert got is not None and not got["yosys_done"] and "abc ran" not in got["stdout"], got
    assert got["rc"] == -14 and got["duration"] < 8, got  # SIGALRM


def test_a_job_cannot_write_outside_the_servers_folder(pool, tmp_path):
    target = Path("/tmp") / f"rtlreward-warm-escape-{uuid.uuid4().hex}"
    home = tmp_path / "planted"
    got = job(pool, f"touch {target} 2>&1; touch {home} 2>&1; touch /etc/planted 2>&1; echo done")
    assert got is not None and "done" in got["stdout"]
    assert not target.exists() and not home.exists() and not Path("/etc/planted").exists()


def test_memory_limit_holds_per_job(pool):
    got = job(pool, "python3 -c 'x = bytearray(3 << 30)' 2>&1; echo rc=$?")
    assert got is not None and "rc=0" not in got["stdout"], got["stdout"]
    assert "MemoryError" in got["stdout"] or "rc=1" in got["stdout"]


def test_a_job_that_kills_its_server_gets_no_answer_and_a_fresh_server_follows(pool):
    assert job(pool, "kill -9 $PPID; sleep 1") is None  # the caller then runs its one-shot command
    again = job(pool, "echo fresh")
    assert again is not None and "fresh" in again["stdout"]


def test_the_server_refuses_to_run_outside_a_sandbox(tmp_path):
    """`kill(-1)` after each job is only safe in a PID namespace of its own: run bare, the server exits."""
    import subprocess
    import sys

    server = Path(warm.SERVER)
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            str(server),
            _pyosys_dir() or "/nonexistent",
            str(warm.CELL_SERVER.parent),
        ],
        input=b"",
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 2 and b"refusing" in proc.stderr, proc


def test_a_job_whose_candidate_is_given_up_stops_at_once(pool):
    """`executor.cancel(workspace)` kills a candidate's commands; its proof on a warm server stops too (the
    server is killed with the job, and the next job gets a fresh one)."""
    import threading
    import time

    flag = threading.Event()
    threading.Timer(0.5, flag.set).start()
    start = time.monotonic()
    got = pool.prove(
        {"t.ys": NOOP}, "t.ys", 10.0, ["/bin/sh", "-c", "sleep 30"], 30.0, (), cancelled=flag.is_set
    )
    assert got is None and time.monotonic() - start < 5
    again = job(pool, "echo fresh")
    assert again is not None and "fresh" in again["stdout"]


def test_the_sandbox_scratch_folders_are_emptied_after_every_job(pool):
    """The server's sandbox has a private /tmp that lives as long as the server: a job may not leave anything in
    it (or in /dev/shm) for the next one, nor pin memory there."""
    first = job(
        pool, "echo left > /tmp/stash; head -c 10000000 /dev/zero > /tmp/pinned; echo x > $TMPDIR/t; echo ok"
    )
    assert first is not None and "ok" in first["stdout"]
    second = job(pool, "ls -A /tmp /dev/shm 2>&1; cat /tmp/stash 2>&1; echo end")
    assert second is not None and "end" in second["stdout"]
    assert "left" not in second["stdout"] and "pinned" not in second["stdout"], second


def test_an_answer_too_large_for_a_warm_reply_falls_back_at_once(pool):
    """What a proof wrote is sent back only up to a size: a larger file (a design with huge names makes a huge
    AIGER map) is not sent, and the caller runs its one-shot command instead of waiting on a huge reply."""
    got = job(pool, "head -c 6000000 /dev/zero | tr '\\0' x > eq.aim; echo done", want=("eq.aim",))
    assert got is None
    after = job(pool, "echo served")
    assert after is not None and "served" in after["stdout"]


def aig(inputs: int, ands: list[tuple[int, int]], out: int, *, latches: list[str] = (), extra: str = "") -> bytes:
    """A binary AIGER file: `ands` are (rhs0, rhs1) literals of gates numbered after the inputs and latches."""
    body = bytearray()
    for k, (r0, r1) in enumerate(ands):
        lhs = 2 * (inputs + len(latches) + k + 1)
        r0, r1 = max(r0, r1), min(r0, r1)
        for delta in (lhs - r0, r0 - r1):
            while delta >= 0x80:
                body.append(delta & 0x7F | 0x80)
                delta >>= 7
            body.append(delta)
    m = inputs + len(latches) + len(ands)
    head = f"aig {m} {inputs} {len(latches)} 1 {len(ands)}{extra}\n" + "".join(f"{x}\n" for x in latches)
    return head.encode() + f"{out}\n".encode() + bytes(body)


XOR = [(2, 5), (3, 4)]  # x0 & ~x1, ~x0 & x1; x0 ^ x1 = ~(~g1 & ~g2)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (aig(2, [], 0), ("proved", "structural", ())),
        (aig(3, [(2, 4)], 0, latches=["6"]), ("proved", "structural", ())),  # a latch line, then the output
        (aig(2, [(2, 4)], 6), ("cex", "exhaustive", ({0: 1, 1: 1},))),  # x0 & x1: the first pattern is 11
        (aig(2, [(2, 3)], 6), ("proved", "exhaustive", ())),  # x0 & ~x0 never holds
        (aig(2, [*XOR, (7, 9)], 10), ("cex", "exhaustive", ({0: 0, 1: 0},))),  # xnor: 00 first
        (aig(2, [*XOR, (7, 9)], 11), ("cex", "exhaustive", ({0: 1, 1: 0},))),  # xor: 01 (x0 = 1) first
        (aig(2, [], 1), ("cex", "exhaustive", ({0: 0, 1: 0},))),  # the constant 1: always differs
        # 9 inputs, output = all of them: the only pattern is all ones (inputs past the first bytes' patterns)
        (aig(9, [(2, 4), (20, 6), (22, 8), (24, 10), (26, 12), (28, 14), (30, 16), (32, 18)], 34),
         ("cex", "exhaustive", ({k: 1 for k in range(9)},))),
        # more inputs than are evaluated on every pattern: the output is input 0, found at random (the other inputs,
        # read by nothing, 0)
        (aig(17, [], 2), ("cex", "random", ({0: 1, **{k: 0 for k in range(1, 17)}},))),
        (aig(17, [(2, 3)], 36), None),  # x0 & ~x0 over 17 inputs: not refuted at random, so ABC's
        # more gates than are decoded in Python (~1-2 us each): ABC's, however few the inputs
        (aig(2, [(2, 4)] + [(2 * (3 + k), 2) for k in range((1 << 14) + 1)], 2 * (2 + (1 << 14) + 2)), None),
        # a latch that takes input 2 (the output): the shortest sequence sets input 2, then the output is set
        (aig(3, [(2, 4)], 8, latches=["6"]), ("cex", "explicit", ({0: 0, 1: 0, 2: 1}, {0: 0, 1: 0, 2: 0}))),
        (aig(1, [], 4, latches=["2 1"]), ("cex", "explicit", ({0: 0},))),  # starts at 1 (an init field)
        (aig(1, [], 4, latches=["4"]), ("proved", "explicit", ())),  # holds its initial 0 for ever
        (aig(1, [], 4, latches=["2 4"]), None),  # its initial value left open: ABC's
        (aig(1, [], 4, latches=["2 3"]), None),  # an init field that is neither 0, 1 nor its own literal
        (aig(1, [], 4, latches=["2 0 0"]), None),  # three fields on a latch line
        # 17 inputs (more than are evaluated on every pattern): an AND of two finds its pattern at random
        (aig(17, [(2, 4)], 36), ("cex", "random", ({0: 1, 1: 1, **{k: 0 for k in range(2, 17)}},))),
        (aig(2, [(2, 4)], 6, extra=" 1 0 0 0"), None),  # a bad-state property besides the output
        (b"aig 2 2 0 2 0\n0\n0\n", None),  # two outputs
        (b"aig 3 2 0 1 0\n0\n", None),  # M is not I + L + A
        (b"aag 2 2 0 1 0\n2\n4\n0\n", None),  # the ASCII format is not what Yosys writes here
        (aig(2, [(2, 4)], 6)[:-1], None),  # cut inside the gates
        (b"aig 3 2 1 1 0\n6\n", None),  # cut before the output
        (b"\x00\xff garbage", None),
        (b"", None),
        # hostile headers (a fuzzing pass): no exception, no allocation from the header alone, ABC's reading
        (b"aig " + b"0" * 4301 + b" 0 0 1 0\n0\n", None),  # more digits than int() takes
        (b"aig 0 0 0 1 0\n" + b"0" * 4301 + b"\n", None),
        (b"aig 268435455 0 0 1 268435455\n1\n", None),  # 2^28 gates promised in 32 bytes
        (b"aig 1000 0 0 1 1000\n0\n", None),  # the gates missing, even behind a constant output
        (b" aig 3 2 0 1 1\n6\n\x02\x02", None),  # ABC does not read these either
        (b"aig 3 2 0 1 1 0 0 0 0 0\n6\n\x02\x02", None),
        (aig(2, [(2, 4)], 6) + b"\x07junk", None),
        (aig(2, [(2, 4)], 6) + b"i0 x\nc\nmade by hand\n", ("cex", "exhaustive", ({0: 1, 1: 1},))),
    ],
)
def test_a_miter_is_decided_without_abc_only_where_that_is_complete(tmp_path, data, expected):
    from rtlreward_equivalence.yosys_server import aiger_decide

    (tmp_path / "eq.aig").write_bytes(data)
    assert aiger_decide(str(tmp_path / "eq.aig")) == expected
    assert aiger_decide(str(tmp_path / "missing.aig")) is None


# Pairs of combinational designs (reference, answer) over the same ports, equivalent or not, the last ones with an x
# and an undriven output (both free values in the miter).
COMB_PAIRS = [
    ("assign y = a ^ b ^ c;", "assign y = (a ^ b) ^ c;"),
    ("assign y = a ^ b ^ c;", "assign y = (a & ~b & ~c) | (~a & b & ~c) | (~a & ~b & c) | (a & b & c);"),
    ("assign y = (a & b) | (b & c) | (a & c);", "assign y = (a & b) | (b & c);"),
    ("assign y = a + b + c;", "assign y = {1'b0, a} + {1'b0, b} + c;"),
    ("assign y = c ? a : b;", "assign y = (c & a) | (~c & b);"),
    ("assign y = c ? a : b;", "assign y = (c & b) | (~c & a);"),
    ("assign y = a & b;", "assign y = 1'bx;"),
    ("assign y = a & b;", ""),
]


def _random_expr(rng, depth: int) -> str:
    if depth == 0 or rng.random() < 0.2:
        return rng.choice(["a", "b", "c", "~a", "~b", "~c", "1'b0", "1'b1"])
    op = rng.choice(["&", "|", "^", "?"])
    if op == "?":
        return f"({_random_expr(rng, depth - 1)} ? {_random_expr(rng, depth - 1)} : {_random_expr(rng, depth - 1)})"
    return f"({_random_expr(rng, depth - 1)} {op} {_random_expr(rng, depth - 1)})"


def _random_pairs(n: int) -> list[tuple[str, str]]:
    import random

    rng = random.Random(16)
    out = []
    for _ in range(n):
        ref = _random_expr(rng, 3)
        ans = ref if rng.random() < 0.3 else _random_expr(rng, 3)  # the same text restated, or another function
        out.append((f"assign y = {ref};", f"wire t = {ans};\n  assign y = t;"))
    return out


COMB_PAIRS += _random_pairs(12)


@pytest.mark.parametrize(("ref", "ans"), COMB_PAIRS)
def test_the_exhaustive_verdict_is_abcs_on_the_same_miter(pool, ref, ans):
    from rtlreward_equivalence import formal
    from rtlreward_equivalence.design import PortInfo
    from rtlreward_equivalence.yosys_server import aiger_decide

    def module(body: str) -> str:
        return f"module m(input a, input b, input c, output y);\n  {body}\nendmodule\n"

    names = formal.Names.fresh()
    inputs = [PortInfo(n, "input", 1, True) for n in "abc"]
    script = formal.miter_script(["gold.v"], ["gate.v"], "m", "wrapper.sv", names)
    files = {"eq.ys": script, "gold.v": module(ref), "gate.v": module(ans)}
    files["wrapper.sv"] = formal.wrapper(inputs, [PortInfo("y", "output", 1, True)], None, 1, names)
    exe = os.path.join(_pyosys_dir(), "pyosys", "yosys-abc")
    abc = [exe, "-s", "-c", formal.abc_pdr(5)]
    got = pool.prove(files, "eq.ys", 20.0, abc, 10.0, (formal.AIG, formal.MAP, "pdr.cex"))
    assert got is not None and got["yosys_done"], got
    aig_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"rtlr-{uuid.uuid4().hex}.aig"
    try:
        aig_file.write_bytes(got["files"][formal.AIG])
        decided = aiger_decide(str(aig_file))
    finally:
        aig_file.unlink(missing_ok=True)
    assert decided is not None and decided[1] in ("structural", "exhaustive"), decided
    by_abc = formal.parse_abc(got["stdout"])
    assert by_abc.verdict in ("proved", "cex"), got["stdout"]
    assert decided[0] == by_abc.verdict, (decided, got["stdout"])
    if decided[0] == "cex":  # ABC's counterexample sets the output too: both find a real difference
        inputs_map = formal.parse_map(got["files"][formal.MAP].decode())
        assert formal.parse_cex(got["files"]["pdr.cex"].decode(), inputs_map)


# Sequential pairs (reference, answer) over clk, rst, a, b -> q: each miter is decided from its file (`explicit`
# or `random`) and the verdict must be ABC's PDR verdict on the same file; a counterexample must set the output when
# the AIG is run on it (an evaluator of its own below).
SEQ = "module m(input clk, input rst, input a, input b, output reg [{w}:0] q);\n{body}\nendmodule\n"
SEQ_PAIRS = [
    # a counter, restated and wrapped differently
    ("always @(posedge clk) if (rst) q <= 0; else if (a) q <= q + 1;",
     "always @(posedge clk) begin if (rst) q <= 0; else q <= q + {2'b0, a}; end", 2),
    ("always @(posedge clk) if (rst) q <= 0; else if (a) q <= q + 1;",
     "always @(posedge clk) if (rst) q <= 0; else if (a) q <= (q == 3'd6) ? 3'd0 : q + 1;", 2),
    # a shift register: the same, and a tap that is one stage late
    ("always @(posedge clk) if (rst) q <= 0; else q <= {q[2:0], a ^ b};",
     "always @(posedge clk) if (rst) q <= 4'b0; else begin q[3:1] <= q[2:0]; q[0] <= a ^ b; end", 3),
    ("always @(posedge clk) if (rst) q <= 0; else q <= {q[2:0], a ^ b};",
     "always @(posedge clk) if (rst) q <= 0; else q <= {q[2:0], a ^ b ^ (q == 4'hf)};", 3),
    # an enable that the answer forgets, and a reset the answer ignores
    ("always @(posedge clk) if (rst) q <= 0; else if (b) q <= {q[0], a};",
     "always @(posedge clk) if (rst) q <= 0; else q <= {q[0], a};", 1),
    ("always @(posedge clk) if (rst) q <= 0; else if (b) q <= {q[0], a};",
     "always @(posedge clk) if (b) q <= {q[0], a};", 1),
    # a sequence detector (a then b) as two encodings of the same machine
    ("reg s; always @(posedge clk) if (rst) begin s <= 0; q <= 0; end else begin s <= a; q <= s & b; end",
     "reg [1:0] t; always @(posedge clk) if (rst) begin t <= 0; q <= 0; end else begin t <= {t[0], a}; "
     "q <= t[0] & b; end", 0),
    # a counter that differs only after 7 steps
    ("always @(posedge clk) if (rst) q <= 0; else if (a & b) q <= q + 1;",
     "always @(posedge clk) if (rst) q <= 0; else if (a & b) q <= (q == 3'd7) ? 3'd7 : q + 1;", 2),
]


def _run_aig(data: bytes, frames) -> int:
    """The output of the AIG at the last of `frames` (input index -> bit), from its latches' initial values."""
    from rtlreward_equivalence.yosys_server import _gates

    nl = data.find(b"\n")
    m, i, n_latches, _, n_ands = map(int, data[4:nl].split()[:5])
    pos = nl + 1
    nexts, state = [], []
    for _ in range(n_latches):
        end = data.find(b"\n", pos)
        parts = data[pos:end].split()
        nexts.append(int(parts[0]))
        state.append(int(parts[1]) if len(parts) > 1 else 0)
        pos = end + 1
    end = data.find(b"\n", pos)
    out = int(data[pos:end])
    r0, r1, _ = _gates(data, end + 1, i + n_latches, n_ands)
    for f, frame in enumerate(frames):
        v = [0] * (m + 1)
        v[1 : i + 1] = [frame.get(k, 0) for k in range(i)]
        v[i + 1 : i + 1 + n_latches] = state
        for a in range(n_ands):
            v[i + n_latches + 1 + a] = (v[r0[a] >> 1] ^ (r0[a] & 1)) & (v[r1[a] >> 1] ^ (r1[a] & 1))
        if f == len(frames) - 1:
            return v[out >> 1] ^ (out & 1)
        state = [v[x >> 1] ^ (x & 1) for x in nexts]
    return 0


@pytest.mark.parametrize(("ref", "ans", "top"), SEQ_PAIRS)
def test_the_sequential_verdict_is_abcs_on_the_same_miter(tmp_path, ref, ans, top):
    import subprocess
    import sys

    from rtlreward_equivalence import formal
    from rtlreward_equivalence.design import PortInfo, Reset
    from rtlreward_equivalence.yosys_server import aiger_decide
    from rtlreward_hdl.yosys import YOSYS_RUNNER

    if not _pyosys_dir():
        pytest.skip("needs the pyosys wheel")
    names = formal.Names.fresh()
    inputs = [PortInfo(n, "input", 1, True) for n in ("rst", "a", "b")]
    outputs = [PortInfo("q", "output", top + 1, True)]
    (tmp_path / "gold.v").write_text(SEQ.format(w=top, body=ref))
    (tmp_path / "gate.v").write_text(SEQ.format(w=top, body=ans))
    (tmp_path / "wrapper.sv").write_text(formal.wrapper(inputs, outputs, Reset("rst", False), 1, names, ("clk",)))
    (tmp_path / "eq.ys").write_text(formal.miter_script(["gold.v"], ["gate.v"], "m", "wrapper.sv", names))
    run = [sys.executable, "-I", "-S", "-c", YOSYS_RUNNER, "eq.ys", _pyosys_dir()]
    subprocess.run(run, cwd=tmp_path, check=True, capture_output=True, timeout=60)
    decided = aiger_decide(str(tmp_path / formal.AIG))
    assert decided is not None and decided[1] in ("explicit", "random"), decided
    abc = os.path.join(_pyosys_dir(), "pyosys", "yosys-abc")
    res = subprocess.run([abc, "-s", "-c", formal.abc_pdr(20)], cwd=tmp_path, capture_output=True, text=True)
    assert decided[0] == formal.parse_abc(res.stdout).verdict, (decided, res.stdout[-300:])
    if decided[0] == "cex":
        data = (tmp_path / formal.AIG).read_bytes()
        assert _run_aig(data, decided[2]) == 1
        assert _run_aig(data, decided[2][:-1]) == 0 or decided[1] == "random"  # explicit: the shortest


def test_the_library_read_once_maps_as_techmap_reads_it(pool):
    """A job's `techmap` with the built-in library the server read at start writes the same AIGER file, byte for
    byte, as one that reads the library itself (~15 ms a proof)."""
    from rtlreward_equivalence import formal
    from rtlreward_equivalence.design import PortInfo

    def module(body: str) -> str:
        return f"module m(input [3:0] a, input [3:0] b, output [4:0] y);\n  {body}\nendmodule\n"

    names = formal.Names.fresh()
    inputs = [PortInfo(n, "input", 4, True) for n in "ab"]
    files = {
        "eq.ys": formal.miter_script(["gold.v"], ["gate.v"], "m", "wrapper.sv", names),
        "gold.v": module("assign y = a + b;"),
        "gate.v": module("assign y = {1'b0, a} - {1'b0, ~b} - 5'd1;"),
        "wrapper.sv": formal.wrapper(inputs, [PortInfo("y", "output", 5, True)], None, 1, names),
    }
    assert "\ntechmap\n" in files["eq.ys"]
    got = {
        flag: pool.prove(
            files, "eq.ys", 20.0, None, 0.0, (formal.AIG, formal.MAP, "yosys.log"), builtin_techmap=flag
        )
        for flag in (False, True)
    }
    for answer in got.values():
        assert answer is not None and answer["rc"] == 0 and answer["files"][formal.AIG], answer
    log = {flag: answer["files"].pop("yosys.log").decode() for flag, answer in got.items()}
    assert "techmap.v' to AST" in log[False] and "techmap.v' to AST" not in log[True]  # read once, at start
    assert got[True]["files"] == got[False]["files"]


# Wide sequential pairs (33 input bits: no `explicit` walk, so ABC decides): like implementations written apart.
WIDE = "module m(input clk, input rst, input [31:0] a, output reg [31:0] q);\n{body}\nendmodule\n"
WIDE_PAIRS = [
    # falling edges captured until reset (VerilogEval Prob066), restated
    (
        "reg [31:0] p; always @(posedge clk) begin p <= a; if (rst) q <= 0; else q <= q | (p & ~a); end",
        "reg [31:0] last; wire [31:0] fell = last & ~a; always @(posedge clk) last <= a;\n"
        "always @(posedge clk) q <= rst ? 32'd0 : (fell | q);",
        "proved",
    ),
    # an accumulator, and one that drops the carry out of bit 15
    (
        "always @(posedge clk) if (rst) q <= 0; else q <= q + a;",
        "always @(posedge clk) if (rst) q <= 0; else q <= {q[31:16] + a[31:16], q[15:0] + a[15:0]};",
        "cex",
    ),
]


@pytest.mark.parametrize(("ref", "ans", "verdict"), WIDE_PAIRS)
def test_abc_merges_like_registers_before_pdr(tmp_path, ref, ans, verdict):
    """ABC's proof runs `scorr` before PDR (`formal.abc_pdr`): the registers of two like implementations are proved
    equal by induction and merged, so what PDR gets has none left; a difference is still found, and its
    counterexample sets the miter's output when the original AIG is run on it."""
    import subprocess
    import sys

    from rtlreward_equivalence import formal
    from rtlreward_equivalence.design import PortInfo, Reset
    from rtlreward_equivalence.yosys_server import aiger_decide
    from rtlreward_hdl.yosys import YOSYS_RUNNER

    if not _pyosys_dir():
        pytest.skip("needs the pyosys wheel")
    names = formal.Names.fresh()
    inputs = [PortInfo("rst", "input", 1, True), PortInfo("a", "input", 32, True)]
    outputs = [PortInfo("q", "output", 32, True)]
    (tmp_path / "gold.v").write_text(WIDE.format(body=ref))
    (tmp_path / "gate.v").write_text(WIDE.format(body=ans))
    (tmp_path / "wrapper.sv").write_text(
        formal.wrapper(inputs, outputs, Reset("rst", True), 1, names, ("clk",))
    )
    (tmp_path / "eq.ys").write_text(formal.miter_script(["gold.v"], ["gate.v"], "m", "wrapper.sv", names))
    run = [sys.executable, "-I", "-S", "-c", YOSYS_RUNNER, "eq.ys", _pyosys_dir()]
    subprocess.run(run, cwd=tmp_path, check=True, capture_output=True, timeout=60)
    decided = aiger_decide(str(tmp_path / formal.AIG))
    assert decided is None or decided[1] == "random", decided  # past the in-process deciders' proofs
    abc = os.path.join(_pyosys_dir(), "pyosys", "yosys-abc")
    res = subprocess.run([abc, "-s", "-c", formal.abc_pdr(20)], cwd=tmp_path, capture_output=True, text=True)
    assert formal.parse_abc(res.stdout).verdict == verdict, res.stdout[-400:]
    latches = [int(n) for n in re.findall(r"lat =\s*(\d+)", res.stdout)]
    assert len(latches) == 2 and latches[0] > 0, res.stdout  # the network before and after `scorr`
    if verdict == "proved":
        assert latches[1] == 0, res.stdout  # every register of one side merged with its twin
    else:
        frames = formal.parse_cex(
            (tmp_path / "pdr.cex").read_text(), formal.parse_map((tmp_path / formal.MAP).read_text())
        )
        assert frames
        by_index = {}
        for idx, (name, pos) in formal.parse_map((tmp_path / formal.MAP).read_text()).items():
            by_index[idx] = (name, pos)
        bits = [{i: (f.get(name, 0) >> pos) & 1 for i, (name, pos) in by_index.items()} for f in frames]
        assert _run_aig((tmp_path / formal.AIG).read_bytes(), bits) == 1
