"""A verdict channel the design cannot reach (rtlreward.verdict): hostile designs against the real tools.

Every forge here is what a policy searching for reward could emit: a `final` block that overwrites the results
file a runner used to read (cocotb's results.xml, a CVDP service's JUnit and cocotb XML), extra fake test cases, a
record that looks signed, a design that reads the probe's paths from /proc/self/environ and goes for the key,
an early `$finish`, a harness or planted conftest that exits 0 without a report. The safety stage is OFF
throughout (profile `NO_SAFETY`, or the runners called directly): this layer must hold on its own. Each hostile
design must earn no more than an empty module and never `passed`; the references must keep full reward, under
the local executor (bubblewrap) and, where Docker is available, the docker executor.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cvdp_harness_helpers import EXAMPLE_AGENTIC, EXAMPLE_NONAGENTIC, problem, run_harness
from hdl_stage_helpers import make_ctx

from rtlreward.engine import Engine
from rtlreward.model import Candidate, Harness, Status, Task
from rtlreward.plugins import get_registry
from rtlreward.seeding import write_sitecustomize
from rtlreward.verdict import EXIT_NO_KEY, PROBE_DIR, Channel, Trust, probe_env, sign, verify
from rtlreward_hdl.probes import DefinedTests, check_cocotb, defined_tests
from rtlreward_tests import TestsStage

pytestmark = pytest.mark.skipif(shutil.which("iverilog") is None, reason="needs Icarus Verilog")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ARB = "fixed_priority_arbiter"
SRC = "rtl/fixed_priority_arbiter.sv"
ARB_TESTS = (
    "test_reset_clears_grant",
    "test_no_request_no_grant",
    "test_single_requests",
    "test_priority_pairs",
    "test_all_requests",
    "test_random_requests",
    "test_grant_is_one_hot",
)
# shaped without the safety gate: the verdict channel is the only thing between a forge and the reward
NO_SAFETY = {
    "name": "no-safety",
    "extends": "shaped",
    "stages": ["format", "interface", "lint", "compile", "tests"],
    "gates": [],
    "stage": {"tests": {"timeout": 240}},  # a loaded machine must not turn a verdict into a timeout
}


# -- the record format ------------------------------------------------------------------------------------------
def test_only_this_runs_key_and_nonce_verify_a_record():
    key, nonce = os.urandom(32), "n-1"
    payload = {"kind": "cocotb", "nonce": nonce, "tests": [{"name": "t", "outcome": "passed"}]}
    data = sign(payload, key)
    assert verify(data, key, nonce) == payload
    assert verify(data, os.urandom(32), nonce) is None  # another key
    assert verify(data, key, "n-2") is None  # another run
    assert verify(sign({**payload, "nonce": "n-2"}, key), key, nonce) is None  # replayed from another run
    forged = json.loads(data)
    forged["payload"]["tests"][0]["outcome"] = "passed"
    forged["payload"]["tests"].append({"name": "fake", "outcome": "passed"})
    assert verify(json.dumps(forged).encode(), key, nonce) is None  # payload edited, MAC kept
    assert verify(data[:-10], key, nonce) is None and verify(b"", key, nonce) is None
    extra = {**json.loads(data), "trailer": 1}
    assert verify(json.dumps(extra).encode(), key, nonce) is None


def _probe_cmd(tmp: Path, code: str, channel: Channel, trust: Trust, cwd: Path | None = None):
    """Run `code` in a fresh interpreter started the way runners start harness processes: the seeding
    sitecustomize first on PYTHONPATH, then the probe folder; the channel's variables in the environment."""
    site = write_sitecustomize(tmp / "site")
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": f"{site}:{PROBE_DIR}",
        **probe_env(),
        **channel.env(trust),
    }
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=cwd or tmp, capture_output=True, text=True, timeout=60
    )


def test_probe_takes_the_key_before_any_harness_code_and_leaves_a_path_to_nothing(tmp_path):
    ch = Channel.open(tmp_path / "chan", role="unit")
    code = textwrap.dedent(f"""\
        import os, sys, rtlreward_probe
        environ = open("/proc/self/environ", "rb").read()
        print("in-environ", b"{ch.key_file}" in environ)  # the initial environment keeps the path ...
        print("file", os.path.exists({str(ch.key_file)!r}))  # ... which leads to nothing
        print("var", "RTLREWARD_PROBE_KEY" in os.environ)
        import ctypes
        print("dumpable", ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))  # PR_GET_DUMPABLE
        rtlreward_probe.emit({{"kind": "unit", "value": 7}})
        """)
    res = _probe_cmd(tmp_path, code, ch, Trust())
    assert res.returncode == 0, res.stderr
    assert "in-environ True" in res.stdout and "file False" in res.stdout and "var False" in res.stdout
    assert "dumpable 0" in res.stdout
    got = ch.receive()
    assert got.authentic and got.payload["value"] == 7 and got.payload["role"] == "unit"
    # A second interpreter with the same variables (a child, a re-run) finds no key and never runs.
    again = _probe_cmd(tmp_path, "print('ran')", ch, Trust())
    assert again.returncode == EXIT_NO_KEY and "ran" not in again.stdout


def test_import_guard_skips_planted_modules_and_changed_harness_files(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    harness = ws / "helper.py"
    harness.write_text("VALUE = 'harness'\n")
    (ws / "difflib.py").write_text(
        "raise SystemExit('planted difflib ran')\n"
    )  # shadows a lazy stdlib import
    (ws / "planted.py").write_text("VALUE = 'planted'\n")
    trust = Trust(
        files=Trust.hashed({"helper.py": harness.read_text()}, lambda rel: str(ws / rel)), untrusted=[ws]
    )
    ch = Channel.open(tmp_path / "chan", role="unit")
    code = textwrap.dedent(f"""\
        import sys
        sys.path.insert(0, {str(ws)!r})
        import helper, difflib
        print("helper", helper.VALUE, "difflib", difflib.__file__.startswith({str(ws)!r}))
        try:
            import planted
        except ImportError:
            print("planted refused")
        open({str(ws / "helper2.py")!r}, "w").write("VALUE = 2\\n")
        try:
            import helper2
        except ImportError:
            print("new file refused")
        """)
    res = _probe_cmd(tmp_path, code, ch, trust, cwd=ws)
    assert res.returncode == 0, res.stderr
    assert "helper harness difflib False" in res.stdout
    assert "planted refused" in res.stdout and "new file refused" in res.stdout
    # a .pyc planted beside a harness module (header matching the source's mtime and size) is never loaded
    import importlib.util
    from importlib._bootstrap_external import _code_to_timestamp_pyc

    st = harness.stat()
    pyc = Path(importlib.util.cache_from_source(str(harness)))
    pyc.parent.mkdir(exist_ok=True)
    code = compile("VALUE = 'planted pyc'\n", str(harness), "exec")
    pyc.write_bytes(_code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size))
    show = f"import sys; sys.path.insert(0, {str(ws)!r})\nimport helper; print('helper', helper.VALUE)"
    plain = subprocess.run([sys.executable, "-c", show], cwd=ws, capture_output=True, text=True, timeout=60)
    assert "helper planted pyc" in plain.stdout  # an unguarded interpreter takes it
    res = _probe_cmd(tmp_path, show, Channel.open(tmp_path / "chan3", role="unit"), trust, cwd=ws)
    assert res.returncode == 0 and "helper harness" in res.stdout, res.stdout + res.stderr
    # a harness file changed after the run began is no longer the harness's
    harness.write_text("VALUE = 'changed'\n")
    ch2 = Channel.open(tmp_path / "chan2", role="unit")
    res = _probe_cmd(
        tmp_path, f"import sys; sys.path.insert(0, {str(ws)!r})\nimport helper", ch2, trust, cwd=ws
    )
    assert res.returncode != 0 and "No module named 'helper'" in res.stderr


# -- completeness: the tests the harness defines ---------------------------------------------------------------
def test_defined_tests_follow_cocotbs_own_discovery():
    src = textwrap.dedent("""\
        import cocotb as cb
        from cocotb import test as t
        from cocotb.regression import TestFactory

        @cb.test()
        async def a(dut): pass

        @t
        async def b(dut): pass

        @cb.test(name="renamed")
        async def c(dut): pass

        async def helper(dut): pass

        async def gen(dut, x): pass

        tf = TestFactory(gen)
        """)
    assert defined_tests(src) == DefinedTests(frozenset({"a", "b", "renamed"}), frozenset({"gen"}))
    tests = DefinedTests(frozenset({"a", "b"}))

    def rec(*names, module="m", **kw):
        return {
            "kind": "cocotb",
            "modules": "m",
            "tests": [{"name": n, "module": module, "outcome": "passed", "message": ""} for n in names],
            **kw,
        }

    assert check_cocotb(rec("a", "b/x=1", "b/x=2"), {"m": tests}).ok
    assert "lacks" in check_cocotb(rec("a"), {"m": tests}).problem
    assert "does not define" in check_cocotb(rec("a", "b", "c"), {"m": tests}).problem
    assert "twice" in check_cocotb(rec("a", "b", "b"), {"m": tests}).problem
    assert check_cocotb(rec("a", "b", module="x"), {"m": tests}).problem
    assert check_cocotb(rec("a", "b", testcase="a"), {"m": tests}).problem
    assert "not one of the harness" in check_cocotb(rec("a", "b"), {}).problem
    gen = DefinedTests(frozenset(), frozenset({"gen"}))
    assert check_cocotb(rec("gen_001", "gen_002"), {"m": gen}).ok


# -- hostile designs: task folders (cocotb), local and docker --------------------------------------------------
def _docker_available() -> bool:
    try:
        import docker

        docker.from_env().ping()
        from rtlreward.sandbox.docker import DockerExecutor

        DockerExecutor()  # the default sim image must be present
        return True
    except Exception:
        return False


EXECUTORS = [
    pytest.param("local", id="local"),
    pytest.param("docker", id="docker", marks=pytest.mark.docker),
]


@pytest.fixture(scope="module", params=EXECUTORS)
def executor_name(request):
    if request.param == "docker" and not _docker_available():
        pytest.skip("no Docker engine or rtlreward sim image (`rtlreward sandbox build-image`)")
    return request.param


@pytest.fixture(scope="module")
def folder_tasks():
    return {t.id: t for t in get_registry().datasets()["folder"].load(str(EXAMPLES))}


HEADER = (
    "module fixed_priority_arbiter (input logic clk, input logic rst_n, input logic [3:0] req,\n"
    "                               output logic [3:0] grant);\n"
)
EMPTY = HEADER + "endmodule\n"


def _xml(names) -> str:
    cases = "".join(f'<testcase name=\\"{n}\\" classname=\\"test_fixed_priority_arbiter\\"/>' for n in names)
    return f'<testsuites><testsuite name=\\"all\\" tests=\\"{len(names)}\\">{cases}</testsuite></testsuites>'


def _overwrite(open_call: str, names=ARB_TESTS) -> str:
    """A design that grants nothing and, in `final` (after cocotb wrote its results), writes a passing report
    to every place a runner has read one from."""
    xml = _xml(names)
    writes = "".join(
        f'    fd = {open_call.format(path=p)};\n    if (fd != 0) begin $fdisplay(fd, "{xml}"); $fclose(fd); end\n'
        for p in ("_rtlreward/results.xml", "results.xml", "sim_build/results.xml")
    )
    return HEADER + "  integer fd;\n  final begin\n" + writes + "  end\nendmodule\n"


# Learns the probe's paths from /proc/self/environ (which keeps the initial environment), tries the key file,
# records what it could read, and replaces the verdict record with a signed-looking one in `final`.
FORGER = (
    HEADER
    + r"""  integer fd, c, cap, kfd, lfd, ofd;
  reg [8*20-1:0] win;
  reg [8*400-1:0] outp, keyp;
  initial begin
    win = 0; outp = 0; keyp = 0; cap = 0;
    fd = $fopen("/proc/self/environ", "r");
    c = $fgetc(fd);
    while (c != -1) begin
      if (cap == 1) begin if (c == 0) cap = 0; else outp = {outp, c[7:0]}; end
      else if (cap == 2) begin if (c == 0) cap = 0; else keyp = {keyp, c[7:0]}; end
      else begin
        win = {win, c[7:0]};
        if (win == "RTLREWARD_PROBE_OUT=") cap = 1;
        if (win == "RTLREWARD_PROBE_KEY=") cap = 2;
      end
      c = $fgetc(fd);
    end
    $fclose(fd);
    kfd = $fopen(keyp, "r");
    lfd = $fopen("forger.txt", "w");
    $fdisplay(lfd, "key_open=%0d out=%0s key=%0s", kfd, outp, keyp);
    if (kfd != 0) begin
      c = $fgetc(kfd);
      while (c != -1) begin $fwrite(lfd, "%c", c[7:0]); c = $fgetc(kfd); end
    end
    $fclose(lfd);
  end
  final begin
    ofd = $fopen(outp, "w");
    $fdisplay(ofd, "{\"v\": 1, \"payload\": {\"kind\": \"cocotb\", \"modules\": \"test_fixed_priority_arbiter\", \"nonce\": \"0\", \"role\": \"cocotb\", \"tests\": []}, \"mac\": \"%0s\"}", "0000000000000000000000000000000000000000000000000000000000000000");
    $fclose(ofd);
  end
endmodule
"""
)


def _reference_body(folder_tasks) -> str:
    ref = folder_tasks[ARB].reference[SRC]
    return ref[ref.index(");") + 2 : ref.rindex("endmodule")]


@pytest.fixture(scope="module")
def empty_reward(folder_tasks, executor_name):
    with Engine(NO_SAFETY, executor=executor_name, cache=False) as engine:
        return engine.score(folder_tasks[ARB], Candidate(files={SRC: EMPTY}))


def _score(folder_tasks, executor_name, text):
    with Engine(NO_SAFETY, executor=executor_name, cache=False) as engine:
        return engine.score(folder_tasks[ARB], Candidate(files={SRC: text}))


@pytest.mark.parametrize(
    "name,design",
    [
        ("fopenw-final", _overwrite('$fopenw("{path}")')),
        ("fopen-w-final", _overwrite('$fopen("{path}", "w")')),
        ("fopena-final", _overwrite('$fopena("{path}")')),
        ("forged-test-count", _overwrite('$fopen("{path}", "w")', names=[f"t{i}" for i in range(100)])),
        ("forged-record", FORGER),
    ],
)
def test_hostile_design_earns_no_more_than_an_empty_module(
    folder_tasks, executor_name, empty_reward, name, design
):
    r = _score(folder_tasks, executor_name, design)
    tests = r.stages["tests"]
    assert not r.passed and tests.status in (Status.FAILED, Status.ERROR), (name, tests.feedback)
    assert r.total <= empty_reward.total, (name, r.total, empty_reward.total, tests.feedback)
    assert tests.score <= empty_reward.stages["tests"].score
    if tests.status is Status.FAILED:  # an authentic record: the real tests, never the forged count
        assert tests.metrics["tests_total"] == len(ARB_TESTS)


def test_forger_never_gets_the_key(folder_tasks, tmp_path):
    """The design reads /proc/self/environ for the probe's variables and goes for the key file. The probed
    simulator is non-dumpable (its /proc files are root's: unreadable to an unprivileged sandbox user), and the
    key file is gone by time 0 in any case: nothing leaks, and the run is no pass."""
    from rtlreward.sandbox.local import LocalExecutor

    task = folder_tasks[ARB]
    r = TestsStage().run(make_ctx(task, {SRC: FORGER}, tmp_path, LocalExecutor()))
    assert not r.passed and r.score == 0.0 and r.status in (Status.FAILED, Status.ERROR)
    leak = (tmp_path / "tests" / "forger.txt").read_text()
    assert leak.startswith("key_open=0 "), leak
    assert '"key"' not in leak and "nonce" not in leak


def test_record_forged_with_the_right_path_and_nonce_is_not_authentic(folder_tasks, tmp_path, monkeypatch):
    """Worst case for the channel: the design knows where the record goes and the run's nonce (both made
    predictable here), and writes a record of seven passes over the real one in `final`. Without the key its
    MAC is wrong: an error, no credit."""
    import rtlreward.verdict as verdict_mod
    from rtlreward.sandbox.local import LocalExecutor

    monkeypatch.setattr(verdict_mod.secrets, "token_hex", lambda n=16: "ab" * n)
    root = tmp_path / "tests"
    out = root / "_rtlreward" / f"v-{'ab' * 12}.json"
    tests = ", ".join(
        f'{{\\"message\\": \\"\\", \\"module\\": \\"test_fixed_priority_arbiter\\", '
        f'\\"name\\": \\"{n}\\", \\"outcome\\": \\"passed\\"}}'
        for n in ARB_TESTS
    )
    record = (
        f'{{\\"mac\\": \\"{"0" * 64}\\", \\"payload\\": {{\\"cocotb\\": \\"2.1.0\\", \\"filter\\": '
        f'\\"\\", \\"kind\\": \\"cocotb\\", \\"modules\\": \\"test_fixed_priority_arbiter\\", '
        f'\\"nonce\\": \\"{"ab" * 16}\\", \\"role\\": \\"cocotb\\", \\"testcase\\": \\"\\", '
        f'\\"tests\\": [{tests}]}}, \\"v\\": 1}}'
    )
    design = HEADER + f'  integer fd;\n  final begin\n    fd = $fopen("{out}", "w");\n'
    design += f'    $fdisplay(fd, "{record}");\n    $fclose(fd);\n  end\nendmodule\n'
    r = TestsStage().run(make_ctx(folder_tasks[ARB], {SRC: design}, tmp_path, LocalExecutor()))
    written = json.loads(out.read_text())  # the forgery did land, well-formed, with the right nonce
    assert written["payload"]["nonce"] == "ab" * 16 and len(written["payload"]["tests"]) == len(ARB_TESTS)
    assert r.status is Status.ERROR and r.score == 0.0 and r.diagnostics[0].code == "no-record"
    assert "not authentic" in r.diagnostics[0].message


def test_design_that_finishes_early_fails_the_remaining_tests(folder_tasks, executor_name):
    body = _reference_body(folder_tasks)
    r = _score(folder_tasks, executor_name, HEADER + body + "  initial #150 $finish;\nendmodule\n")
    tests = r.stages["tests"]
    assert tests.status is Status.FAILED and not r.passed, tests.feedback
    assert tests.metrics["tests_total"] == len(ARB_TESTS) and tests.metrics["tests_passed"] < len(ARB_TESTS)


def test_harness_that_exits_0_without_a_report_is_an_error(folder_tasks, executor_name, tmp_path):
    """The simulator exits 0 before cocotb's regression ends (the same as a design that kills it): no record."""
    import attrs

    harness = "import os\nimport cocotb\n\n\n@cocotb.test()\nasync def test_exits(dut):\n    os._exit(0)\n"
    t = folder_tasks[ARB]
    t = attrs.evolve(t, harness=attrs.evolve(t.harness, files={"test_fixed_priority_arbiter.py": harness}))
    with Engine(NO_SAFETY, executor=executor_name, cache=False) as engine:
        r = engine.score(t, Candidate(files=t.reference))
    assert r.stages["tests"].status is Status.ERROR and not r.passed and r.stages["tests"].score == 0.0


def test_every_bundled_reference_keeps_full_reward(folder_tasks, executor_name):
    with Engine("shaped", executor=executor_name, cache=False) as engine:
        rewards = engine.score_batch([(t, Candidate(files=t.reference)) for t in folder_tasks.values()])
    for r in rewards:
        assert r.passed and r.total == pytest.approx(r.max_total), (r.task_id, r.feedback())


# -- hostile designs: the official CVDP examples, local (bubblewrap) and docker --------------------------------
@pytest.fixture(scope="module")
def cvdp_executor(executor_name):
    if executor_name == "local":
        from rtlreward.sandbox.local import LocalExecutor

        ex = LocalExecutor()
        if not ex.supports_binds:
            pytest.skip("bubblewrap is not usable here")
        return ex
    from rtlreward.sandbox.docker import DockerExecutor

    return DockerExecutor()


def _cvdp_hostile(reference: str, extra: str = "") -> str:
    """The reference's ports, no logic, and a `final` block writing passing reports where the CVDP runner and the
    harness's cocotb runner read them: the service's JUnit, cocotb's per-test result XML in the sim's folder."""
    header = reference[: reference.index(");") + 2]
    junit = (
        '<testsuites><testsuite name=\\"pytest\\" tests=\\"50\\">'
        + "".join(f'<testcase classname=\\"t\\" name=\\"case{i}\\"/>' for i in range(50))
        + "</testsuite></testsuites>"
    )
    cocotb = _xml(["test_fixed_priority_arbiter", "test_non_zero_1", "test_non_zero_2", "test_non_zero_3"])
    targets = [
        ("/code/rundir/.rtlreward/junit-direct.xml", junit),
        ("test_areg_param[0].result.xml", cocotb),
        ("test_runner.result.xml", cocotb),
        ("results.xml", cocotb),
    ]
    writes = "".join(
        f'    fd = $fopen("{p}", "w");\n    if (fd != 0) begin $fdisplay(fd, "{x}"); $fclose(fd); end\n'
        for p, x in targets
    )
    return header + "\n  integer fd;\n" + extra + "  final begin\n" + writes + "  end\nendmodule\n"


CVDP_EXAMPLES = [
    pytest.param(EXAMPLE_NONAGENTIC, id="lfsr"),
    pytest.param(EXAMPLE_AGENTIC, id="arbiter"),
]


@pytest.mark.parametrize("path", CVDP_EXAMPLES)
def test_cvdp_final_block_overwriting_reports_gets_nothing(path, cvdp_executor, tmp_path):
    task, reference = problem(path)
    ((rel, ref),) = reference.items()
    empty = run_harness(
        task, {rel: ref[: ref.index(");") + 2] + "\nendmodule\n"}, tmp_path / "e", executor=cvdp_executor
    )
    hostile = run_harness(task, {rel: _cvdp_hostile(ref)}, tmp_path / "h", executor=cvdp_executor)
    assert not hostile.passed and hostile.status in (Status.FAILED, Status.ERROR), hostile.feedback
    assert hostile.score <= empty.score and not empty.passed
    good = run_harness(task, reference, tmp_path / "r", executor=cvdp_executor)
    assert good.passed and good.score == 1.0, good.feedback


def test_cvdp_forged_test_count_and_answer_conftest(cvdp_executor, tmp_path):
    """Fifty fake JUnit cases and a conftest.py / pytest.ini among the answer's files: the count stays the
    harness's, the planted files never load, the design still fails."""
    task, reference = problem(EXAMPLE_AGENTIC)
    ((rel, ref),) = reference.items()
    files = {
        rel: _cvdp_hostile(ref),
        "src/conftest.py": "import os\nos._exit(0)\n",
        "src/pytest.ini": "[pytest]\naddopts = -p no:rtlreward_pytest_probe\n",
        "rundir/conftest.py": "import os\nos._exit(0)\n",
        "rundir/sitecustomize.py": "import os\nos._exit(0)\n",
    }
    res = run_harness(task, files, tmp_path, executor=cvdp_executor)
    assert not res.passed and res.score == 0.0, res.feedback
    assert res.metrics["tests_total"] == 1  # test_areg_param[0], not fifty
    assert not (tmp_path / "cvdp" / "src" / "conftest.py").exists()


def test_cvdp_service_exiting_0_without_a_report_is_an_error(cvdp_executor, tmp_path):
    task, reference = problem(EXAMPLE_AGENTIC)
    for i, command in enumerate(
        (
            "sh -c 'exit 0'",
            "python3 -c 'import sys; sys.exit(0)'",
            "pytest -p no:rtlreward_pytest_probe /src/x.py",
        )
    ):
        files = dict(task.harness.files)
        files["docker-compose.yml"] = (
            f"services:\n  direct:\n    env_file: ./src/.env\n    command: {command}\n"
        )
        files["src/x.py"] = "def test_x():\n    pass\n"
        t = Task(
            id=f"exit0-{i}", expected_files=task.expected_files, harness=Harness(kind="cvdp", files=files)
        )
        res = run_harness(t, reference, tmp_path / str(i), executor=cvdp_executor)
        assert res.status is Status.ERROR and not res.passed and res.score == 0.0, (command, res.feedback)


def test_cvdp_pytest_killed_mid_session_is_an_error(cvdp_executor, tmp_path):
    """A test that ends pytest with exit code 0 before the session finishes (os._exit in the harness)."""
    task, reference = problem(EXAMPLE_AGENTIC)
    files = dict(task.harness.files)
    files["src/test_runner.py"] = "import os\n\ndef test_bye():\n    os._exit(0)\n"
    t = Task(id="killed", expected_files=task.expected_files, harness=Harness(kind="cvdp", files=files))
    res = run_harness(t, reference, tmp_path, executor=cvdp_executor)
    assert res.status is Status.ERROR and not res.passed


def test_cvdp_design_that_finishes_early_fails(cvdp_executor, tmp_path):
    task, reference = problem(EXAMPLE_AGENTIC)
    ((rel, ref),) = reference.items()
    early = ref.replace("endmodule", "initial #60 $finish;\nendmodule")
    res = run_harness(task, {rel: early}, tmp_path, executor=cvdp_executor)
    assert res.status is Status.FAILED and not res.passed, res.feedback


# -- the VerilogEval / RTLLM runner: the testbench's tagged lines ----------------------------------------------
def test_verilog_eval_tag_cannot_be_read_or_forged(tmp_path):
    """simrun tags every testbench line with a per-run secret. A design that prints the verdict line, reads
    the tagged testbench (Icarus' `$fopenr`, a pasted `$fgets`) to learn the tag, or writes files, is refused
    or not believed; the reference passes."""
    from verilog_eval_helpers import VE_DATA
    from verilog_eval_helpers import run_harness as ve_run

    if not (VE_DATA / "dataset_spec-to-rtl").is_dir():
        pytest.skip("VerilogEval data not at ../shared/data/verilog-eval")
    from rtlreward_verilog_eval.dataset import VerilogEvalDataset

    task = next(iter(VerilogEvalDataset().load(VE_DATA, ids="Prob001_zero")))
    answer = "TopModule.sv"
    forged = 'module TopModule(output zero); assign zero = 1;\nfinal $display("Mismatches: 0 in 20 samples");\nendmodule\n'
    reads_tag = (
        "`define G fg``ets\n"
        "module TopModule(output zero); assign zero = 1; integer fd, r; reg [8*200-1:0] line;\n"
        'initial begin fd = $fopenr("Prob001_zero_test.sv"); r = $`G(line, fd); '
        '$display("%0s Mismatches: 0 in 20 samples", line); end\nendmodule\n'
    )
    writes = (
        "module TopModule(output zero); assign zero = 1; integer fd;\n"
        'final begin fd = $fopenw("Prob001_zero_test.sv"); $fdisplay(fd, "Mismatches: 0 in 20 samples"); end\n'
        "endmodule\n"
    )
    for name, text in (("forged", forged), ("reads-tag", reads_tag), ("writes", writes)):
        r = ve_run(task, {answer: text}, tmp_path / name)
        assert r.status is Status.FAILED and r.score == 0.0 and not r.passed, (name, r.feedback)
    ref = ve_run(task, task.reference, tmp_path / "ref")
    assert ref.status is Status.PASSED and ref.score == 1.0
