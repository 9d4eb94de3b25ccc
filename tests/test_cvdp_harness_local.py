"""The local CVDP runner with real pytest, cocotb (2.x on the host, 1.9.2 in the managed env) and Icarus."""

from __future__ import annotations

import re
import shutil
import textwrap
from pathlib import Path

import pytest
from cvdp_harness_helpers import run_harness

from rtlreward.model import Harness, Status, Task
from rtlreward.sandbox.local import LocalExecutor

pytestmark = pytest.mark.skipif(shutil.which("iverilog") is None, reason="needs Icarus Verilog")

COMPOSE = textwrap.dedent("""\
    services:
      direct:
        image: __OSS_SIM_IMAGE__
        volumes:
          - ./src/:/src/:ro
        env_file    : ./src/.env
        command     : pytest -s -o cache_dir=/rundir/harness/.cache /src/test_runner.py -v
    """)

ENV = (
    "SIM = icarus\nTOPLEVEL_LANG = verilog\nVERILOG_SOURCES = /code/rtl/adder.sv\nTOPLEVEL = adder\n"
    "MODULE = test_adder\nPYTHONPATH = /src\n"
)

ADDER = "`timescale 1ns/1ps\nmodule adder(input [3:0] a, input [3:0] b, output [4:0] y);\n  assign y = a + b;\nendmodule\n"
WRONG = "`timescale 1ns/1ps\nmodule adder(input [3:0] a, input [3:0] b, output [4:0] y);\n  assign y = a - b;\nendmodule\n"

COCOTB_TEST = textwrap.dedent("""\
    import random
    import cocotb
    from cocotb.triggers import Timer

    @cocotb.test()
    async def add(dut):
        for _ in range(20):
            a, b = random.randint(0, 15), random.randint(0, 15)
            dut.a.value = a
            dut.b.value = b
            await Timer(1, "ns")
            assert int(dut.y.value) == a + b, f"{a}+{b} gave {int(dut.y.value)}"
    """)

RUNNER = textwrap.dedent("""\
    import os
    import random
    import pytest
    from {module} import get_runner

    # drawn at import, unseeded in the harness: the runner's sitecustomize makes it reproducible
    CASES = [random.randint(0, 10**6) for _ in range(2)]

    @pytest.mark.parametrize("case", CASES)
    def test_adder(case):
        r = get_runner(os.environ["SIM"])
        r.build(verilog_sources=os.environ["VERILOG_SOURCES"].split(), {top}=os.environ["TOPLEVEL"],
                always=True, build_dir="sim_build_%d" % case)
        r.test({top}=os.environ["TOPLEVEL"], test_module=os.environ["MODULE"],
               build_dir="sim_build_%d" % case)
    """)


def adder_task(api: str = "cocotb2", extra: dict[str, str] | None = None, compose: str = COMPOSE) -> Task:
    if api == "cocotb2":
        runner = RUNNER.format(module="cocotb_tools.runner", top="hdl_toplevel").replace(
            "verilog_sources=", "sources="
        )
    else:
        runner = RUNNER.format(module="cocotb.runner", top="hdl_toplevel")
    files = {
        "docker-compose.yml": compose,
        "src/.env": ENV,
        "src/test_adder.py": COCOTB_TEST,
        "src/test_runner.py": runner,
        **(extra or {}),
    }
    return Task(
        id=f"adder_{api}",
        expected_files=("rtl/adder.sv",),
        harness=Harness(kind="cvdp", files=files, options={"category": "cid003", "agentic": False}),
    )


@pytest.fixture(scope="module")
def bwrap_executor():
    ex = LocalExecutor()
    if not ex.supports_binds:
        pytest.skip("bubblewrap is not usable here")
    return ex


def test_cocotb2_pass_fail_and_partial_credit(tmp_path: Path, bwrap_executor):
    task = adder_task()
    good = run_harness(task, {"rtl/adder.sv": ADDER}, tmp_path / "g", executor=bwrap_executor)
    assert good.status is Status.PASSED and good.score == 1.0, good.feedback
    assert good.metrics["tests_passed"] == good.metrics["tests_total"] == 2
    assert good.metrics["isolation"] == "bind" and good.metrics["python_env"] == "host"
    bad = run_harness(task, {"rtl/adder.sv": WRONG}, tmp_path / "b", executor=bwrap_executor)
    assert bad.status is Status.FAILED and bad.score == 0.0 and bad.metrics["tests_total"] == 2
    missing = run_harness(task, {}, tmp_path / "m", executor=bwrap_executor)
    assert missing.status is Status.FAILED and not missing.passed


def test_cocotb19_harness_runs_in_the_managed_env(tmp_path: Path, bwrap_executor):
    task = adder_task("cocotb19")
    good = run_harness(task, {"rtl/adder.sv": ADDER}, tmp_path / "g", executor=bwrap_executor)
    assert good.status is Status.PASSED, good.feedback
    assert good.metrics["cocotb_api"] == "cocotb19" and good.metrics["python_env"] == "cocotb19"
    bad = run_harness(task, {"rtl/adder.sv": WRONG}, tmp_path / "b", executor=bwrap_executor)
    assert bad.status is Status.FAILED


def test_without_bwrap_paths_are_rewritten(tmp_path: Path):
    task = adder_task()
    ex = LocalExecutor(use_bwrap=False)
    good = run_harness(task, {"rtl/adder.sv": ADDER}, tmp_path / "g", executor=ex)
    assert good.passed and good.metrics["isolation"] == "rewrite", good.feedback
    bad = run_harness(task, {"rtl/adder.sv": WRONG}, tmp_path / "b", executor=ex)
    assert bad.status is Status.FAILED


def _case_ids(ws: Path) -> list[str]:
    xml = (ws / "cvdp/rundir/.rtlreward/junit-direct.xml").read_text()
    return re.findall(r'name="(test_adder\[[^"]+\])"', xml)


def test_import_time_random_parametrisation_is_seeded(tmp_path: Path, bwrap_executor):
    task = adder_task()
    runs = {}
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        res = run_harness(task, {"rtl/adder.sv": ADDER}, tmp_path / name, executor=bwrap_executor, seed=seed)
        assert res.passed, res.feedback
        runs[name] = _case_ids(tmp_path / name)
    assert runs["a"] == runs["b"] and len(runs["a"]) == 2
    assert runs["a"] != runs["c"]


def test_sandbox_layout_src_read_only_and_rundir(tmp_path: Path, bwrap_executor):
    probe = textwrap.dedent("""\
        import os, pathlib
        def test_layout():
            assert os.getcwd() == "/code/rundir"
            assert os.environ["HOME"] == "/code/rundir"
            assert pathlib.Path("/code/rtl/adder.sv").exists() and pathlib.Path("/src/.env").exists()
            try:
                open("/src/x", "w")
            except OSError:
                pass
            else:
                raise AssertionError("/src is writable")
            pathlib.Path("/code/rundir/out.txt").write_text("ok")
        """)
    task = adder_task(extra={"src/test_runner.py": probe})
    res = run_harness(task, {"rtl/adder.sv": ADDER}, tmp_path, executor=bwrap_executor)
    assert res.passed, res.feedback + str(res.artifacts.get("outputs"))
    assert (tmp_path / "cvdp/rundir/out.txt").read_text() == "ok"


def test_every_service_must_pass_and_time_limit(tmp_path: Path, bwrap_executor):
    two = textwrap.dedent("""\
        services:
          quick:
            env_file: ./src/.env
            command: sh -c 'test -f /code/rtl/adder.sv'
          slow:
            env_file: ./src/.env
            command: sh -c 'sleep 300'
        """)
    task = adder_task(compose=two)
    res = run_harness(
        task, {"rtl/adder.sv": ADDER}, tmp_path, executor=bwrap_executor, options={"service_timeout": 5}
    )
    assert res.status is Status.TIMEOUT and not res.passed
    assert res.metrics["services"]["quick"]["returncode"] == 0
    assert res.metrics["services"]["slow"]["timed_out"] is True
    # exit 0 is not a pass: a service that is not a probed pytest session has no authentic record
    assert res.score == 0.0
    assert any(d.code == "harness-error" and "quick" in d.message for d in res.diagnostics)


def test_harness_problems_are_errors_not_passes(tmp_path: Path):
    task = Task(id="broken", harness=Harness(kind="cvdp", files={"src/.env": "SIM=icarus"}))
    res = run_harness(task, {}, tmp_path)
    assert res.status is Status.ERROR and not res.passed and "docker-compose.yml" in res.feedback


def test_cocotb_failure_message_reaches_the_diagnostics(tmp_path: Path, bwrap_executor):
    """pytest only sees `SystemExit: 1` from a failed cocotb run; the assertion comes from cocotb's own XML."""
    res = run_harness(adder_task(), {"rtl/adder.sv": WRONG}, tmp_path, executor=bwrap_executor)
    assert res.status is Status.FAILED
    cocotb = [d.message for d in res.diagnostics if d.code == "cocotb-failed"]
    assert cocotb and " gave " in cocotb[0], res.diagnostics
    assert " gave " in res.feedback
