"""Partial test credit is paid above what a design that does nothing earns (issue 15): a module with the task's
interface and its outputs tied to 0 earned 1.32 of 1.6 under `shaped` on a VerilogEval problem whose reference
output is mostly 0. Real Icarus, real VerilogEval testbenches."""

from __future__ import annotations

import json

import pytest
from verilog_eval_helpers import VE_DATA, needs_verilog_eval

from rtlreward.engine import Engine
from rtlreward.model import Candidate
from rtlreward_hdl.stubs import STUB_KINDS, stub_designs
from rtlreward_verilog_eval.dataset import VerilogEvalDataset

pytestmark = needs_verilog_eval
IDS = "Prob011_norgate,Prob009_popcount3,Prob001_zero"


@pytest.fixture(scope="module")
def tasks():
    return {t.id: t for t in VerilogEvalDataset().load(VE_DATA, ids=IDS)}


@pytest.fixture
def engine(tmp_path, monkeypatch):
    monkeypatch.setenv("RTLREWARD_CACHE_DIR", str(tmp_path / "cache"))  # a baseline measured here, not found
    import rtlreward_tests

    monkeypatch.setattr(rtlreward_tests, "_BASELINES", {})
    with Engine("shaped", cache=False, workspace_root=tmp_path / "ws") as eng:
        yield eng


def test_stubs_have_the_task_interface(tasks):
    stubs = stub_designs(tasks["Prob009_popcount3"])
    assert set(stubs) == set(STUB_KINDS)
    text = stubs["ones"]["TopModule.sv"]
    assert "module TopModule" in text and "input wire [2:0] in" in text and "assign out = {2{1'b1}};" in text
    assert "assign out = in;" in stubs["passthrough"]["TopModule.sv"]


def test_a_stub_earns_no_test_credit(engine, tasks, tmp_path):
    """Tied to 0, the NOR gate's output matches 79 % of the testbench's samples: that is the baseline, and the
    stub earns nothing above it: format + syntax + interface only."""
    t = tasks["Prob011_norgate"]
    r = engine.score(t, Candidate(files=stub_designs(t)["zeros"]))
    tests = r.stages["tests"]
    assert tests.metrics["tests_score_raw"] > 0.5  # what it used to be paid
    assert tests.metrics["tests_stub_score"] == tests.metrics["tests_score_raw"]
    assert tests.score == 0.0 and r.total == pytest.approx(0.6)
    assert "stub-baseline" in {d.code for d in tests.diagnostics}
    # measured once per task: on disk for the next process
    (found,) = (tmp_path / "cache" / "tests-stub-baseline").glob("*.json")
    assert json.loads(found.read_text())["stub_score"] == pytest.approx(tests.metrics["tests_stub_score"])


def test_partial_credit_starts_above_the_baseline(engine, tasks):
    """popcount3 with the high bit right and the low bit tied to 0: credit above the stub's, below a pass."""
    t = tasks["Prob009_popcount3"]
    half = "module TopModule(input [2:0] in, output [1:0] out);\n"
    half += "  assign out = {(in[0]&in[1])|(in[0]&in[2])|(in[1]&in[2]), 1'b0};\nendmodule\n"
    r = engine.score(t, Candidate(files={"TopModule.sv": half}))
    tests = r.stages["tests"]
    raw, base = tests.metrics["tests_score_raw"], tests.metrics["tests_stub_score"]
    assert 0 < base < raw < 1
    assert tests.score == pytest.approx((raw - base) / (1 - base), abs=1e-4)  # raw and base are rounded
    assert 0 < tests.score < raw


def test_a_task_whose_reference_is_a_stub_still_passes_its_stub(engine, tasks):
    """Prob001_zero's reference ties its output to 0: the stub is the right answer and passes in full."""
    t = tasks["Prob001_zero"]
    r = engine.score(t, Candidate(files=stub_designs(t)["zeros"]))
    assert r.passed and r.total == pytest.approx(1.6)
