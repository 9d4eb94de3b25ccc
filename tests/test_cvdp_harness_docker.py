"""The Docker CVDP runner: each compose service in a fresh container of the sim image, the benchmark's mounts,
no network, limits. Skipped cleanly without a Docker engine or the image (`rtlreward sandbox build-image`)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from cvdp_harness_helpers import run_harness
from sandbox_helpers import sim_docker_executor
from test_cvdp_harness_local import ADDER, COMPOSE, WRONG, adder_task

from rtlreward.model import Status

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def docker_ex():
    return sim_docker_executor()


def test_pass_fail_in_container(tmp_path: Path, docker_ex):
    task = adder_task()
    good = run_harness(task, {"rtl/adder.sv": ADDER}, tmp_path / "g", executor=docker_ex)
    assert good.status is Status.PASSED and good.metrics["cvdp_runner"] == "docker", good.feedback
    assert good.metrics["tests_passed"] == good.metrics["tests_total"] == 2
    bad = run_harness(task, {"rtl/adder.sv": WRONG}, tmp_path / "b", executor=docker_ex)
    assert bad.status is Status.FAILED and bad.score == 0.0


def test_same_seeded_cases_as_local(tmp_path: Path, docker_ex):
    """The seeding sitecustomize is mounted into the container: same seed, same import-time cases as locally."""
    import re

    task = adder_task()
    run_harness(task, {"rtl/adder.sv": ADDER}, tmp_path / "d", executor=docker_ex, seed=11)
    run_harness(task, {"rtl/adder.sv": ADDER}, tmp_path / "l", seed=11)

    def ids(ws: Path) -> list[str]:
        return re.findall(
            r'name="(test_adder\[[^"]+\])"', (ws / "cvdp/rundir/.rtlreward/junit-direct.xml").read_text()
        )

    assert ids(tmp_path / "d") == ids(tmp_path / "l") and len(ids(tmp_path / "d")) == 2


def test_container_layout_network_and_read_only_src(tmp_path: Path, docker_ex):
    probe = textwrap.dedent("""\
        import os, pathlib, socket
        def test_layout():
            assert os.getcwd() == "/code/rundir" and os.environ["HOME"] == "/code/rundir"
            assert pathlib.Path("/code/rtl/adder.sv").exists() and pathlib.Path("/src/.env").exists()
            try:
                open("/src/x", "w")
            except OSError:
                pass
            else:
                raise AssertionError("/src is writable")
            try:
                socket.create_connection(("1.1.1.1", 53), timeout=2)
            except OSError:
                pass
            else:
                raise AssertionError("the network is reachable")
            assert os.getuid() != 0 and os.getgid() != 0  # never root, even for a root caller
            try:
                open("/etc/x", "w")
            except OSError:
                pass
            else:
                raise AssertionError("the root file system is writable")
            # PID 1 is the in-container time limit: the service ends even if rtlreward dies
            pid1 = pathlib.Path("/proc/1/cmdline").read_bytes().split(b"\\0")
            assert pid1[:3] == [b"timeout", b"-s", b"KILL"], pid1
            pathlib.Path("/code/rundir/out.txt").write_text("ok")
        """)
    task = adder_task(extra={"src/test_runner.py": probe})
    res = run_harness(task, {"rtl/adder.sv": ADDER}, tmp_path, executor=docker_ex)
    assert res.passed, res.feedback
    assert (tmp_path / "cvdp/rundir/out.txt").read_text() == "ok"


def test_sdk_fallback_has_the_same_policy_and_leaves_no_container(tmp_path: Path, docker_ex):
    """A docker executor without `run_service` (a third party's): the runner's own containers carry the same
    policy, labels and lifecycle, and none is left behind."""
    import os

    import docker

    class PlainDocker:  # selects the Docker runner, has no run_service
        name = "plain-docker"
        runs_in_container = True
        image = docker_ex.image
        python = docker_ex.python

    probe = textwrap.dedent("""\
        import os, pathlib
        def test_policy():
            assert os.getuid() != 0
            assert pathlib.Path("/proc/1/cmdline").read_bytes().startswith(b"timeout\\0-s\\0KILL")
        """)
    task = adder_task(extra={"src/test_runner.py": probe})
    res = run_harness(task, {"rtl/adder.sv": ADDER}, tmp_path, executor=PlainDocker())
    assert res.passed and res.metrics["cvdp_runner"] == "docker", res.feedback
    mine = docker.from_env().api.containers(all=True, filters={"label": f"rtlreward.owner_pid={os.getpid()}"})
    # warm containers of executors other tests keep open (an engine's pool) are not the fallback's
    assert [c for c in mine if (c.get("Labels") or {}).get("rtlreward.warm") != "1"] == []


def test_time_limit_kills_the_container(tmp_path: Path, docker_ex):
    slow = COMPOSE.replace(
        "pytest -s -o cache_dir=/rundir/harness/.cache /src/test_runner.py -v", "sleep 300"
    )
    res = run_harness(
        adder_task(compose=slow),
        {"rtl/adder.sv": ADDER},
        tmp_path,
        executor=docker_ex,
        options={"service_timeout": 5},
    )
    assert res.status is Status.TIMEOUT and not res.passed


def test_cocotb19_harness(tmp_path: Path, docker_ex):
    from cvdp_adapter.harness import analyse
    from cvdp_adapter.runner_docker import _image_layout, sim_image

    task = adder_task("cocotb19")

    class _Ctx:
        options: dict = {}
        executor = docker_ex

    image = sim_image(_Ctx(), analyse(task.harness.files))
    if _image_layout(image)[1] is None:
        res = run_harness(task, {"rtl/adder.sv": ADDER}, tmp_path, executor=docker_ex)
        assert res.status is Status.ERROR and "cocotb 1.9" in res.feedback  # a clear error, never a verdict
        pytest.skip(f"{image} has no cocotb 1.9 env (build the cocotb19 variant)")
    good = run_harness(task, {"rtl/adder.sv": ADDER}, tmp_path / "g", executor=docker_ex)
    assert good.passed and good.metrics["python_env"] == "cocotb19", good.feedback
    bad = run_harness(task, {"rtl/adder.sv": WRONG}, tmp_path / "b", executor=docker_ex)
    assert bad.status is Status.FAILED
