"""Least privilege in the local executor, route by route, against real hostile commands.

Routes (each test says which it covers):
- `bwrap`: the default. As root: bubblewrap in privileged mode, `setpriv` to a leased sandbox uid inside. As a
  normal user: an unprivileged user namespace, running as that user.
- `bwrap-userns` (root only): the fallback for root where privileged mounts are refused -- drop to the sandbox
  uid first, then an unprivileged bubblewrap (`--unshare-user`). Forced here through the route table, because this
  machine allows privileged mounts.
- `bare`: no bubblewrap. As root: the sandbox uid (`drop_privileges=True`); file permissions, RLIMIT_NPROC and
  `kill(-1)` are what it adds. Claims about /work, the host's /tmp and the network are not made for it.

The assertions about canaries, writes outside the workspace, hidden paths and process counts fail on the executor
as it was before (commands ran as root, under bwrap as root inside a user namespace that maps onto root): run
against it, the canary was read, /work was listed and the counting fork bomb reached its cap. The network test
is a regression check; it held before too.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import pytest
from sandbox_helpers import procs_with, token, wait_gone

from rtlreward.sandbox import Limits
from rtlreward.sandbox import local as local_mod
from rtlreward.sandbox.local import LocalExecutor, remove_workspace

ROOT = os.geteuid() == 0
PROJECT = Path(__file__).resolve().parents[1]
BWRAP = shutil.which("bwrap")
SYSTEM_PY = shutil.which("python3", path="/usr/bin:/bin")


def _bwrap_usable() -> bool:
    return BWRAP is not None and local_mod._bwrap_works(BWRAP)


def _make(route: str) -> LocalExecutor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if route == "bwrap":
            if not _bwrap_usable():
                pytest.skip("bubblewrap is not usable on this machine")
            return LocalExecutor(use_bwrap=True)
        if route == "bwrap-userns":
            if not ROOT:
                pytest.skip("the drop-then-userns route is root's fallback; as a user, `bwrap` is that route")
            if BWRAP is None or not local_mod._probe(BWRAP, "userns", None, local_mod.PROBE_UID):
                pytest.skip("unprivileged user namespaces are refused here")
            key = (BWRAP, True)
            saved = local_mod._ROUTES.get(key, "missing")
            local_mod._ROUTES[key] = "userns"
            try:
                ex = LocalExecutor(use_bwrap=True)
            finally:
                if saved == "missing":
                    local_mod._ROUTES.pop(key, None)
                else:
                    local_mod._ROUTES[key] = saved
            assert ex.route == "userns"
            return ex
        return LocalExecutor(use_bwrap=False, drop_privileges=True if ROOT else None)


@pytest.fixture(scope="module", params=["bwrap", "bwrap-userns", "bare"])
def ex(request) -> LocalExecutor:
    return _make(request.param)


@pytest.fixture(scope="module")
def bw() -> LocalExecutor:
    return _make("bwrap")


@pytest.fixture
def ws():
    """A workspace where a fresh temporary folder would be (/tmp/tmpXXX, 0700 root), removed afterwards."""
    d = Path(tempfile.mkdtemp(prefix="rtlr-priv-"))
    yield d
    remove_workspace(d)


@pytest.fixture
def canary():
    """A root-only file (0600) in a folder everyone may enter: only its own permissions protect it."""
    if not ROOT:
        shadow = Path("/etc/shadow")
        if shadow.exists() and not os.access(shadow, os.R_OK):
            yield shadow, None
            return
        pytest.skip("needs root to create a root-only file, and /etc/shadow is not one here")
    d = Path(tempfile.mkdtemp(prefix="rtlr-canary-"))
    os.chmod(d, 0o755)
    secret = f"canary-{token()}"
    f = d / "secret.txt"
    f.write_text(secret)
    os.chmod(f, 0o600)
    yield f, secret
    shutil.rmtree(d)


def _python_for(ex: LocalExecutor) -> str:
    """An interpreter the route's uid can start: the trainer's, or the system one when the trainer's is behind
    /root (the sandbox uid cannot enter /root without bubblewrap binding the prefix back)."""
    if (
        ex.route == "privileged"
        or not ex.drops_privileges
        or local_mod._unreachable([sys.executable]) is None
    ):
        return sys.executable
    if SYSTEM_PY is None:
        pytest.skip("no interpreter the sandbox uid can reach")
    return SYSTEM_PY


def _uid_of(r) -> int:
    return int(r.stdout.split("UID=")[1].split()[0])


# -- who the command is ----------------------------------------------------------------------------------------


def test_command_runs_unprivileged(ex, ws):
    r = ex.run(
        [
            "sh",
            "-c",
            "echo UID=$(id -u) GID=$(id -g) GROUPS=$(id -G); grep -E '^(CapEff|NoNewPrivs)' "
            "/proc/self/status",
        ],
        workspace=ws,
        limits=Limits(timeout=20),
    )
    assert r.ok, r.output
    uid = _uid_of(r)
    if ROOT:
        assert uid in local_mod._sandbox_uids() and uid != 0
        assert f"GID={uid} GROUPS={uid}" in r.stdout  # no supplementary groups (root's included)
        assert "NoNewPrivs:\t1" in r.stdout
    else:
        assert uid == os.getuid()
    assert "CapEff:\t0000000000000000" in r.stdout


def test_root_only_canary_is_unreadable(ex, ws, canary):
    path, secret = canary
    r = ex.run(
        ["sh", "-c", f"test -e {path} && echo VISIBLE; cat {path}"],
        workspace=ws,
        read_only=[path.parent],  # bound into the sandbox: only its permissions stand in the way
        limits=Limits(timeout=20),
    )
    assert "VISIBLE" in r.stdout, r.output
    assert r.returncode != 0 and "Permission denied" in r.stderr
    if secret is not None:
        assert secret not in r.output


def test_canary_behind_a_symlink_or_hard_link_in_the_workspace(ex, ws, canary):
    """The workspace is handed to the sandbox uid before each run; that must never give away what a link in it
    points at (a symlink is not followed, a root-owned file with other links is not taken)."""
    path, secret = canary
    if secret is None:
        pytest.skip("needs a canary this test may link")
    (ws / "via-symlink").symlink_to(path)
    hard = ws / "via-hardlink"
    try:
        os.link(path, hard)
    except OSError:
        hard = None  # another file system: the symlink case still runs
    r = ex.run(["sh", "-c", "cat via-symlink; cat via-hardlink"], workspace=ws, limits=Limits(timeout=20))
    assert secret not in r.output
    st = path.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o600)


@pytest.mark.skipif(not ROOT, reason="the hand-over to a sandbox uid happens only for a root trainer")
def test_frozen_entries_stay_read_only_and_the_rest_becomes_writable(ex, ws):
    """The trainer freezes a harness by making it root-owned without write bits: the hand-over leaves it root's,
    so the command (its owner otherwise) cannot chmod it back; everything else in the workspace is the command's."""
    harness = ws / "harness"
    harness.mkdir()
    (harness / "test_x.py").write_text("HARNESS\n")
    (harness / "test_x.py").chmod(0o444)
    harness.chmod(0o555)
    (ws / "answer.sv").write_text("ANSWER\n")  # written by the trainer as root, 0644: handed over
    script = (
        "echo more >> answer.sv && echo ANSWER-WRITABLE; "
        "chmod u+w harness/test_x.py 2>/dev/null && echo CHMOD; "
        "echo pwned > harness/test_x.py 2>/dev/null && echo WROTE; "
        "touch harness/conftest.py 2>/dev/null && echo CREATED; "
        "mv harness elsewhere 2>/dev/null && echo MOVED; "
        "rm -rf harness 2>/dev/null; cat harness/test_x.py"
    )
    r = ex.run(["sh", "-c", script], workspace=ws, limits=Limits(timeout=20))
    assert "ANSWER-WRITABLE" in r.stdout, r.output
    for word in ("CHMOD", "WROTE", "CREATED", "MOVED"):
        assert word not in r.stdout, r.output
    assert (harness / "test_x.py").read_text() == "HARNESS\n" and "HARNESS" in r.stdout
    assert not (harness / "conftest.py").exists()
    harness.chmod(0o755)  # for the fixture's clean-up


def test_home_and_project_are_invisible_or_unreadable(ex, ws):
    home_secret = Path.home() / f".rtlreward-canary-{token()}"
    home_secret.write_text("credential")
    home_secret.chmod(0o644)  # world-readable: only the folder around it (or its absence) protects it
    script = (
        f"cat {home_secret}; ls -A {Path.home()}; "
        f"test -e {PROJECT}/pyproject.toml && echo PROJECT-VISIBLE; "
        f"test -e {PROJECT}/tests && echo TESTS-VISIBLE; "
        "test -e /work/shared && echo SHARED-VISIBLE; "
        "test -S /run/docker.sock -o -S /var/run/docker.sock && echo DOCKER-SOCKET; ls /"
    )
    try:
        r = ex.run(["sh", "-c", script], workspace=ws, limits=Limits(timeout=20))
    finally:
        home_secret.unlink()
    assert "credential" not in r.stdout and home_secret.name not in r.stdout
    if ex.bwrap:  # the sandbox is built from an empty root: none of it exists
        assert "PROJECT-VISIBLE" not in r.stdout and "TESTS-VISIBLE" not in r.stdout
        assert "SHARED-VISIBLE" not in r.stdout and "DOCKER-SOCKET" not in r.stdout
        top = set(r.stdout.split())
        assert not top & {"home", "var", "srv", "mnt", "media", "run", "boot", "opt", "old_root"}


def test_a_package_first_on_sys_path_does_not_bring_the_project_in(monkeypatch, ws):
    """Ray puts site-packages/ray/thirdparty_files at sys.path[0] when it is imported; the caller's entries behind
    it (cwd, pytest's rootdir: the project) must still stay out. This is the order the whole suite runs in: an
    earlier test module imports ray, and the project became visible to every later sandbox."""
    import sysconfig

    if not _bwrap_usable():
        pytest.skip("bubblewrap is not usable on this machine")
    first = os.path.join(sysconfig.get_path("purelib"), "pip")  # any folder under the interpreter's prefix
    monkeypatch.setattr(sys, "path", [first, str(PROJECT), str(PROJECT / "tests"), *sys.path])
    assert str(PROJECT) not in local_mod._interpreter_paths()
    ex = _make("bwrap")
    r = ex.run(
        [
            "sh",
            "-c",
            f"test -e {PROJECT}/pyproject.toml && echo PROJECT-VISIBLE; ls {PROJECT}/tests | head -1",
        ],
        workspace=ws,
        limits=Limits(timeout=20),
    )
    assert "PROJECT-VISIBLE" not in r.stdout and "test_" not in r.stdout, r.output


def test_writes_stay_inside_the_workspace(ex, ws, tmp_path):
    t = token().replace(".", "")
    other = Path(
        tempfile.mkdtemp(prefix="rtlr-other-")
    )  # another candidate's workspace, as the engine makes it
    try:
        first = ex.run(["sh", "-c", "echo mine > result.txt"], workspace=other, limits=Limits(timeout=20))
        assert first.ok, first.output
        targets = [f"{PROJECT}/rtlr-{t}", f"{other}/rtlr-{t}", f"{other}/result.txt", f"/etc/rtlr-{t}"]
        script = "; ".join(f"(echo pwned > {p}) 2>/dev/null && echo WROTE {p}" for p in targets)
        if (
            ex.bwrap
        ):  # the host's /tmp is world-writable: only bwrap keeps it out (the sandbox's own /tmp is private)
            script += f"; echo private > /tmp/rtlr-{t} && cat /tmp/rtlr-{t}"
        r = ex.run(
            ["sh", "-c", f"echo ok > inside.txt; {script}; true"], workspace=ws, limits=Limits(timeout=20)
        )
        assert r.ok, r.output
        assert (ws / "inside.txt").read_text() == "ok\n"
        wrote = [line.split(" ", 1)[1] for line in r.stdout.splitlines() if line.startswith("WROTE ")]
        # Under bwrap a path below /tmp (a checkout there) is in the sandbox's private tmpfs: only the host counts.
        assert [p for p in wrote if not (ex.bwrap and p.startswith("/tmp/"))] == [], r.stdout
        assert (other / "result.txt").read_text() == "mine\n"
        for p in [*targets, f"/tmp/rtlr-{t}"]:
            if not p.endswith("result.txt"):
                assert not Path(p).exists(), p
        # The parent (root) still reads what the command wrote and removes the workspace.
        owner = (ws / "inside.txt").stat().st_uid
        assert owner in local_mod._sandbox_uids() if ROOT else owner == os.getuid()
    finally:
        remove_workspace(other)
    remove_workspace(ws)
    assert not ws.exists()
    ws.mkdir()  # for the fixture's own clean-up


def test_no_network(ex, ws):
    if not ex.bwrap:
        pytest.skip("without bubblewrap there is no network namespace (documented in docs/security.md)")
    code = (
        "import socket\n"
        "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2); print('NET-OPEN')\n"
        "except OSError as e:\n    print('blocked', e.errno)\n"
        "print(open('/proc/net/dev').read())\n"
    )
    r = ex.run([_python_for(ex), "-c", code], workspace=ws, limits=Limits(timeout=20))
    assert r.ok, r.output
    assert "blocked" in r.stdout and "NET-OPEN" not in r.stdout
    ifaces = [line.split(":")[0].strip() for line in r.stdout.splitlines()[1:] if ":" in line]
    assert ifaces == ["lo"], ifaces


def test_network_is_reachable_only_on_request(bw, ws):
    """The control for test_no_network: with `network=True` the host's interfaces are there."""
    host = Path("/proc/net/dev").read_text()
    if host.count(":") < 2:
        pytest.skip("the host has no interface besides lo")
    r = bw.run(["cat", "/proc/net/dev"], workspace=ws, limits=Limits(timeout=20, network=True))
    assert r.ok and r.stdout.count(":") >= 2


# -- processes -------------------------------------------------------------------------------------------------

COUNTING_BOMB = """
import os, sys
n = 0
try:
    while n < int(sys.argv[1]):
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", sys.argv[2]])
        n += 1
    print("NO-LIMIT", n, flush=True)
except OSError as e:
    print("LIMIT", n, e.errno, flush=True)
"""

PERSISTENT_BOMB = """
import os, time
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
"""


def _uid(pid: int) -> int | None:
    """The real uid of a process (bwrap's own root processes carry the command line too: they do not count)."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def test_fork_bomb_is_stopped_by_the_process_limit(ex, ws):
    """Processes are found by a token in their command line, not by uid: other runs on the machine may lease the
    same uid as soon as this one returns it."""
    if ROOT and not ex.drops_privileges:
        pytest.skip("root keeps root here")
    py = _python_for(ex)
    pids = 40
    (ws / "bomb.py").write_text(COUNTING_BOMB)
    # Counting first: the loop stops at 4x the limit, so an executor without a working limit fails this test
    # instead of exhausting the machine's PIDs in the bombs below.
    t = token()
    r = ex.run([py, "bomb.py", str(pids * 4), t], workspace=ws, limits=Limits(timeout=60, pids=pids))
    assert "LIMIT" in r.stdout and "NO-LIMIT" not in r.stdout, r.output
    forked = int(r.stdout.split("LIMIT")[1].split()[0])
    assert forked < pids and not r.timed_out  # the limit ended it, long before the wall clock
    assert wait_gone(t) == []  # its 30-odd sleeping children died with the run

    # The classic shell bomb, kept going for 3 s by its main shell: its forks fail at the limit ("Cannot fork"),
    # and everything it spawned dies with the run.
    t = token()
    classic = ex.run(
        ["sh", "-c", "b() { b | b & }; b; sleep 3", t], workspace=ws, limits=Limits(timeout=30, pids=pids)
    )
    assert "fork" in classic.stderr.lower() and not classic.timed_out, classic.output
    assert wait_gone(t) == []

    # A bomb that never gives up runs until the wall clock, but never holds more than `pids` processes, and the
    # host can still start processes meanwhile.
    (ws / "persistent.py").write_text(PERSISTENT_BOMB)
    t = token()
    peak, spawned, stop = [0], [], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], len([p for p in procs_with(t) if _uid(p) not in (0, None)]))
            spawned.append(subprocess.run(["true"]).returncode)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        bomb = ex.run([py, "persistent.py", t], workspace=ws, limits=Limits(timeout=3, pids=pids))
    finally:
        stop.set()
        watcher.join()
    assert bomb.timed_out
    assert pids // 2 < peak[0] <= pids, peak[0]  # it did fill its quota, and no more
    assert spawned and set(spawned) == {0}
    assert wait_gone(t) == []


def test_daemon_that_drops_the_run_marker_still_dies(ex, ws):
    """Without bubblewrap the per-run environment marker found leftovers; `env -i` erased it. `kill(-1)` as the
    sandbox uid does not need it."""
    if ROOT and not ex.drops_privileges:
        pytest.skip("root keeps root here")
    t = token()
    script = (
        f"setsid env -i sh -c 'touch alive; exec sleep {t}' </dev/null >/dev/null 2>&1 & "
        "until [ -e alive ]; do sleep 0.01; done; echo started"
    )
    r = ex.run(["sh", "-c", script], workspace=ws, limits=Limits(timeout=20))
    assert r.ok and "started" in r.stdout, r.output
    assert wait_gone(t) == [] and procs_with(t) == []


# -- leases ----------------------------------------------------------------------------------------------------


@pytest.mark.skipif(not ROOT, reason="sandbox uids are leased only when the trainer is root")
def test_concurrent_runs_share_a_uid_per_workspace_and_never_across(bw, ws):
    other = Path(tempfile.mkdtemp(prefix="rtlr-other-"))
    results: dict[str, object] = {}

    def run(key: str, where: Path, name: str) -> None:
        results[key] = bw.run(
            ["sh", "-c", f"sleep 1; echo {key} > {name}; echo UID=$(id -u)"],
            workspace=where,
            limits=Limits(timeout=30),
        )

    threads = [
        threading.Thread(target=run, args=("a", ws, "a.txt")),
        threading.Thread(target=run, args=("b", ws, "b.txt")),
        threading.Thread(target=run, args=("c", other, "c.txt")),
    ]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert all(r.ok for r in results.values()), [r.output for r in results.values()]
        uids = {k: _uid_of(r) for k, r in results.items()}
        assert uids["a"] == uids["b"] != uids["c"]
        assert (ws / "a.txt").exists() and (ws / "b.txt").exists() and (other / "c.txt").exists()
        # Returned after the last run: the workspace folder is root's again, closed to whoever gets the uid next.
        for d in (ws, other):
            st = d.stat()
            assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o700)
    finally:
        remove_workspace(other)


@pytest.mark.skipif(not ROOT, reason="sandbox uids are leased only when the trainer is root")
def test_bare_fallback_keeps_root_only_where_the_uid_cannot_reach(tmp_path, monkeypatch, ws):
    """Without bubblewrap and without drop_privileges, the uid is dropped when it can run the interpreter and
    reach the workspace; otherwise the run stays root, with a warning that names the path."""
    if SYSTEM_PY is None or local_mod._unreachable([SYSTEM_PY]) is not None:
        pytest.skip("no interpreter here that an unprivileged user can run")
    monkeypatch.setattr(local_mod, "_python", lambda: SYSTEM_PY)
    monkeypatch.setattr(local_mod, "_interpreter_paths", lambda: [os.path.dirname(SYSTEM_PY)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = LocalExecutor(use_bwrap=False)
    assert ex.drops_privileges
    r = ex.run(["sh", "-c", "echo UID=$(id -u)"], workspace=ws, limits=Limits(timeout=20))
    assert _uid_of(r) in local_mod._sandbox_uids()
    hidden = tmp_path / "ws"  # pytest's /tmp/pytest-of-root is 0700: the uid could not reach absolute paths
    hidden.mkdir()
    monkeypatch.setattr(local_mod, "_warned", set())
    with pytest.warns(UserWarning, match="runs as ROOT"):
        r = ex.run(["sh", "-c", "echo UID=$(id -u)"], workspace=hidden, limits=Limits(timeout=20))
    assert _uid_of(r) == 0


@pytest.mark.skipif(not ROOT, reason="root's fallback route")
def test_userns_route_names_a_path_the_uid_cannot_reach(tmp_path):
    ex = _make("bwrap-userns")
    hidden = tmp_path / "ws"  # under pytest's 0700 folder
    hidden.mkdir()
    with pytest.raises(RuntimeError, match="cannot reach"):
        ex.run(["true"], workspace=hidden, limits=Limits(timeout=10))


@pytest.mark.skipif(ROOT, reason="the caller's own route: runs when the tests run as a normal user")
def test_non_root_caller_runs_as_itself_in_a_user_namespace(bw, ws):
    r = bw.run(["sh", "-c", "echo UID=$(id -u)"], workspace=ws, limits=Limits(timeout=20))
    assert _uid_of(r) == os.getuid()
    assert "--unshare-user" in bw._argv(["true"], ws, ws, Limits(), [])


@pytest.mark.skipif(not ROOT, reason="uid leases exist only for a root trainer")
def test_concurrent_runs_in_one_workspace_share_its_uid_even_when_an_earlier_uid_is_free(bw, ws, tmp_path):
    """Two stages of one candidate run at once in one workspace. When the uid leased for it is not the first free
    one in the pool, the second run must still join it: with a second uid, whichever run ended first took the
    workspace back and the other got "Permission denied" on its own files (seen as a flaky cocotb driver)."""
    other = Path(tempfile.mkdtemp(prefix="rtlr-priv-other-"))
    results: dict[str, object] = {}

    def run(name: str, workspace: Path, script: str) -> None:
        results[name] = bw.run(["sh", "-c", script], workspace=workspace, limits=Limits(timeout=60))

    try:
        holder = threading.Thread(target=run, args=("holder", other, "sleep 3"))  # takes the first uid
        holder.start()
        time.sleep(1.0)
        first = threading.Thread(target=run, args=("first", ws, 'echo "UID=$(id -u)"; sleep 4'))
        first.start()  # gets a later uid
        holder.join()  # the first uid is free again
        time.sleep(0.3)
        (ws / "late.txt").write_text("still mine\n")
        second = threading.Thread(
            target=run, args=("second", ws, 'echo "UID=$(id -u)"; sleep 6; cat late.txt; touch done')
        )
        second.start()  # must join the workspace's uid, not take the free first one
        first.join()
        second.join()
    finally:
        remove_workspace(other)
    a, b = results["first"], results["second"]
    assert _uid_of(a) == _uid_of(b), (a.stdout, b.stdout)
    assert b.returncode == 0 and "still mine" in b.stdout, b.output
    assert (ws / "done").exists()
