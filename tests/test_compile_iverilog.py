"""The `compile` stage with real Icarus: a gate with file:line diagnostics, elaborating with the harness's
sources."""

from __future__ import annotations

import attrs
import pytest
from hdl_stage_helpers import completion, example_task, make_ctx

from rtlreward.model import Status
from rtlreward.sandbox.local import LocalExecutor
from rtlreward_compile import CompileStage
from rtlreward_format.extract import extract
from rtlreward_hdl.files import OUTSIDE_MESSAGE
from rtlreward_hdl.icarus import parse_iverilog

ARB = "fixed_priority_arbiter"
SRC = "rtl/fixed_priority_arbiter.sv"
HELPER = (
    "module lowbit(input logic [3:0] a, output logic [3:0] y);\n  assign y = a & (~a + 4'b0001);\nendmodule\n"
)
USES_HELPER = """\
module fixed_priority_arbiter (
    input  logic       clk,
    input  logic       rst_n,
    input  logic [3:0] req,
    output logic [3:0] grant
);
  logic [3:0] low;
  lowbit u_low (.a(req), .y(low));
  always_ff @(posedge clk or negedge rst_n)
    if (!rst_n) grant <= '0;
    else grant <= low;
endmodule
"""


@pytest.fixture(scope="module")
def executor():
    return LocalExecutor()


@pytest.fixture(scope="module")
def task():
    return example_task(ARB)


def compile_(task, files, tmp_path, executor):
    return CompileStage().run(make_ctx(task, files, tmp_path / "ws", executor))


def test_reference_compiles(task, tmp_path, executor):
    r = compile_(task, task.reference, tmp_path, executor)
    assert r.status is Status.PASSED and r.score == 1.0


def test_syntax_error_names_file_and_line(task, tmp_path, executor):
    files = extract(completion(ARB, "syntax_error.txt"), task, [SRC]).files
    r = compile_(task, files, tmp_path, executor)
    assert r.status is Status.FAILED and r.score == 0.0
    errors = [d for d in r.diagnostics if d.severity == "error"]
    assert errors and (errors[0].file, errors[0].line) == (SRC, 9)
    assert r.feedback.startswith(f"{SRC}:9: error:")


def test_unknown_module_is_reported_at_its_line(task, tmp_path, executor):
    r = compile_(task, {SRC: USES_HELPER}, tmp_path, executor)
    assert r.status is Status.FAILED
    assert any(d.file == SRC and d.line == 8 and "lowbit" in d.message for d in r.diagnostics), r.diagnostics


def test_context_hdl_under_rtl_elaborates_with_the_answer(task, tmp_path, executor):
    t = attrs.evolve(task, context={"rtl/lowbit.sv": HELPER})
    assert compile_(t, {SRC: USES_HELPER}, tmp_path, executor).status is Status.PASSED


def test_compile_sources_decide_what_elaborates(task, tmp_path, executor):
    # The helper lives outside rtl/: only an explicit compile_sources entry brings it in.
    t = attrs.evolve(task, context={"lib/lowbit.sv": HELPER})
    assert compile_(t, {SRC: USES_HELPER}, tmp_path / "a", executor).status is Status.FAILED
    t2 = attrs.evolve(t, compile_sources=(SRC, "lib/lowbit.sv"))
    assert compile_(t2, {SRC: USES_HELPER}, tmp_path / "b", executor).status is Status.PASSED


def test_missing_toplevel_fails_with_its_name(task, tmp_path, executor):
    other = task.reference[SRC].replace("module fixed_priority_arbiter", "module arbiter")
    r = compile_(task, {SRC: other}, tmp_path, executor)
    assert r.status is Status.FAILED and r.score == 0.0
    assert "fixed_priority_arbiter" in r.feedback


def test_include_outside_workspace_is_refused(task, tmp_path, executor):
    files = extract(completion(ARB, "include_passwd.txt"), task, [SRC]).files
    r = compile_(task, files, tmp_path, executor)
    assert r.status is Status.FAILED and r.diagnostics[0].code == "unsafe-include"


def test_parser_keeps_lines_and_hides_outside_files(tmp_path):
    out = (
        f"{tmp_path}/rtl/a.sv:4: syntax error\n"
        "rtl/a.sv:7: error: Unknown module type: foo\n"
        "rtl/a.sv:9: warning: Port 2 (b) of x expects 4 bits, got 1.\n"
        "/etc/passwd:1: syntax error\n"
        "I give up.\n"
    )
    d = parse_iverilog(out, tmp_path)
    assert [(x.file, x.line, x.severity) for x in d[:3]] == [
        ("rtl/a.sv", 4, "error"),
        ("rtl/a.sv", 7, "error"),
        ("rtl/a.sv", 9, "warning"),
    ]
    assert d[3].message == OUTSIDE_MESSAGE and d[3].file is None
