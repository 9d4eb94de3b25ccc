"""The `tests` stage and the `cocotb` harness runner with real cocotb + Icarus: partial credit from the signed test
record (rtlreward.verdict), crashes never pass, per-test messages as diagnostics, seeds reach harness code."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from hdl_stage_helpers import completion, example_task, make_ctx

from rtlreward.model import Harness, Status
from rtlreward.sandbox.local import LocalExecutor
from rtlreward.seeding import seed_env
from rtlreward_cocotb import parse_junit
from rtlreward_format.extract import extract
from rtlreward_tests import TestsStage

ARB = "fixed_priority_arbiter"
SRC = "rtl/fixed_priority_arbiter.sv"
TM = "test_fixed_priority_arbiter.py"


@pytest.fixture(scope="module")
def executor():
    return LocalExecutor()


@pytest.fixture(scope="module")
def task():
    return example_task(ARB)


def run_tests(task, files, workspace, executor, **kw):
    return TestsStage().run(make_ctx(task, files, workspace, executor, **kw))


@pytest.fixture(scope="module")
def reversed_result(task, executor, tmp_path_factory):
    files = extract(completion(ARB, "reversed_priority.txt"), task, [SRC]).files
    return run_tests(task, files, tmp_path_factory.mktemp("rev"), executor)


def test_reference_passes_every_test(task, executor, tmp_path):
    r = run_tests(task, task.reference, tmp_path, executor)
    assert r.status is Status.PASSED and r.score == 1.0
    assert (r.metrics["tests_passed"], r.metrics["tests_total"]) == (7, 7)
    assert r.feedback == "" and r.diagnostics == ()


def test_partial_credit_from_the_xml(reversed_result):
    r = reversed_result
    assert r.status is Status.FAILED
    assert (r.metrics["tests_passed"], r.metrics["tests_total"]) == (4, 7)
    # 4 of 7 tests, paid above what a design that does nothing passes of the same tests (rtlreward_tests)
    raw, base = r.metrics["tests_score_raw"], r.metrics["tests_stub_score"]
    assert raw == pytest.approx(4 / 7) and 0 < base < raw
    assert r.score == pytest.approx((raw - base) / (1 - base), abs=1e-6)
    names = sorted(d.message.split(":")[0] for d in r.diagnostics if d.code != "stub-baseline")
    assert names == ["test_all_requests", "test_priority_pairs", "test_random_requests"]


def test_feedback_is_compact_and_names_the_failure(reversed_result):
    fb = reversed_result.feedback
    assert fb.startswith(
        "3/7 tests failed: test_priority_pairs: req=0b0011: expected grant=0b0001 got 0b0010"
    )
    assert len(fb) < 700 and "\n" not in fb


def test_junit_parser_counts_failures_errors_and_skips(tmp_path):
    xml = tmp_path / "r.xml"
    xml.write_text(
        '<testsuites><testsuite name="all">'
        '<testcase name="a" classname="m"/>'
        '<testcase name="b" classname="m"><failure message="expected 1 got 2"/></testcase>'
        '<testcase name="c" classname="m"><error message="boom">Traceback\nValueError: bad</error></testcase>'
        '<testcase name="d" classname="m"><skipped/></testcase>'
        "</testsuite></testsuites>"
    )
    cases = {c.name: c for c in parse_junit(xml)}
    assert cases["a"].passed and not cases["b"].passed and not cases["c"].passed
    assert cases["b"].message == "expected 1 got 2"
    assert cases["d"].skipped and not cases["d"].passed
    xml.write_text("<testsuites><testsuite")
    with pytest.raises(ValueError):
        parse_junit(xml)


def _with_harness(task, text: str):
    return attrs.evolve(task, harness=attrs.evolve(task.harness, files={TM: text}))


def test_simulator_killed_mid_run_is_never_a_pass(task, executor, tmp_path):
    # The simulator process exits 0 before cocotb's regression ends: no signed record, so an error, no credit.
    harness = "import os\nimport cocotb\n\n\n@cocotb.test()\nasync def test_exits(dut):\n    os._exit(0)\n"
    r = run_tests(_with_harness(task, harness), task.reference, tmp_path, executor)
    assert r.status is Status.ERROR and r.score == 0.0
    assert r.diagnostics[0].code == "no-record"


def test_harness_import_error_is_reported(task, executor, tmp_path):
    # A test module that does not import is the harness's fault: an error (never cached), with the cause.
    r = run_tests(_with_harness(task, "import no_such_module_here\n"), task.reference, tmp_path, executor)
    assert r.status is Status.ERROR and r.score == 0.0
    assert "no_such_module_here" in r.diagnostics[0].message


def test_log_text_claiming_success_does_not_count(task, executor, tmp_path):
    # The design prints cocotb's summary banner; the verdict still comes from the XML.
    files = extract(completion(ARB, "reversed_priority.txt"), task, [SRC]).files
    fake = files[SRC].replace(
        "endmodule", 'initial $display("** TESTS=7 PASS=7 FAIL=0 SKIP=0 **");\nendmodule'
    )
    r = run_tests(task, {SRC: fake}, tmp_path, executor)
    assert r.metrics["tests_passed"] == 4 and r.status is Status.FAILED


def test_build_failure_fails_with_the_tool_error(task, executor, tmp_path):
    files = extract(completion(ARB, "syntax_error.txt"), task, [SRC]).files
    r = run_tests(task, files, tmp_path, executor)
    assert r.status is Status.FAILED and r.score == 0.0
    assert r.diagnostics[0].code == "build-failed"
    assert any(d.file == SRC and d.line == 9 for d in r.diagnostics)


def test_answer_python_files_cannot_replace_the_harness(task, executor, tmp_path):
    cheat = "import cocotb\n\n\n@cocotb.test()\nasync def test_ok(dut):\n    pass\n"
    files = {**extract(completion(ARB, "reversed_priority.txt"), task, [SRC]).files, TM: cheat}
    r = run_tests(task, files, tmp_path, executor)
    assert r.metrics["tests_total"] == 7 and r.status is Status.FAILED


def test_answer_cannot_ship_a_prebuilt_simulation(task, executor, tmp_path):
    # A stale sim.vvp next to the sources would otherwise be reused; the runner always builds from the answer.
    ref = run_tests(task, task.reference, tmp_path / "ref", executor)
    assert ref.passed
    prebuilt = (tmp_path / "ref" / "tests" / "sim_build" / "sim.vvp").read_text(errors="replace")
    files = {
        **extract(completion(ARB, "reversed_priority.txt"), task, [SRC]).files,
        "sim_build/sim.vvp": prebuilt,
    }
    r = run_tests(task, files, tmp_path / "cheat", executor)
    assert r.metrics["tests_passed"] == 4 and r.status is Status.FAILED


def test_no_harness_is_skipped(task, executor, tmp_path):
    r = run_tests(attrs.evolve(task, harness=None), task.reference, tmp_path, executor)
    assert r.status is Status.SKIPPED and r.diagnostics[0].code == "no-harness"


def test_unknown_harness_kind_is_skipped_with_a_diagnostic(task, executor, tmp_path):
    t = attrs.evolve(task, harness=Harness(kind="no-such-kind"))
    r = run_tests(t, task.reference, tmp_path, executor)  # registry=None: the global registry is used
    assert r.status is Status.SKIPPED
    assert "no-such-kind" in r.diagnostics[0].message and r.diagnostics[0].code == "no-harness-runner"


def test_seed_reaches_harness_random_draws(task, executor, tmp_path):
    # Module-level draws happen before cocotb exists (CVDP's test_runner.py does this); sitecustomize seeds them.
    harness = (
        "import random\nimport cocotb\n\nDRAW = random.randrange(1 << 30)\n\n\n"
        "@cocotb.test()\nasync def test_draw(dut):\n    assert False, f'draw={DRAW}'\n"
    )
    t = _with_harness(task, harness)
    msgs = [
        run_tests(t, task.reference, tmp_path / f"w{i}", executor, seed=seed).diagnostics[0].message
        for i, seed in enumerate((7, 7, 8))
    ]
    assert msgs[0] == msgs[1] != msgs[2]


def test_seed_env_seeds_python_random_and_hash(executor, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    code = "import random; print(random.random(), hash('rtl'))"

    def draw(seed):
        env = seed_env(seed, base_pythonpath=["/nonexistent"], site_dir=ws / "site")
        assert env["PYTHONPATH"].split(":") == [str(ws / "site"), "/nonexistent"]
        assert env["COCOTB_RANDOM_SEED"] == str(seed) and env["PYTHONHASHSEED"] == str(seed)
        return executor.run([executor.python, "-c", code], workspace=ws, env=env).stdout

    assert draw(3) == draw(3) != draw(4)


def test_seed_env_default_site_dir_is_usable(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    env = seed_env(5)
    site = Path(env["PYTHONPATH"].split(":")[0])
    assert (site / "sitecustomize.py").is_file() and site.is_relative_to(tmp_path)
