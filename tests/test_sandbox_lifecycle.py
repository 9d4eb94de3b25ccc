"""Containers and workspaces end with their run: owner-named workspaces reaped once their owner is dead, labelled
containers reaped by the next executor, and a container's own time limit that holds when rtlreward is killed
(`kill -9`) or stalled. Docker tests use the real engine and sim image and are skipped without them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rtlreward.sandbox import reaper
from rtlreward.sandbox.reaper import (
    make_workspace,
    owner_alive,
    proc_start_time,
    reap_containers,
    reap_stale_workspaces,
)

REPO = Path(__file__).resolve().parents[1]


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def wait_for(cond, what: str, limit: float = 120.0, every: float = 0.1):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(every)
    pytest.fail(f"gave up waiting for {what}")


# ---------------------------------------------------------------- owners and workspaces (no Docker needed)


def test_owner_alive_sees_death_zombies_and_pid_reuse():
    me, start = os.getpid(), proc_start_time(os.getpid())
    assert isinstance(start, int) and owner_alive(me, start) and owner_alive(me)
    assert not owner_alive(me, start + 1)  # same pid, another start time: a reused pid
    assert proc_start_time(dead_pid()) is None
    assert not owner_alive(dead_pid())
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        wait_for(
            lambda: Path(f"/proc/{zombie.pid}/stat").read_text().split(")")[-1].split()[0] == "Z", "zombie"
        )
        assert not owner_alive(zombie.pid)  # killed, never waited for: it will not clean up either
    finally:
        zombie.wait()


def test_make_workspace_is_private_and_named_after_its_owner(tmp_path, monkeypatch):
    ws = make_workspace("cvdp/odd id*", tmp_path)
    assert ws.parent == tmp_path and ws.is_dir() and (ws.stat().st_mode & 0o777) == 0o700
    assert ws.name.startswith("rtlreward-cvdp_odd_id_-")
    assert f".o{os.getpid()}-{proc_start_time(os.getpid())}-" in ws.name
    monkeypatch.setenv("RTLREWARD_WORKSPACE_DIR", str(tmp_path / "env-root"))
    assert make_workspace("t").parent == tmp_path / "env-root"
    assert reap_stale_workspaces(tmp_path) == 0 and ws.is_dir()  # its owner (us) is alive


def test_reap_stale_workspaces_removes_dead_owners_only(tmp_path):
    # a workspace made by a process that is gone, with a folder it chmod-ed shut
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from rtlreward.sandbox.reaper import make_workspace; "
            "print(make_workspace('dead task', sys.argv[1]))",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = Path(made.stdout.strip())
    (dead / "d").mkdir()
    (dead / "d" / "f").write_text("x")
    (dead / "d").chmod(0)
    host = reaper.host_hash()
    me, start = os.getpid(), proc_start_time(os.getpid())
    live = make_workspace("live", tmp_path)
    reused = tmp_path / f"rtlreward-t-abcdefgh.o{me}-{start + 1}-{host}"  # our pid, another start time
    elsewhere = tmp_path / f"rtlreward-t-abcdefgh.o{dead_pid()}-1-{'0' * 8 if host != '0' * 8 else '1' * 8}"
    legacy = tmp_path / "rtlreward-t-abcdefgh"  # no owner in the name: never ours to judge
    for d in (reused, elsewhere, legacy):
        d.mkdir()
    # a link named like a dead workspace must not lead the reaper anywhere
    target = tmp_path / "precious"
    target.mkdir()
    (target / "keep").write_text("keep")
    link = tmp_path / f"rtlreward-t-linklink.o{dead_pid()}-1-{host}"
    link.symlink_to(target)
    foreign = None
    if os.getuid() == 0:  # a folder of another user with a dead owner in its name
        foreign = tmp_path / f"rtlreward-t-foreign0.o{dead_pid()}-1-{host}"
        foreign.mkdir()
        os.chown(foreign, 12345, 12345)

    assert reap_stale_workspaces(tmp_path) == 2
    assert not dead.exists() and not reused.exists()
    assert live.is_dir() and elsewhere.is_dir() and legacy.is_dir()
    assert link.is_symlink() and (target / "keep").read_text() == "keep"
    assert foreign is None or foreign.is_dir()
    assert reap_stale_workspaces(tmp_path) == 0


# ---------------------------------------------------------------- containers (real Docker engine and image)


@pytest.fixture(scope="module")
def api():
    docker = pytest.importorskip("docker")
    from rtlreward.sandbox.docker import DockerExecutor, DockerUnavailable

    try:
        DockerExecutor()
    except DockerUnavailable as e:
        pytest.skip(str(e))
    return docker.from_env().api


def owned_by(api, pid: int, *, running_only: bool = False, cold_only: bool = False) -> list[dict]:
    """The containers labelled with `pid` as owner; `cold_only`: without warm ones (other executors of this
    process, such as an engine a fixture of another module keeps open, have warm containers)."""
    found = api.containers(all=not running_only, filters={"label": f"rtlreward.owner_pid={pid}"})
    return [c for c in found if not cold_only or (c.get("Labels") or {}).get("rtlreward.warm") != "1"]


def sim_image() -> str:
    from rtlreward.sandbox.image import DEFAULT_TAG

    return os.environ.get("RTLREWARD_SIM_IMAGE") or DEFAULT_TAG


@pytest.mark.docker
def test_reaper_removes_dead_owners_and_expired_deadlines_only(api):
    now = int(time.time())
    me, start = os.getpid(), proc_start_time(os.getpid())
    host = reaper.host_name()

    def labels(pid, *, owner_start=None, on=host, deadline=now + 600, ours="1"):
        return {
            "rtlreward": ours,
            "rtlreward.owner_pid": str(pid),
            "rtlreward.owner_start": "" if owner_start is None else str(owner_start),
            "rtlreward.owner_host": on,
            "rtlreward.started": str(now),
            "rtlreward.deadline": str(deadline),
        }

    cases = {
        "dead owner": (labels(dead_pid()), False),
        "live owner": (labels(me, owner_start=start), True),
        "reused pid": (labels(me, owner_start=start + 1), False),
        "other host, dead pid": (labels(dead_pid(), on="elsewhere"), True),
        "other host, past deadline": (labels(me, on="elsewhere", deadline=now - 1), False),
        "live owner, past deadline": (labels(me, owner_start=start, deadline=now - 1), False),
        "not ours": (labels(dead_pid(), ours="sandbox"), True),
        "dead owner, never started": (labels(dead_pid()), False),
    }
    made: dict[str, str] = {}
    try:
        for name, (lab, _) in cases.items():
            c = api.create_container(
                sim_image(),
                ["timeout", "-s", "KILL", "300", "sleep", "300"],  # ends by itself should the test die
                labels=lab,
                user="65534:65534",
                network_disabled=True,
                host_config=api.create_host_config(network_mode="none", read_only=True),
            )
            made[name] = c["Id"]
            if name != "dead owner, never started":
                api.start(c["Id"])
        reap_containers()
        present = {c["Id"] for c in api.containers(all=True)}
        for name, (_, kept) in cases.items():
            assert (made[name] in present) is kept, name
    finally:
        for cid in made.values():
            with contextlib.suppress(Exception):
                api.remove_container(cid, force=True)


@pytest.mark.docker
def test_killed_cli_run_leaves_no_container_after_the_next_start(api, tmp_path):
    """`kill -9` a real `rtlreward demo --executor docker` while its containers run: they outlive it (the tests'
    time limit is 300 s), and the next executor start kills and removes every one of them."""
    ws_root = tmp_path / "workspaces"
    env = {**os.environ, "RTLREWARD_WORKSPACE_DIR": str(ws_root)}
    argv = [sys.executable, "-m", "rtlreward", "demo", "--executor", "docker", "--no-cache", "--json"]
    proc = subprocess.Popen(
        [*argv, "--timeout", "300"], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:

        def running():
            if proc.poll() is not None:
                pytest.fail(f"the run ended before a container ran: {proc.stderr.read().decode()[-2000:]}")
            return owned_by(api, proc.pid, running_only=True)

        wait_for(running, "a container of the CLI run", limit=300)
    finally:
        proc.kill()
        proc.wait()
    left = owned_by(api, proc.pid)
    assert left, "the killed run left no container: nothing to reap"
    assert all(c["Labels"]["rtlreward"] == "1" for c in left)

    from rtlreward.sandbox.docker import DockerExecutor

    DockerExecutor().close()  # the next start
    assert owned_by(api, proc.pid) == []
    assert owned_by(api, proc.pid, running_only=True) == []
    reap_stale_workspaces(ws_root)  # the engine's workspaces, once they carry their owner
    assert not [d for d in ws_root.glob("*") if f".o{proc.pid}-" in d.name]


SPIN = textwrap.dedent("""
    import json, sys
    from rtlreward.sandbox import Limits
    from rtlreward.sandbox.docker import DockerExecutor

    r = DockerExecutor().run(["sh", "-c", "while :; do :; done"], workspace=sys.argv[1], limits=Limits(timeout=4))
    print(json.dumps({"timed_out": r.timed_out, "returncode": r.returncode}))
""")


def spinning_parent(tmp_path: Path, api) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SPIN, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )

    def running():
        if proc.poll() is not None:
            pytest.fail(f"the parent ended early: {proc.stderr.read().decode()[-2000:]}")
        return owned_by(api, proc.pid, running_only=True)

    return proc, wait_for(running, "the spinning container")[0]["Id"]


def ended_by_itself(api, cid: str) -> dict:
    state = wait_for(lambda: (s := api.inspect_container(cid)["State"])["Running"] is False and s, "its end")
    assert state["ExitCode"] == 137 and not state["OOMKilled"]  # SIGKILL from the in-container `timeout`
    return state


@pytest.mark.docker
def test_spinning_container_ends_at_its_limit_when_the_parent_is_killed(api, tmp_path):
    proc, cid = spinning_parent(tmp_path, api)
    proc.kill()
    proc.wait()
    ended_by_itself(api, cid)  # nobody called kill: the container's own limit did it
    from rtlreward.sandbox.docker import DockerExecutor

    DockerExecutor().close()
    assert owned_by(api, proc.pid) == []  # and the next start removed what was left


@pytest.mark.docker
def test_spinning_container_ends_at_its_limit_while_the_parent_is_stalled(api, tmp_path):
    proc, cid = spinning_parent(tmp_path, api)
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        ended_by_itself(api, cid)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=120)
    assert json.loads(out) == {"timed_out": True, "returncode": -9}, err.decode()[-2000:]
    assert owned_by(api, proc.pid) == []  # the resumed parent removed it


@pytest.mark.docker
def test_cancel_kills_a_workspace_containers_now_and_refuses_new_ones(api, tmp_path):
    """What an engine giving up on a stage at its deadline calls: that workspace's container is killed and
    removed at once (long before its own limit), later commands there never start, other workspaces go on."""
    import threading

    from rtlreward.sandbox import Limits
    from rtlreward.sandbox.docker import DockerExecutor

    ex = DockerExecutor()
    ws, other = tmp_path / "ws", tmp_path / "other"
    (ws / "stage").mkdir(parents=True)
    other.mkdir()
    got = {}
    t = threading.Thread(
        target=lambda: got.update(r=ex.run(["sleep", "300"], workspace=ws, limits=Limits(timeout=300)))
    )
    t.start()
    cid = wait_for(lambda: owned_by(api, os.getpid(), running_only=True, cold_only=True), "the container")[0][
        "Id"
    ]
    assert ex.cancel(ws) == 1
    t.join(timeout=120)
    assert not t.is_alive() and got["r"].timed_out and got["r"].returncode == -9
    assert cid not in {c["Id"] for c in api.containers(all=True)}
    again = ex.run(["touch", "late"], workspace=ws / "stage", limits=Limits(timeout=30))
    assert again.timed_out and "cancelled" in again.stderr and not (ws / "stage" / "late").exists()
    assert ex.run(["true"], workspace=other, limits=Limits(timeout=30)).ok
    assert owned_by(api, os.getpid(), cold_only=True) == []


@pytest.mark.docker
def test_executor_start_reaps_a_dead_run_stdin_folder(api):
    import tempfile

    from rtlreward.sandbox.docker import STDIN_PREFIX, DockerExecutor

    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import tempfile; from rtlreward.sandbox.reaper import make_workspace; "
            "print(make_workspace('stdin', tempfile.gettempdir()))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    left = Path(made.stdout.strip())
    assert left.name.startswith(STDIN_PREFIX) and left.parent == Path(tempfile.gettempdir()) and left.is_dir()
    DockerExecutor().close()
    assert not left.exists()
