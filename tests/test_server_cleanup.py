"""Stopping `rtlreward serve -x docker` leaves nothing behind: SIGTERM and SIGINT stop it gracefully (a reply still
being scored is cut short) and remove its containers (warm ones included) and workspaces; after a `kill -9` they
outlive it, and the next server start removes them while another live server's containers and workspaces stay.
Real server processes on loopback, the real Docker engine and sim image (skipped without them); every wait is
bounded."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[1]
ARBITER = ROOT / "examples" / "fixed_priority_arbiter"
# Enough to make a warm container start and run commands in it; the tests stage only where a reply must still be
# running when the server is told to stop (a design that loops at zero delay holds it for its whole limit).
QUICK = """
name = "cleanup-quick"
stages = ["format", "safety", "compile"]
gates = ["safety"]
verdict = "compile"
[weights]
format = 0.1
compile = 1.0
"""
STOP_LIMIT = 40.0  # seconds a stop may take here (the server bounds its own at 30 s)


@pytest.fixture(scope="module")
def api():
    docker = pytest.importorskip("docker")
    pytest.importorskip("uvicorn")
    from rtlreward.sandbox.docker import DockerExecutor, DockerUnavailable

    try:
        DockerExecutor().close()
    except DockerUnavailable as e:
        pytest.skip(str(e))
    return docker.from_env().api


class Server:
    """`rtlreward serve -x docker` in a process of its own, its workspaces under `root`."""

    def __init__(self, root: Path, profile: Path, *, slow: bool = False) -> None:
        self.root = root
        env = {**os.environ, "RTLREWARD_WORKSPACE_DIR": str(root), "PYTHONUNBUFFERED": "1"}
        env.pop("RTLREWARD_SERVER_TOKEN", None)
        cmd = [sys.executable, "-m", "rtlreward", "serve", str(ARBITER), "-x", "docker", "-j", "1"]
        cmd += ["--port", "0", "--no-log-requests", "--no-cache", "--request-timeout", "120"]
        cmd += [] if slow else ["--profile", str(profile)]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
        )
        self.pid = self.proc.pid
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(120)
        found = re.search(r" on (http://127\.0\.0\.1:\d+) ", line[0] if line else "")
        if not found:
            self.proc.kill()
            pytest.fail(f"the server did not start: {line} {self.proc.communicate(timeout=30)[1][-3000:]}")
        self.url = found.group(1)

    def score(self, reply: str) -> tuple[int, dict]:
        body = json.dumps({"task_id": "fixed_priority_arbiter", "completion": completion(reply)}).encode()
        req = urllib.request.Request(self.url + "/score", body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=150) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def health(self) -> dict:
        with urllib.request.urlopen(self.url + "/health", timeout=30) as r:
            return json.loads(r.read())

    def stop(self, sig: int) -> tuple[int, float, str]:
        """Send `sig`; (exit status, seconds to exit, stderr)."""
        start = time.monotonic()
        self.proc.send_signal(sig)
        try:
            _, err = self.proc.communicate(timeout=STOP_LIMIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=30)
            pytest.fail(f"the server did not stop within {STOP_LIMIT:g} s after {signal.Signals(sig).name}")
        return self.proc.returncode, time.monotonic() - start, err

    def kill(self) -> None:
        """Whatever happened in the test: stop it (SIGTERM, so that a failing test leaves nothing either)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.communicate(timeout=STOP_LIMIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.communicate(timeout=30)


def completion(name: str) -> str:
    return (ARBITER / "completions" / f"{name}.txt").read_text()


def containers(api, pid: int, *, running: bool = False) -> list[dict]:
    return api.containers(all=not running, filters={"label": f"rtlreward.owner_pid={pid}"})


def folders(root: Path, pid: int) -> list[str]:
    """Workspaces and warm slot folders of `pid` under `root`, and its stdin folders in the temp dir."""
    mine = f".o{pid}-"
    found = [p.name for p in root.iterdir() if mine in p.name] if root.exists() else []
    return found + [p.name for p in Path(tempfile.gettempdir()).glob("rtlreward-stdin-*") if mine in p.name]


def wait_for(cond, what: str, limit: float = 60.0):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    pytest.fail(f"gave up waiting for {what}")


def stable(get, quiet: float = 2.0, limit: float = 60.0):
    """`get()` once it has not changed for `quiet` seconds."""
    end = time.monotonic() + limit
    last, since = get(), time.monotonic()
    while time.monotonic() < end:
        time.sleep(0.2)
        now = get()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return now
    pytest.fail("the live server's containers kept changing")


@pytest.fixture
def profile(tmp_path):
    path = tmp_path / "quick.toml"
    path.write_text(QUICK)
    return path


def test_sigterm_cuts_a_running_reply_short_and_removes_everything(api, tmp_path, profile):
    server = Server(tmp_path / "ws", profile, slow=True)
    try:
        assert server.score("syntax_error")[0] == 200  # a warm container served it
        assert containers(api, server.pid, running=True), "no warm container to remove"
        got: dict = {}
        looping = threading.Thread(target=lambda: got.update(r=server.score("forever_loop")))
        looping.start()
        wait_for(lambda: server.health()["in_flight"] >= 1, "the looping reply to be scored")
        time.sleep(3)  # into its simulation
        assert folders(server.root, server.pid)
        code, took, err = server.stop(signal.SIGTERM)
        looping.join(30)
    finally:
        server.kill()
    assert code == 0 and "stopped (SIGTERM)" in err, err[-3000:]
    assert took < 35, f"the stop took {took:.1f} s"
    assert "Traceback" not in err, err[-3000:]
    # The looping reply was answered at once, and not as if the answer had timed out.
    status, reward = got["r"]
    if status == 200:
        tests = reward["stages"]["tests"]
        assert tests["status"] in ("error", "skipped"), tests
    assert containers(api, server.pid) == []
    assert folders(server.root, server.pid) == []


def test_sigint_removes_its_warm_containers_and_workspaces(api, tmp_path, profile):
    server = Server(tmp_path / "ws", profile)
    try:
        status, reward = server.score("correct")
        assert status == 200 and reward["stages"]["compile"]["status"] == "passed", reward
        assert containers(api, server.pid, running=True)
        assert folders(server.root, server.pid)  # its warm slot folders
        code, took, err = server.stop(signal.SIGINT)
        assert took < 35, f"the stop took {took:.1f} s"
    finally:
        server.kill()
    assert code == 0 and "stopped (SIGINT)" in err and "Traceback" not in err, err[-3000:]
    assert containers(api, server.pid) == []
    assert folders(server.root, server.pid) == []


def test_after_kill_9_the_next_start_removes_the_dead_servers_leftovers_only(api, tmp_path, profile):
    root = tmp_path / "ws"  # shared by all three servers, as two servers on one machine would
    dead = Server(root, profile)
    live = None
    try:
        assert dead.score("correct")[0] == 200
        live = Server(root, profile)
        # A slot's first candidate teaches it the task's read-only folders and its container is replaced after
        # it (in the background): the second one runs in the container that then stays.
        assert live.score("correct")[0] == 200 and live.score("syntax_error")[0] == 200
        dead.proc.kill()  # kill -9: none of its own cleanup runs
        dead.proc.communicate(timeout=30)
        assert containers(api, dead.pid, running=True), "the killed server left no container to reap"
        assert folders(root, dead.pid), "the killed server left no folder to reap"
        live_containers = stable(lambda: {c["Id"] for c in containers(api, live.pid, running=True)})
        live_folders = folders(root, live.pid)
        assert live_containers and live_folders

        nxt = Server(root, profile)  # started: its engine reaped what dead owners left
        try:
            assert containers(api, dead.pid) == []
            assert folders(root, dead.pid) == []
            assert {c["Id"] for c in containers(api, live.pid, running=True)} == live_containers
            assert folders(root, live.pid) == live_folders
            assert live.score("correct")[0] == 200  # and the live server works on
            code, _, err = nxt.stop(signal.SIGTERM)
        finally:
            nxt.kill()
        assert code == 0, err[-3000:]
        code, _, err = live.stop(signal.SIGTERM)
        assert code == 0, err[-3000:]
        for s in (dead, live, nxt):
            assert containers(api, s.pid) == [] and folders(root, s.pid) == []
    finally:
        dead.kill()
        if live is not None:
            live.kill()
