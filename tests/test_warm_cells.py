"""Warm sandbox cells (rtlreward.sandbox.cells): a candidate's commands run as forked jobs of one long-lived
bubblewrap sandbox, with every guarantee a sandbox per command gave. Real bubblewrap, real tools."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from sandbox_helpers import interrupt_a_running_command

from rtlreward.sandbox import MAX_OUTPUT_BYTES, Limits
from rtlreward.sandbox.local import LocalExecutor, remove_workspace

pytestmark = pytest.mark.skipif(LocalExecutor(warm=False).bwrap is None, reason="warm cells need bubblewrap")


@pytest.fixture
def ex(monkeypatch, tmp_path):
    monkeypatch.delenv("RTLREWARD_WARM_SANDBOX", raising=False)
    monkeypatch.setenv("RTLREWARD_WORKSPACE_DIR", str(tmp_path / "ws"))
    executor = LocalExecutor()
    yield executor
    executor.close()


def _done(ex: LocalExecutor, ws: Path) -> None:
    remove_workspace(ws)
    ex.release_workspace(ws)


def test_a_candidates_commands_run_as_jobs_of_its_cell(ex):
    ws = ex.make_workspace("t")
    (ws / "in.txt").write_text("hello\n")
    first = ex.run(["sh", "-c", "cat in.txt; echo out > out.txt; echo err >&2; exit 3"], workspace=ws)
    assert (first.returncode, first.stdout, first.stderr) == (3, "hello\n", "err\n")
    assert first.sandboxed and not first.timed_out
    assert (ws / "out.txt").read_text() == "out\n"  # written where the host reads it
    fed = ex.run(["cat"], workspace=ws, stdin="from stdin")
    assert fed.stdout == "from stdin"
    assert ex.stats().get("warm") == 2 and ex.stats().get("cells") == 1
    _done(ex, ws)
    ws2 = ex.make_workspace("t")
    ex.run(["true"], workspace=ws2)
    assert ex.stats().get("cells") == 1 and ex.stats().get("warm") == 3  # the next candidate, the same cell
    _done(ex, ws2)


def test_without_cells_every_command_has_a_sandbox_of_its_own(monkeypatch, tmp_path):
    monkeypatch.setenv("RTLREWARD_WARM_SANDBOX", "0")
    monkeypatch.setenv("RTLREWARD_WORKSPACE_DIR", str(tmp_path))
    ex = LocalExecutor()
    ws = ex.make_workspace("t")
    assert ex.run(["true"], workspace=ws).ok and ex.stats() == {}
    _done(ex, ws)


def test_nothing_a_job_leaves_running_or_in_tmp_reaches_the_next_job(ex):
    ws = ex.make_workspace("t")
    left = ex.run(
        [
            "sh",
            "-c",
            "setsid sleep 60 >/dev/null 2>&1 & echo $!; echo x >/tmp/left; echo y >/dev/shm/left 2>/dev/null; true",
        ],
        workspace=ws,
    )
    pid = left.stdout.strip()
    assert left.ok and pid.isdigit()
    seen = ex.run(
        [
            "sh",
            "-c",
            f"kill -0 {pid} 2>/dev/null && echo ALIVE; ls -A /tmp /dev/shm; ps -e 2>/dev/null | wc -l",
        ],
        workspace=ws,
    )
    assert "ALIVE" not in seen.stdout
    assert "left" not in seen.stdout
    assert ex.stats().get("warm") == 2
    _done(ex, ws)


def test_the_time_limit_kills_the_job_and_its_group(ex):
    ws = ex.make_workspace("t")
    t0 = time.monotonic()
    res = ex.run(["sh", "-c", "sleep 30 & sleep 30"], workspace=ws, limits=Limits(timeout=0.5))
    assert res.timed_out and not res.ok
    assert time.monotonic() - t0 < 5
    after = ex.run(["echo", "next"], workspace=ws)
    assert after.stdout == "next\n"
    _done(ex, ws)
    assert ex.stats().get("ended: retired") == 1  # a cell whose job ran out of time is not lent again


def test_a_job_that_closes_its_pipes_before_it_exits_reports_its_own_exit_status(ex):
    """GNU tools close stdout at exit, just before they end; on a loaded machine the pipes' end was read before the
    exit, and the SIGKILL meant for leftovers turned a clean exit into -9 (a compile read as failed, a reference's
    trace as cut short: CI, 2026-11-29). The job is waited for until its own deadline."""
    ws = ex.make_workspace("t")
    closed = ex.run(["sh", "-c", "echo out; exec >&- 2>&-; sleep 0.3; exit 3"], workspace=ws)
    assert (closed.returncode, closed.stdout, closed.timed_out) == (3, "out\n", False)
    # one that closes its pipes and runs on is still cut at its limit, as a timeout
    t0 = time.monotonic()
    hung = ex.run(["sh", "-c", "exec >&- 2>&-; sleep 30"], workspace=ws, limits=Limits(timeout=0.5))
    assert hung.timed_out and not hung.ok
    assert time.monotonic() - t0 < 5
    _done(ex, ws)


def test_a_run_interrupted_while_its_job_runs_ends_the_cell(ex):
    """A caller interrupted while a cell's job runs (a Ctrl-C): the job's answer would come later and be read as the
    next command's (red-team: every later command got the result of the one before), so the cell ends with its job
    and the next command gets its own result."""
    ws = ex.make_workspace("t")
    took, hit, left = interrupt_a_running_command(ex, ws)
    assert hit and took < 5
    assert left == []
    nxt = ex.run(["sh", "-c", "echo second; exit 5"], workspace=ws)
    assert (nxt.returncode, nxt.stdout, nxt.timed_out) == (5, "second\n", False)
    assert ex.stats().get("ended: interrupted") == 1
    _done(ex, ws)


def test_output_past_the_cap_is_dropped(ex):
    ws = ex.make_workspace("t")
    res = ex.run(["sh", "-c", "head -c 8000000 /dev/zero | tr '\\0' a"], workspace=ws)
    assert res.truncated and len(res.stdout) <= MAX_OUTPUT_BYTES + 100
    assert ex.stats().get("warm") == 1
    _done(ex, ws)


@pytest.mark.parametrize(
    "argv, limits",
    [
        (["python3", "-c", "b = bytearray(600 * 1024 * 1024)"], Limits(memory_mb=256)),
        (["sh", "-c", "head -c 3000000 /dev/zero > big"], Limits(file_size_mb=1)),
        (["sh", "-c", "for i in 1 2 3 4 5 6 7 8; do sleep 1 & done; wait"], Limits(pids=4)),
    ],
    ids=["memory", "file-size", "processes"],
)
def test_limits_hold_as_in_a_sandbox_of_its_own(ex, tmp_path, argv, limits):
    """A job's limits are lower than the cell's: it gets them in its own process (the fork path), and fails
    exactly as the same command in a sandbox of its own."""
    ws = ex.make_workspace("t")
    warm = ex.run(argv, workspace=ws, limits=limits)
    assert ex.stats().get("warm") == 1
    cold_ex = LocalExecutor(warm=False)
    cold_ws = tmp_path / "cold"
    cold_ws.mkdir()
    cold = cold_ex.run(argv, workspace=cold_ws, limits=limits)
    assert not warm.ok and not cold.ok
    assert warm.returncode == cold.returncode
    _done(ex, ws)


def test_a_job_that_kills_the_cell_is_run_again_in_a_sandbox_of_its_own(ex):
    ws = ex.make_workspace("t")
    res = ex.run(["sh", "-c", "kill -9 -1; echo done"], workspace=ws)  # the server runs as the same uid
    assert res.ok and res.stdout == "done\n"
    assert ex.stats().get("fallback") == 1 and ex.stats().get("ended: no answer") == 1
    assert ex.run(["echo", "still"], workspace=ws).stdout == "still\n"  # the rest of the candidate: one-shot
    _done(ex, ws)
    ws2 = ex.make_workspace("t")
    assert ex.run(["true"], workspace=ws2).ok
    assert ex.stats().get("cells") == 2  # the next candidate gets a new cell
    _done(ex, ws2)


def test_a_job_cannot_reach_the_servers_pipes(ex):
    ws = ex.make_workspace("t")
    res = ex.run(
        [
            "sh",
            "-c",
            # the needle is built at run time: this script's own command line must not match it
            "n=cell; n=${n}_server; for p in /proc/[0-9]*; do if grep -q $n $p/cmdline 2>/dev/null; then "
            "echo server $p; ls $p/fd >/dev/null 2>&1 && echo REACHED; fi; done",
        ],
        workspace=ws,
    )
    assert (
        "server" in res.stdout and "REACHED" not in res.stdout
    )  # the server, and bubblewrap's init (root's)
    _done(ex, ws)


def test_the_slot_holds_only_the_workspace_and_is_not_writable(ex):
    ws = ex.make_workspace("t")
    res = ex.run(["sh", "-c", "ls -A ..; touch ../planted && echo PLANTED"], workspace=ws)
    assert res.stdout.split() == [ws.name]
    assert "PLANTED" not in res.stdout
    assert not (ws.parent / "planted").exists()
    _done(ex, ws)


def test_cancel_kills_a_running_job(ex):
    ws = ex.make_workspace("t")
    box = {}

    def run():
        box["res"] = ex.run(["sleep", "30"], workspace=ws, limits=Limits(timeout=60))

    t = threading.Thread(target=run)
    t0 = time.monotonic()
    t.start()
    time.sleep(0.5)
    ex.cancel(ws)
    t.join(10)
    assert not t.is_alive() and time.monotonic() - t0 < 10
    assert box["res"].timed_out and "cancelled" in box["res"].stderr
    _done(ex, ws)


def test_concurrent_commands_of_one_candidate_share_its_uid(ex):
    """One job at a time per cell: the other command runs in a sandbox of its own, as the same uid, so both
    can write the workspace and read what the other wrote."""
    ws = ex.make_workspace("t")
    out = {}

    def run(name):
        out[name] = ex.run(["sh", "-c", f"sleep 0.5; echo {name} > {name}.txt; id -u"], workspace=ws)

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert out["a"].ok and out["b"].ok
    assert out["a"].stdout == out["b"].stdout
    assert ex.stats().get("warm") == 1
    both = ex.run(["sh", "-c", "cat a.txt b.txt; echo c >> a.txt && echo appended"], workspace=ws)
    assert both.stdout == "a\nb\nappended\n"
    # The contention started a second server in the cell: the next two concurrent commands both run warm, each in
    # its own PID namespace (what one leaves running is not the other's to see).
    for _ in range(100):
        if ex.stats().get("servers"):
            break
        time.sleep(0.05)
    assert ex.stats().get("servers") == 1
    warm_before = ex.stats()["warm"]
    threads = [threading.Thread(target=run, args=(n,)) for n in ("c", "d")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert out["c"].ok and out["d"].ok and ex.stats()["warm"] == warm_before + 2
    _done(ex, ws)


def test_a_command_needing_another_mount_runs_alone_then_later_cells_have_it(ex, tmp_path):
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "note.txt").write_text("tool data\n")
    ws = ex.make_workspace("t")
    first = ex.run(["cat", str(tools / "note.txt")], workspace=ws, read_only=[tools])
    assert first.stdout == "tool data\n" and not ex.stats().get("warm")
    assert "cat" not in ex.run(["ls", str(tools)], workspace=ws).stdout  # the cell does not show it
    _done(ex, ws)
    ws2 = ex.make_workspace("t")
    again = ex.run(["cat", str(tools / "note.txt")], workspace=ws2, read_only=[tools])
    assert again.stdout == "tool data\n" and ex.stats().get("warm") == 2
    assert ex.stats().get("ended: new mounts were learned") == 1
    _done(ex, ws2)


def test_whether_a_cell_holds_a_commands_folders_is_worked_out_once(ex, tmp_path, monkeypatch):
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "note.txt").write_text("tool data\n")
    ws = ex.make_workspace("t")
    ex.run(["cat", str(tools / "note.txt")], workspace=ws, read_only=[tools])  # learned: later cells hold it
    _done(ex, ws)
    trees = []
    real = ex._filesystem
    monkeypatch.setattr(ex, "_filesystem", lambda *a, **k: trees.append(a) or real(*a, **k))
    for _ in range(3):
        ws = ex.make_workspace("t")
        res = ex.run(["cat", str(tools / "note.txt")], workspace=ws, read_only=[tools])
        assert res.stdout == "tool data\n"
        _done(ex, ws)
    assert ex.stats().get("warm") == 3
    # The new cell's own mount tree once, then the cell's and the command's compared once for all three candidates
    # (each of them twice per command before).
    assert len(trees) == 3
    # A read-only folder inside the workspace is never answered from that memory: it needs a sandbox of its own.
    ws = ex.make_workspace("t")
    (ws / "h").mkdir()
    ex.run(["true"], workspace=ws, read_only=[ws / "h"])
    ex.run(["true"], workspace=ws, read_only=[ws / "h"])
    assert ex.stats().get("warm") == 3
    _done(ex, ws)


def test_a_read_only_folder_inside_the_workspace_needs_its_own_sandbox(ex):
    ws = ex.make_workspace("t")
    frozen = ws / "harness"
    frozen.mkdir()
    (frozen / "tb.v").write_text("// tb\n")
    res = ex.run(["sh", "-c", "echo x > harness/tb.v || echo REFUSED"], workspace=ws, read_only=[frozen])
    assert "REFUSED" in res.stdout + res.stderr or res.returncode != 0
    assert (frozen / "tb.v").read_text() == "// tb\n"
    assert not ex.stats().get("warm")
    _done(ex, ws)


def test_engine_scores_the_same_with_and_without_cells(monkeypatch, tmp_path):
    from rtlreward.engine import Engine
    from rtlreward.integration import load_tasks
    from rtlreward_hdl.mutate import mutants

    monkeypatch.setenv("RTLREWARD_WORKSPACE_DIR", str(tmp_path))
    task = load_tasks("verilog-eval", skip_known_issues=True, limit=12)[10]
    ref = next(iter(task.reference.values()))
    wrong = next(iter(mutants(dict(task.reference), limit=1)[0].files.values()))
    replies = [f"```verilog\n{ref}\n```", f"```verilog\n{wrong}\n```", "no code here"]
    results = {}
    for warm in ("1", "0"):
        monkeypatch.setenv("RTLREWARD_WARM_SANDBOX", warm)
        with Engine("shaped", cache=False, jobs=1) as eng:
            rewards = [eng.score(task, r) for r in replies]
            results[warm] = [(r.total, {n: s.status.value for n, s in r.stages.items()}) for r in rewards]
            if warm == "1":
                assert eng.executor.stats().get("warm", 0) >= 4
            else:
                assert eng.executor.stats() == {}
    assert results["1"] == results["0"]
    assert results["1"][0][0] > results["1"][1][0] > results["1"][2][0]
    assert not list(Path(tmp_path).glob("rtlreward-*/rtlreward-*"))  # no workspace left in a cell's slot


def test_a_forked_child_uses_cells_of_its_own(ex):
    """A trainer that forks workers after scoring (multiprocessing's fork) must not talk to its parent's cells:
    their servers answer the parent, on pipes the parent reads."""
    ws = ex.make_workspace("t")
    assert ex.run(["true"], workspace=ws).ok
    pid = os.fork()
    if pid == 0:  # the child: a workspace and a command of its own, then out without pytest's teardown
        code = 1
        try:
            child_ws = ex.make_workspace("child")
            res = ex.run(["echo", "child"], workspace=child_ws)
            code = 0 if res.stdout == "child\n" and ex.stats().get("warm", 0) >= 2 else 2
            remove_workspace(child_ws)
            ex.release_workspace(child_ws)
            ex.close()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert ex.run(["echo", "parent"], workspace=ws).stdout == "parent\n"  # the parent's cell still answers it
    _done(ex, ws)


def test_the_cell_server_refuses_to_run_outside_a_sandbox(tmp_path):
    """Its `kill(-1)` after each job is only safe in a PID namespace of its own: run bare, it exits at once."""
    import subprocess
    import sys

    from rtlreward.sandbox.cells import SERVER

    proc = subprocess.run(
        [sys.executable, "-I", "-S", str(SERVER)], input=b"", capture_output=True, cwd=tmp_path, timeout=60
    )
    assert proc.returncode == 2 and b"refusing" in proc.stderr, proc


_PY = "python3 -c "
_SHM = "import ctypes; l = ctypes.CDLL(None); "


@pytest.mark.parametrize(
    "plant, probe",
    [
        # the server's limits and scheduling, changed through its pid by a job of the same uid
        ("prlimit --pid $PPID --fsize=1024:1024 --nofile=32:32", "head -c 100000 /dev/zero > f && echo OK"),
        ("renice -n 19 -p $PPID >/dev/null", "[ $(nice) = 0 ] && echo OK"),
        # a folder the job made unreadable in /tmp
        ("mkdir /tmp/keep && echo x > /tmp/keep/n && chmod 000 /tmp/keep", "[ ! -e /tmp/keep ] && echo OK"),
        # System V shared memory and POSIX message queues: objects no process owns
        (
            _PY + f'"{_SHM}assert l.shmget(0x5EC, 4096, 0o1666) >= 0"',
            _PY + f"\"{_SHM}print('OK' if l.shmget(0x5EC, 0, 0) < 0 else 'LEAK')\"",
        ),
        (
            _PY
            + "\"import ctypes; r = ctypes.CDLL('librt.so.1'); assert r.mq_open(b'/rtlq', 0o102, 0o600, None) >= 0\"",
            _PY
            + "\"import ctypes; r = ctypes.CDLL('librt.so.1'); print('OK' if r.mq_open(b'/rtlq', 0) < 0 else 'LEAK')\"",
        ),
        # a loopback connection closed by its client: its TIME_WAIT entry outlives every process for a minute
        (
            _PY + "\"import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
            'c = socket.create_connection(s.getsockname()); a, _ = s.accept(); c.close(); a.close(); s.close()"',
            _PY + "\"print('OK' if len(open('/proc/net/tcp').read().splitlines()) == 1 else 'LEAK')\"",
        ),
    ],
    ids=["limits", "nice", "unreadable-tmp", "sysv-shm", "posix-mqueue", "tcp-time-wait"],
)
def test_nothing_a_candidate_plants_reaches_the_next_one(ex, plant, probe):
    """Found by a red-team pass: each of these outlived a job in the cell and reached the next candidate. Now the
    server cleans it up, or notices it cannot and ends the cell (the command then runs in a sandbox of its own)."""
    ws = ex.make_workspace("a")
    # Where the server notices the change only after the job (its limits, its nice value), it ends without an
    # answer and the command runs again in a sandbox of its own, where the same change is refused: no assertion
    # on this result, only on what the next candidate meets.
    ex.run(["sh", "-c", plant], workspace=ws)
    _done(ex, ws)
    ws2 = ex.make_workspace("b")
    seen = ex.run(["sh", "-c", probe], workspace=ws2)
    assert seen.stdout.strip() == "OK", seen
    assert ex.run(["true"], workspace=ws2).ok
    _done(ex, ws2)


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="syscall numbers of x86_64")
@pytest.mark.parametrize("warm", [True, False], ids=["cell", "own-sandbox"])
def test_kernel_keys_are_refused_in_every_sandbox(monkeypatch, tmp_path, warm):
    """A uid's keyrings (user, user-session, persistent: days) outlive its processes, so a key one command adds
    would be there for a later command leased the same uid, in a cell or not (found by the red-team passes). The
    seccomp filter of every sandbox refuses add_key, request_key and keyctl with EPERM."""
    monkeypatch.setenv("RTLREWARD_WORKSPACE_DIR", str(tmp_path))
    ex = LocalExecutor(warm=warm)
    ws = ex.make_workspace("a")
    calls = {
        "add_key": "l.syscall(248, b'user', b'rtlk', b'secret', 6, -4)",
        "request_key": "l.syscall(249, b'user', b'rtlk', None, -4)",
        "keyctl": "l.syscall(250, 22, -1, -2)",  # KEYCTL_GET_PERSISTENT
    }
    for name, call in calls.items():
        code = (
            f"import ctypes; l = ctypes.CDLL(None, use_errno=True); r = {call}; print(r, ctypes.get_errno())"
        )
        res = ex.run(["python3", "-c", code], workspace=ws)
        assert res.stdout.split() == ["-1", "1"], (name, res)  # EPERM
    assert ex.run(["sh", "-c", "echo fine"], workspace=ws).stdout == "fine\n"
    assert bool(ex.stats().get("warm")) == warm
    _done(ex, ws)
    ex.close()


def _seccomp_action(prog: bytes, arch: int, nr: int) -> int:
    """Run the classic-BPF program on (arch, nr) the way the kernel does (only the opcodes it uses)."""
    import struct

    ins = [struct.unpack("=HBBI", prog[i : i + 8]) for i in range(0, len(prog), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = ins[pc]
        if code == 0x20:
            acc = {0: nr, 4: arch}[k]
        elif code == 0x06:
            return k
        elif code in (0x15, 0x35):
            hit = acc == k if code == 0x15 else acc >= k
            pc += jt if hit else jf
        else:
            raise AssertionError(f"opcode {code:#x}")
        pc += 1


def test_the_seccomp_program_denies_exactly_the_key_calls():
    from rtlreward.sandbox import seccomp as sc

    prog = sc.program("x86_64")
    for arch, denied in sc.DENIED.items():
        if arch == sc.ARCH_AARCH64:
            continue
        for nr in range(0, 450):
            want = sc.DENY if nr in denied else sc.ALLOW
            assert _seccomp_action(prog, arch, nr) == want, (hex(arch), nr)
    assert _seccomp_action(prog, sc.ARCH_X86_64, sc.X32_BIT | 0) == sc.DENY  # the x32 ABI, refused whole
    assert _seccomp_action(prog, sc.ARCH_X86_64, sc.X32_BIT | 250) == sc.DENY
    assert (
        _seccomp_action(prog, sc.ARCH_AARCH64, 219) == sc.ALLOW
    )  # another machine's numbers: not this filter
    arm = sc.program("aarch64")
    assert [_seccomp_action(arm, sc.ARCH_AARCH64, n) for n in (216, 217, 218, 219, 220)] == [
        sc.ALLOW,
        sc.DENY,
        sc.DENY,
        sc.DENY,
        sc.ALLOW,
    ]
    assert sc.program("riscv64") is None
