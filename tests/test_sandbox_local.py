"""The local executor against real hostile commands, with and without bubblewrap."""

from __future__ import annotations

import os
import stat
import sys
import warnings
from pathlib import Path

import pytest
from sandbox_helpers import interrupt_a_running_command, procs_with, token, wait_gone

from rtlreward.sandbox import MAX_OUTPUT_BYTES, Limits
from rtlreward.sandbox import local as local_mod
from rtlreward.sandbox.local import LocalExecutor, remove_workspace

PY = sys.executable


def _bwrap_usable() -> bool:
    import shutil

    b = shutil.which("bwrap")
    return b is not None and local_mod._bwrap_works(b)


needs_bwrap = pytest.mark.skipif(not _bwrap_usable(), reason="bubblewrap is not usable on this machine")


@pytest.fixture(scope="module")
def bw() -> LocalExecutor:
    if not _bwrap_usable():
        pytest.skip("bubblewrap is not usable on this machine")
    return LocalExecutor(use_bwrap=True)


@pytest.fixture(scope="module")
def bare() -> LocalExecutor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return LocalExecutor(use_bwrap=False)


@pytest.fixture(params=["bwrap", "bare"])
def ex(request, bw_or_none, bare) -> LocalExecutor:
    if request.param == "bwrap":
        if bw_or_none is None:
            pytest.skip("bubblewrap is not usable on this machine")
        return bw_or_none
    return bare


@pytest.fixture(scope="module")
def bw_or_none() -> LocalExecutor | None:
    return LocalExecutor(use_bwrap=True) if _bwrap_usable() else None


@pytest.fixture
def ws(tmp_path) -> Path:
    d = tmp_path / "ws"
    d.mkdir()
    return d


# -- wall clock ------------------------------------------------------------------------------------------------


def test_timeout_kills_grandchildren_and_setsid_daemons(ex, ws):
    t = token()
    script = (
        f"sleep {t} & "  # a plain child
        f"sh -c 'sleep {t} & sleep {t}' & "  # grandchildren
        f"(setsid sh -c 'sleep {t} </dev/null >/dev/null 2>&1 &' &) ; "  # double-forked daemon in a new session
        f"sleep {t}"
    )
    r = ex.run(["sh", "-c", script], workspace=ws, limits=Limits(timeout=1.5))
    assert r.timed_out and not r.ok
    assert wait_gone(t) == []


def test_daemon_left_behind_by_a_finished_command_is_killed(ex, ws):
    t = token()
    script = (
        f"setsid sh -c 'touch alive; exec sleep {t}' </dev/null >/dev/null 2>&1 & "
        "until [ -e alive ]; do sleep 0.01; done; echo started"
    )
    r = ex.run(["sh", "-c", script], workspace=ws, limits=Limits(timeout=10))
    assert r.ok and not r.timed_out and "started" in r.stdout
    assert wait_gone(t) == []


def test_a_command_that_closes_its_pipes_before_it_exits_reports_its_own_exit_status(ex, ws):
    """GNU tools close stdout at exit, just before they end: the command is waited for until its deadline (it was
    1 s, then a SIGKILL made a clean exit -9); one that closes its pipes and runs on is cut there, as a timeout."""
    r = ex.run(
        ["sh", "-c", "echo out; exec >&- 2>&-; sleep 1.3; exit 3"], workspace=ws, limits=Limits(timeout=10)
    )
    assert (r.returncode, r.stdout, r.timed_out) == (3, "out\n", False)
    hung = ex.run(["sh", "-c", "exec >&- 2>&-; sleep 30"], workspace=ws, limits=Limits(timeout=1))
    assert hung.timed_out and not hung.ok


def test_an_interrupted_run_kills_its_command_at_once(ex, ws):
    """An exception in the caller while a command runs (a Ctrl-C) ends the command then and there: the wait for a
    command that closed its pipes is only for one whose output was read to the end (red-team: it waited out the
    command's whole limit, and a second interrupt in that wait left the command running)."""
    took, hit, left = interrupt_a_running_command(ex, ws)
    assert hit and took < 5
    assert left == []


def test_many_processes_all_die_on_timeout(ex, ws):
    t = token()
    r = ex.run(
        ["sh", "-c", f"for i in $(seq 150); do sleep {t} & done; wait"],
        workspace=ws,
        limits=Limits(timeout=1.5),
    )
    assert r.timed_out
    assert wait_gone(t) == []


def test_zero_delay_loop_times_out(ex, ws):
    r = ex.run([PY, "-c", "while True: pass"], workspace=ws, limits=Limits(timeout=1))
    assert r.timed_out and r.returncode < 0


# -- memory, file size, processes ------------------------------------------------------------------------------


def test_memory_limit_stops_a_1gib_allocation(ex, ws):
    code = "b = bytearray(1 << 30); b[::4096] = b'x' * len(b[::4096]); print('allocated')"
    small = ex.run([PY, "-c", code], workspace=ws, limits=Limits(timeout=30, memory_mb=512))
    assert small.returncode != 0 and "allocated" not in small.stdout
    assert "MemoryError" in small.stderr
    big = ex.run([PY, "-c", code], workspace=ws, limits=Limits(timeout=30, memory_mb=3072))
    assert big.ok and "allocated" in big.stdout  # the limit, not the command, made the difference


def test_file_size_limit(ex, ws):
    r = ex.run(
        ["sh", "-c", "head -c 5000000 /dev/zero > big.bin"],
        workspace=ws,
        limits=Limits(timeout=10, file_size_mb=1),
    )
    assert r.returncode != 0
    assert (ws / "big.bin").stat().st_size <= 1024 * 1024


def test_process_limit(ex, ws):
    if os.getuid() == 0 and not ex.drops_privileges:
        pytest.skip(
            "this executor keeps root here (no bubblewrap, interpreter out of the sandbox uid's reach)"
        )
    r = ex.run(
        ["sh", "-c", "for i in $(seq 200); do sleep 5 & done; wait"],
        workspace=ws,
        limits=Limits(timeout=10, pids=20),
    )
    assert "fork" in r.stderr.lower() or "resource" in r.stderr.lower()


# -- environment and output ------------------------------------------------------------------------------------


def test_environment_is_scrubbed(ex, ws, monkeypatch):
    monkeypatch.setenv("TINKER_API_KEY", "sk-very-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "also-secret")
    r = ex.run(["env"], workspace=ws, env={"MINE": "1"}, limits=Limits(timeout=10))
    assert r.ok
    assert "sk-very-secret" not in r.stdout and "also-secret" not in r.stdout
    assert "MINE=1" in r.stdout and f"HOME={ws.resolve()}" in r.stdout


def test_output_is_capped_and_flagged(ex, ws):
    r = ex.run(
        ["sh", "-c", "head -c 20000000 /dev/zero | tr '\\0' x"], workspace=ws, limits=Limits(timeout=30)
    )
    assert r.ok and r.truncated
    assert MAX_OUTPUT_BYTES <= len(r.stdout) < MAX_OUTPUT_BYTES + 100


def test_endless_output_until_timeout_stays_capped(ex, ws):
    r = ex.run(["yes"], workspace=ws, limits=Limits(timeout=1))
    assert r.timed_out and r.truncated and len(r.stdout) < MAX_OUTPUT_BYTES + 100


def test_stdin_and_missing_program(ex, ws):
    r = ex.run(["cat"], workspace=ws, stdin="hello\n" * 50000, limits=Limits(timeout=10))
    assert r.ok and r.stdout == "hello\n" * 50000
    missing = ex.run(["/nonexistent/tool"], workspace=ws, limits=Limits(timeout=10))
    assert not missing.ok and missing.returncode != 0


def test_cwd_outside_workspace_is_refused(ex, ws, tmp_path):
    with pytest.raises(ValueError, match="outside the workspace"):
        ex.run(["true"], workspace=ws, cwd=tmp_path)


def test_warns_once_without_bwrap(monkeypatch):
    monkeypatch.setattr(local_mod, "_warned_no_bwrap", False)
    with pytest.warns(UserWarning, match="bubblewrap"):
        LocalExecutor(use_bwrap=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LocalExecutor(use_bwrap=False)  # no second warning
    assert LocalExecutor(use_bwrap=False).describe()["isolation"] == "none"


# -- file system and network (bubblewrap only) -----------------------------------------------------------------


@needs_bwrap
def test_writes_only_inside_workspace(bw, ws):
    t = token().replace(".", "")
    script = (
        f"echo ok > inside.txt; echo tmp > /tmp/rtlr-{t}; cat /tmp/rtlr-{t}; "
        f"touch /etc/rtlr-{t} 2>/dev/null && echo ETC-WRITABLE; "
        f"touch {Path.cwd()}/rtlr-{t} 2>/dev/null && echo HOST-WRITABLE; echo $HOME"
    )
    r = bw.run(["sh", "-c", script], workspace=ws, limits=Limits(timeout=10))
    assert r.ok, r.output
    assert (ws / "inside.txt").read_text() == "ok\n"
    assert "tmp" in r.stdout and not Path(f"/tmp/rtlr-{t}").exists()  # private /tmp
    assert "ETC-WRITABLE" not in r.stdout and not Path(f"/etc/rtlr-{t}").exists()
    assert "HOST-WRITABLE" not in r.stdout and not (Path.cwd() / f"rtlr-{t}").exists()
    assert r.stdout.strip().endswith(str(ws.resolve())) and r.sandboxed


@needs_bwrap
def test_no_network_no_capabilities_no_sockets(bw, ws):
    code = (
        "import socket\n"
        "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2); print('NET-OPEN')\n"
        "except OSError as e:\n    print('blocked', e.errno)\n"
        "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])\n"
        "import os; print('SOCK' if os.path.exists('/run/docker.sock') or os.path.exists('/var/run/docker.sock')"
        " else 'nosock')\n"
    )
    r = bw.run([PY, "-c", code], workspace=ws, limits=Limits(timeout=10))
    assert r.ok, r.output
    assert "NET-OPEN" not in r.stdout and "blocked" in r.stdout
    assert "0000000000000000" in r.stdout  # no capabilities even when the trainer runs as root
    assert "nosock" in r.stdout
    ifaces = bw.run(["cat", "/proc/net/dev"], workspace=ws, limits=Limits(timeout=10)).stdout
    assert "lo:" in ifaces and "eth0" not in ifaces


@needs_bwrap
def test_home_is_hidden_but_read_only_paths_are_visible(bw, ws, tmp_path):
    secret = Path.home() / f".rtlreward-test-secret-{token()}"
    secret.write_text("credential")
    harness = tmp_path / "harness"
    harness.mkdir()
    (harness / "test_x.py").write_text("HARNESS")
    other = tmp_path / "other"
    other.mkdir()
    (other / "hidden_tests.py").write_text("REFERENCE")
    try:
        script = (
            f"cat {secret} 2>/dev/null; cat {harness}/test_x.py; cat {other}/hidden_tests.py 2>/dev/null; "
            f"touch {harness}/w 2>/dev/null && echo HARNESS-WRITABLE; {PY} -c 'import rtlreward, attrs; print(7)'"
        )
        r = bw.run(["sh", "-c", script], workspace=ws, read_only=[harness], limits=Limits(timeout=20))
    finally:
        secret.unlink()
    assert "credential" not in r.stdout
    assert "HARNESS" in r.stdout and "REFERENCE" not in r.stdout
    assert "HARNESS-WRITABLE" not in r.stdout and not (harness / "w").exists()
    assert r.stdout.strip().endswith("7"), r.output  # the interpreter and its packages stay usable


@needs_bwrap
def test_workspace_files_stay_removable_and_the_workspace_returns_to_the_caller(bw, ws):
    script = (
        "mkdir -p locked/deep && echo x > locked/deep/f && chmod 000 locked/deep locked && echo y > plain"
    )
    r = bw.run(["sh", "-c", script], workspace=ws, limits=Limits(timeout=10))
    assert r.ok, r.output
    if os.getuid() == 0:  # written by the leased sandbox uid; the folder itself is root's again, closed
        assert (ws / "plain").stat().st_uid in local_mod._sandbox_uids()
        assert (ws.stat().st_uid, ws.stat().st_gid, ws.stat().st_mode & 0o777) == (0, 0, 0o700)
    else:
        assert (ws / "plain").stat().st_uid == os.getuid()
    assert (ws / "plain").read_text() == "y\n"  # the parent reads results
    remove_workspace(ws)
    assert not ws.exists()


def test_fork_of_marked_processes_is_found_without_bwrap(bare, ws):
    t = token()
    script = (
        f"setsid sh -c 'sleep {t} & touch alive; exec sleep {t}' </dev/null >/dev/null 2>&1 & "
        "until [ -e alive ]; do sleep 0.01; done"
    )
    r = bare.run(["sh", "-c", script], workspace=ws, limits=Limits(timeout=10))
    assert r.ok
    assert wait_gone(t) == [] and procs_with(t) == []


def test_private_tmp_is_capped_under_bubblewrap(tmp_path):
    """/tmp is a tmpfs in RAM, which RLIMIT_AS does not count: a command cannot fill memory through it."""
    from rtlreward.sandbox.local import TMP_SIZE_MB, LocalExecutor

    ex = LocalExecutor()
    if not ex.bwrap:
        pytest.skip("bubblewrap is not usable here")
    r = ex.run(
        [
            "sh",
            "-c",
            f"head -c {(TMP_SIZE_MB + 64) << 20} /dev/zero > /tmp/fill; echo rc=$?; df -m /tmp | tail -1",
        ],
        workspace=tmp_path,
        limits=Limits(timeout=60, file_size_mb=TMP_SIZE_MB * 2),
    )
    assert "rc=1" in r.stdout and "No space left" in r.stderr, r.output


def test_removing_a_locked_workspace_never_chmods_through_a_link(tmp_path):
    """A command can leave a link to a host file where the cleanup has to unlock things (a non-root trainer
    cannot enter a 000 folder): the cleanup changes the link's own folder, never the file it points to."""
    from rtlreward.sandbox.local import _make_writable, remove_workspace

    outside = tmp_path / "host_file"
    outside.write_text("host\n")
    outside.chmod(0o444)
    ws = tmp_path / "ws"
    locked = ws / "locked"
    locked.mkdir(parents=True)
    (ws / "link").symlink_to(outside)
    locked.chmod(0)
    _make_writable(str(ws / "link"))  # what the cleanup does to an entry it could not remove
    _make_writable(str(locked))
    assert stat.S_IMODE(outside.stat().st_mode) == 0o444
    assert stat.S_IMODE(locked.stat().st_mode) == 0o700
    remove_workspace(ws)
    assert not ws.exists() and outside.read_text() == "host\n"
