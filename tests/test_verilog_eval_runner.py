"""The `verilog-eval` harness runner with real Icarus: the benchmark's verdict, partial credit, and answers that
try to forge the verdict."""

from __future__ import annotations

import pytest
from verilog_eval_helpers import VE_DATA, run_harness

from rtlreward.model import Status
from rtlreward_hdl.simrun import control_tasks, split_tagged, tag_testbench
from rtlreward_verilog_eval.dataset import VerilogEvalDataset
from rtlreward_verilog_eval.runner import analyze

ANSWER = "TopModule.sv"


# -- pure helpers (no data needed) ----------------------------------------------------------------------------
def test_tag_testbench_covers_every_display_form():
    tb = (
        '$display("Mismatches: %1d in %1d samples", a, b);\n'
        "$display(FULL, EMPTY);\n"
        "$display();\n"
        '$write ( "x" );\n'
        "$displayh(v);\n"
    )
    out = tag_testbench(tb, "@@T@@")
    assert '$display("@@T@@Mismatches: %1d in %1d samples", a, b);' in out
    assert '$display("@@T@@", FULL, EMPTY);' in out
    assert '$display("@@T@@");' in out
    assert '$write ( "@@T@@x" );' in out
    assert '$displayh("@@T@@", v);' in out


def test_only_tagged_lines_are_the_testbenchs():
    tb, lines = split_tagged("Mismatches: 0 in 5 samples\nxx@@T@@Mismatches: 3 in 5 samples\n", "@@T@@")
    assert tb == ["Mismatches: 3 in 5 samples"]
    assert len(lines) == 2


def test_analyzer_follows_the_official_rules():
    tbline = ("Mismatches: 0 in 20 samples", True)
    assert analyze([tbline])[:3] == (".", 0, 20)
    # The same words printed by the design do not count.
    assert analyze([("Mismatches: 0 in 20 samples", False)])[0] == "R"
    assert analyze([("Mismatches: 4 in 20 samples", True)])[:3] == ("R", 4, 20)
    assert analyze([("Mismatches: 4 in 20 samples", True)], "always @(posedge reset)")[0] == "r"
    # Rules that fail a run whatever the mismatch count, in the analyzer's order.
    assert analyze([("x.sv:3: syntax error", False), tbline])[0] == "S"
    assert analyze([("TIMEOUT", True), tbline])[0] == "T"
    assert (
        analyze([("x.sv:1: warning: @* found no sensitivities so it will never trigger.", False), tbline])[0]
        == "n"
    )
    assert analyze([("some error here", False), tbline])[0] == "C"
    assert analyze([("Unable to bind wire/reg/memory `q'", False), tbline])[0] == "p"


def test_control_tasks_are_found_even_when_pasted():
    assert not control_tasks({"a.sv": "// $finish\nmodule m; endmodule"})
    found = control_tasks(
        {"a.sv": "module m;\ninitial #5 $finish;\nendmodule", "b.v": "`define F $fin``ish\n"}
    )
    assert [(d.file, d.line, d.code) for d in found] == [
        ("a.sv", 2, "sim-control"),
        ("b.v", 1, "sim-control"),
    ]


# -- real Icarus ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ve():
    if not (VE_DATA / "dataset_spec-to-rtl").is_dir():
        pytest.skip("VerilogEval data not at ../shared/data/verilog-eval")
    ds = VerilogEvalDataset()
    return {t.id: t for t in ds.load(VE_DATA, ids="Prob001_zero,Prob035_count1to10")}


def test_reference_passes_with_every_sample(ve, tmp_path):
    t = ve["Prob035_count1to10"]
    r = run_harness(t, t.reference, tmp_path)
    assert r.status is Status.PASSED and r.score == 1.0
    assert r.metrics["tests_passed"] == r.metrics["tests_total"] == r.metrics["samples"] > 100
    assert r.metrics["verilog_eval_code"] == "."


def test_wrong_answer_gets_partial_credit_and_per_output_diagnostics(ve, tmp_path):
    t = ve["Prob035_count1to10"]
    wrong = t.reference[ANSWER].replace("q == 10", "q == 11")
    r = run_harness(t, {ANSWER: wrong}, tmp_path)
    assert r.status is Status.FAILED
    assert 0.0 < r.score < 1.0
    n, m = r.metrics["mismatches"], r.metrics["samples"]
    assert r.score == pytest.approx(1 - n / m)
    assert any("Output 'q' has" in d.message for d in r.diagnostics)
    assert "Output 'q'" in r.feedback


@pytest.mark.parametrize("files", [{}, {ANSWER: ""}, {ANSWER: "   \n"}, {"notes.txt": "module TopModule;"}])
def test_empty_answer_fails(ve, tmp_path, files):
    r = run_harness(ve["Prob001_zero"], files, tmp_path)
    assert r.status is Status.FAILED and r.score == 0.0
    assert r.diagnostics[0].code == "no-answer"


def test_answer_file_names_are_not_options(ve, tmp_path):
    """An agent's file named like a compiler flag is still compiled as a file."""
    t = ve["Prob001_zero"]
    r = run_harness(t, {"-o.sv": t.reference[ANSWER]}, tmp_path)
    assert r.status is Status.PASSED


def test_syntax_error_and_missing_module_fail_with_locations(ve, tmp_path):
    t = ve["Prob001_zero"]
    r = run_harness(t, {ANSWER: "module TopModule(output zero) assign zero = 0; endmodule\n"}, tmp_path / "a")
    assert r.status is Status.FAILED and r.metrics["verilog_eval_code"] == "S"
    assert any(d.file == ANSWER and d.line == 1 for d in r.diagnostics)
    r = run_harness(t, {ANSWER: "module Other(output zero); assign zero = 0; endmodule\n"}, tmp_path / "b")
    assert r.status is Status.FAILED and r.diagnostics[0].code == "missing-module"


def test_always_block_without_sensitivities_fails_as_the_benchmark_says(ve, tmp_path):
    """Functionally right, but VerilogEval's analyzer scores Icarus's no-sensitivity warning 'n' (a fail)."""
    r = run_harness(
        ve["Prob001_zero"],
        {ANSWER: "module TopModule(output logic zero);\n  always_comb zero = 1'b0;\nendmodule\n"},
        tmp_path,
    )
    assert r.status is Status.FAILED and r.score == 0.0
    assert r.metrics["verilog_eval_code"] == "n"


def test_zero_delay_loop_hits_the_time_limit(ve, tmp_path):
    hang = (
        "module TopModule(output reg zero);\ninitial begin zero = 0; forever zero = ~zero; end\nendmodule\n"
    )
    r = run_harness(ve["Prob001_zero"], {ANSWER: hang}, tmp_path, sim_timeout=2)
    assert r.status is Status.TIMEOUT and r.score == 0.0


@pytest.mark.parametrize(
    "name,text,code",
    [
        (  # prints the verdict line itself (and is wrong): only the testbench's own line counts
            "forged-line",
            "module TopModule(output zero); assign zero = 1;\n"
            'initial $display("Mismatches: 0 in 20 samples");\n'
            'final $display("Mismatches: 0 in 20 samples");\nendmodule\n',
            "verilog_eval.mismatch",
        ),
        (  # reads the reference instance's output through an upward hierarchical name
            "upward-read",
            "module TopModule(output zero); assign zero = good1.zero; endmodule\n",
            "not-self-contained",
        ),
        (  # zeroes the testbench's error counter
            "counter-reset",
            "module TopModule(output zero); assign zero = 1;\nfinal tb.stats1.errors = 0;\nendmodule\n",
            "not-self-contained",
        ),
        (  # instantiates the benchmark's reference module
            "uses-reference",
            "module TopModule(output zero); RefModule r(.zero(zero)); endmodule\n",
            "not-self-contained",
        ),
        (  # pulls the reference in by including the harness's file
            "include-reference",
            '`include "Prob001_zero_ref.sv"\nmodule TopModule(output zero); RefModule r(.zero(zero)); endmodule\n',
            "compile-failed",
        ),
        (  # reads a file of the harness (RTLLM's expected-value files are read this way)
            "reads-files",
            'module TopModule(output zero); reg [0:0] m [0:0];\ninitial $readmemh("Prob001_zero_ref.sv", m);\n'
            "assign zero = m[0]; endmodule\n",
            "file-access",
        ),
        (  # ends the simulation before a mismatch can be counted
            "early-finish",
            "module TopModule(output zero); assign zero = 1; initial #1 $finish; endmodule\n",
            "sim-control",
        ),
    ],
)
def test_answers_cannot_forge_the_verdict(ve, tmp_path, name, text, code):
    r = run_harness(ve["Prob001_zero"], {ANSWER: text}, tmp_path)
    assert r.status is Status.FAILED, name
    assert r.score == 0.0
    assert r.diagnostics[0].code == code


def test_macros_the_answer_defines_do_not_reach_the_testbench(ve, tmp_path):
    """Icarus preprocesses the whole build in one macro space. A testbench branch that an answer's `define could
    select (here a synthetic one that declares a pass) must see the answer's macros undefined."""
    import attrs

    t = ve["Prob001_zero"]
    tb_name = t.harness.options["testbench"][0]
    tb = t.harness.files[tb_name].replace(
        "module tb();",
        'module tb();\n`ifdef ANSWER_SAYS_PASS\n  initial begin $display("Mismatches: 0 in 1 samples"); '
        "$finish; end\n`endif",
        1,
    )
    rigged = attrs.evolve(t, harness=attrs.evolve(t.harness, files={**t.harness.files, tb_name: tb}))
    wrong = "`define ANSWER_SAYS_PASS\n" + t.reference[ANSWER].replace("1'b0", "1'b1")
    r = run_harness(rigged, {ANSWER: wrong}, tmp_path / "w")
    assert r.status is Status.FAILED and r.metrics["mismatches"] > 0
    right = run_harness(rigged, {ANSWER: "`define ANSWER_SAYS_PASS\n" + t.reference[ANSWER]}, tmp_path / "r")
    assert right.status is Status.PASSED
