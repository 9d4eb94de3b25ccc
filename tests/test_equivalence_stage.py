"""The `equivalence` stage with the real Yosys, ABC and Icarus: proofs, refutations with counterexamples, partial
credit per output bit, the simulation fallback, hostile names, and the `equiv` / `trusted` profiles."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from equivalence_helpers import run_equivalence

from rtlreward.model import Candidate, Status, Task
from rtlreward.plugins import get_registry
from rtlreward.sandbox.local import LocalExecutor
from rtlreward_equivalence import DEFAULTS, ORDERS

pytestmark = pytest.mark.skipif(
    not (shutil.which("yosys") and shutil.which("yosys-abc") and shutil.which("iverilog")),
    reason="needs Yosys (apt-get install yosys) and Icarus Verilog",
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
CVDP_DATA = ROOT / "cvdp_adapter" / "data"


@pytest.fixture(scope="module")
def executor():
    return LocalExecutor()


@pytest.fixture(scope="module")
def stage():
    return get_registry().stages()["equivalence"]


@pytest.fixture(scope="module")
def examples():
    return {t.id: t for t in get_registry().datasets()["folder"].load(str(EXAMPLES))}


@pytest.fixture(scope="module")
def lfsr():
    """(task, reference path, reference text) of the official CVDP example `cvdp_copilot_lfsr_0001`."""
    from cvdp_adapter.conformance import reference_files
    from cvdp_adapter.records import parse_record
    from cvdp_adapter.tasks import record_to_task

    (path,) = CVDP_DATA.glob("*nonagentic*with_solutions.jsonl")
    raw = next(json.loads(line) for line in path.read_text().splitlines() if "cvdp_copilot_lfsr_0001" in line)
    rec = parse_record(raw)
    task = record_to_task(rec)
    ((rel, text),) = reference_files(rec).items()
    return task, rel, text


def check(stage, executor, tmp_path: Path, task: Task, files: dict[str, str], **options):
    return run_equivalence(stage, executor, tmp_path, task, files, seed=1234, timeout=60, **options)


def completion(task_id: str, name: str) -> str:
    text = (EXAMPLES / task_id / "completions" / f"{name}.txt").read_text()
    m = re.search(r"```\w*\n(.*?)```", text, re.S)
    assert m, name
    return m.group(1)


def comb_task(reference: str, top: str) -> Task:
    return Task(
        id=f"comb-{top}", expected_files=("rtl/top.sv",), toplevel=top, reference={"rtl/top.sv": reference}
    )


LFSR_CONST0 = """module lfsr_8bit(input clock, reset, input [7:0] lfsr_seed, output [7:0] lfsr_out);
  assign lfsr_out = 8'd0;
endmodule
"""


# -- the CVDP LFSR example: its harness passes both wrong designs ----------------------------------------------
def test_lfsr_reference_is_proved_equivalent_to_itself_renamed(stage, executor, tmp_path, lfsr):
    task, rel, text = lfsr
    renamed = re.sub(r"\bq([123])\b", r"tap_\1", text)
    assert renamed != text
    r = check(stage, executor, tmp_path, task, {rel: renamed})
    assert r.status is Status.PASSED and r.score == 1.0, r.feedback
    assert r.metrics["equivalence"] == "proved" and r.metrics["method"] == "formal"
    assert r.metrics["formal_engine"] == "pdr"  # a sequential miter: ABC's
    assert r.metrics["reset"] == "reset" and r.metrics["clock"] == "clock"


@pytest.mark.parametrize("wrong", ["constant_zero", "ignores_seed"])
def test_lfsr_wrong_designs_are_refuted_with_a_counterexample(stage, executor, tmp_path, lfsr, wrong):
    task, rel, text = lfsr
    body = (
        LFSR_CONST0
        if wrong == "constant_zero"
        else text.replace("lfsr_out <= lfsr_seed;", "lfsr_out <= 8'h01;")
    )
    assert body != text
    r = check(stage, executor, tmp_path, task, {rel: body})
    assert r.status is Status.FAILED and r.metrics["equivalence"] == "refuted", r.feedback
    assert r.score < 1.0
    # The counterexample: first differing cycle, the inputs up to it, expected and actual per output.
    cycle = re.search(r"First difference at cycle (\d+)", r.feedback)
    assert cycle, r.feedback
    n = int(cycle.group(1))
    for c in range(n + 1):
        assert re.search(rf"cycle {c}: reset=[01] lfsr_seed=8'h[0-9a-f]{{2}}", r.feedback), r.feedback
    m = re.search(r"lfsr_out: expected 8'h([0-9a-f]{2}), got 8'h([0-9a-f]{2})  <-- differs", r.feedback)
    assert m and m.group(1) != m.group(2), r.feedback
    (diag,) = [d for d in r.diagnostics if d.code == "not-equivalent"]
    assert "output lfsr_out differs from the reference" in diag.message
    assert r.metrics["first_mismatch_cycle"] >= 0


# -- the bundled example tasks ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("task_id", "name"),
    [
        ("counter", "correct"),
        ("sync_fifo", "correct"),
        ("fixed_priority_arbiter", "correct"),
        ("fixed_priority_arbiter", "think_then_code"),
    ],
)
def test_correct_completions_are_proved(stage, executor, tmp_path, examples, task_id, name):
    task = examples[task_id]
    r = check(stage, executor, tmp_path, task, {task.expected_files[0]: completion(task_id, name)})
    assert r.status is Status.PASSED and r.score == 1.0, r.feedback
    assert r.metrics["equivalence"] == "proved"


@pytest.mark.parametrize(
    ("task_id", "name", "output"),
    [
        ("counter", "en_ignores_load", "q"),
        ("sync_fifo", "full_overwrites", "dout|full"),  # the push when full changes the count too
        ("fixed_priority_arbiter", "reversed_priority", "grant"),
    ],
)
def test_wrong_completions_are_refuted(stage, executor, tmp_path, examples, task_id, name, output):
    task = examples[task_id]
    r = check(stage, executor, tmp_path, task, {task.expected_files[0]: completion(task_id, name)})
    assert r.status is Status.FAILED and r.metrics["equivalence"] == "refuted", r.feedback
    assert re.search(rf"^  ({output}): expected \S+, got \S+  <-- differs$", r.feedback, re.M), r.feedback
    assert r.metrics["outputs_mismatched"] >= 1


def test_one_wrong_output_earns_more_than_all_wrong(stage, executor, tmp_path, examples):
    task = examples["counter"]
    good = completion("counter", "correct")
    wrap_wrong = good.replace("assign wrap = en & ~load & (&q);", "assign wrap = &q;")
    both_wrong = completion("counter", "en_ignores_load")
    assert wrap_wrong != good
    one = check(stage, executor, tmp_path / "one", task, {task.expected_files[0]: wrap_wrong})
    both = check(stage, executor, tmp_path / "both", task, {task.expected_files[0]: both_wrong})
    assert one.status is Status.FAILED and both.status is Status.FAILED
    assert one.metrics["outputs_mismatched"] == 1 and both.metrics["outputs_mismatched"] == 2
    # q (8 bits) never differs, wrap (1 bit) does: 8 of 9 output bits earn credit, paid above what a constant stub
    # earns (no bit of this counter is constant over the stimulus) and scaled to at most `refuted_max`.
    assert one.metrics["bit_credit"] == pytest.approx(8 / 9) and one.metrics["stub_bit_credit"] == 0
    assert one.score == pytest.approx(DEFAULTS["refuted_max"] * 8 / 9)
    assert both.score < one.score <= DEFAULTS["refuted_max"]
    assert "wrap: expected" in one.feedback and "q: expected" in one.feedback


# -- other styles, same function -------------------------------------------------------------------------------
DEC_IF = """module dec(input [1:0] sel, input en, output reg [3:0] y);
  always @(*) begin
    if (!en) y = 4'b0000;
    else if (sel == 2'd0) y = 4'b0001;
    else if (sel == 2'd1) y = 4'b0010;
    else if (sel == 2'd2) y = 4'b0100;
    else y = 4'b1000;
  end
endmodule
"""
DEC_CASE = """module dec(input [1:0] sel, input en, output logic [3:0] y);
  always_comb begin
    case ({en, sel})
      3'b100: y = 4'b0001;
      3'b101: y = 4'b0010;
      3'b110: y = 4'b0100;
      3'b111: y = 4'b1000;
      default: y = '0;
    endcase
  end
endmodule
"""
REV_GENERATE = """module rev #(parameter N = 8) (input [N-1:0] a, input [N-1:0] b, output [N-1:0] y, output p);
  genvar i;
  generate for (i = 0; i < N; i = i + 1) begin : g
    assign y[i] = a[N-1-i] ^ b[i];
  end endgenerate
  assign p = ^a;
endmodule
"""
REV_UNROLLED = """module rev (input [7:0] a, input [7:0] b, output [7:0] y, output p);
  assign y = {a[0]^b[7], a[1]^b[6], a[2]^b[5], a[3]^b[4], a[4]^b[3], a[5]^b[2], a[6]^b[1], a[7]^b[0]};
  assign p = a[0]^a[1]^a[2]^a[3]^a[4]^a[5]^a[6]^a[7];
endmodule
"""
# Yosys 0.23 cannot parse `return` in a function; Icarus and Yosys 0.70 (pyosys) can.
REV_RETURN = """module rev (input [7:0] a, input [7:0] b, output [7:0] y, output p);
  function automatic [7:0] f(input [7:0] x, input [7:0] z);
    integer k; reg [7:0] r;
    for (k = 0; k < 8; k = k + 1) r[k] = x[7-k] ^ z[k];
    return r;
  endfunction
  assign y = f(a, b);
  assign p = ^a;
endmodule
"""
# No Yosys here reads `foreach` (0.23 nor 0.70); Icarus 11 does.
REV_FOREACH = """module rev (input [7:0] a, input [7:0] b, output reg [7:0] y, output p);
  logic [7:0] t;
  always @* begin
    t = a;
    foreach (t[k]) y[k] = t[7-k] ^ b[k];
  end
  assign p = ^a;
endmodule
"""


@pytest.mark.parametrize(
    ("reference", "candidate", "top"),
    [(DEC_IF, DEC_CASE, "dec"), (DEC_CASE, DEC_IF, "dec"), (REV_GENERATE, REV_UNROLLED, "rev")],
    ids=["case-vs-if", "if-vs-case", "generate-vs-unrolled"],
)
def test_another_style_is_not_refuted(stage, executor, tmp_path, reference, candidate, top):
    r = check(stage, executor, tmp_path, comb_task(reference, top), {"rtl/top.sv": candidate})
    assert r.status is Status.PASSED and r.metrics["equivalence"] == "proved", r.feedback


XOR_GATE = "module x1(input a, input b, output y);\n  assign y = a ^ b;\nendmodule\n"
XOR_SOP = "module x1(input a, input b, output y);\n  assign y = (a & ~b) | (~a & b);\nendmodule\n"


def test_a_small_combinational_miter_is_decided_without_abc(stage, executor, tmp_path):
    # The same logic on both sides: Yosys's optimisation leaves the miter's output the constant 0 (`structural`).
    # Another structure of the same function, and a wrong one, are decided by evaluating the miter on every input
    # (`exhaustive`); the wrong one's first differing input is the counterexample the simulation replays (with the
    # proof first: simulation first, the random runs refute it before any proof, test_simulation_first_*).
    task = comb_task(XOR_GATE, "x1")
    same = check(stage, executor, tmp_path / "same", task, {"rtl/top.sv": "// restated\n" + XOR_GATE})
    assert same.status is Status.PASSED and same.metrics["equivalence"] == "proved", same.feedback
    assert same.metrics["formal_engine"] == "structural"
    other = check(stage, executor, tmp_path / "other", task, {"rtl/top.sv": XOR_SOP})
    assert other.status is Status.PASSED and other.metrics["formal_engine"] == "exhaustive", other.metrics
    wrong = check(
        stage,
        executor,
        tmp_path / "wrong",
        task,
        {"rtl/top.sv": XOR_GATE.replace("^", "&")},
        order="formal-first",
    )
    assert wrong.status is Status.FAILED and wrong.metrics["formal"] == "cex", wrong.metrics
    assert wrong.metrics["formal_engine"] == "exhaustive" and wrong.metrics["method"] == "formal", (
        wrong.metrics
    )
    assert "counterexample" in wrong.feedback and "exhaustive" in wrong.feedback, wrong.feedback


PARITY = "module p(input [31:0] a, output y);\n  assign y = ^a;\nendmodule\n"


def test_simulation_first_refutes_without_a_proof(stage, executor, tmp_path):
    # The default order: the random runs refute a plainly wrong answer, so no proof is started for it; the same
    # answer with the proof first is refuted by its counterexample. Both fail.
    task = comb_task(XOR_GATE, "x1")
    wrong = {"rtl/top.sv": XOR_GATE.replace("^", "&")}
    first = check(stage, executor, tmp_path / "sim", task, wrong)
    assert first.status is Status.FAILED and first.metrics["equivalence"] == "refuted", first.metrics
    assert first.metrics["formal"] == "skipped" and first.metrics["formal_seconds"] == 0, first.metrics
    assert first.metrics["method"] == "simulation" and "formal_engine" not in first.metrics, first.metrics
    proof = check(stage, executor, tmp_path / "formal", task, wrong, order="formal-first")
    assert proof.status is Status.FAILED and proof.metrics["formal"] == "cex", proof.metrics
    assert first.score == proof.score == 0.0  # an AND for an XOR: no output bit above a stub's


def test_simulation_first_still_proves_and_replays_what_random_runs_miss(stage, executor, tmp_path):
    # Wrong on one input pattern of 2**32: the random runs agree, so the proof runs, and its counterexample is
    # replayed in a second simulation before the same random runs.
    task = comb_task(PARITY, "p")
    trigger = PARITY.replace("assign y = ^a;", "assign y = (a == 32'hDEADBEEF) ? ~(^a) : ^a;")
    r = check(stage, executor, tmp_path / "trigger", task, {"rtl/top.sv": trigger})
    assert r.status is Status.FAILED and r.metrics["equivalence"] == "refuted", r.metrics
    assert r.metrics["formal"] == "cex" and r.metrics["method"] == "formal", r.metrics
    assert r.metrics["sim_seeds"] == 2 * DEFAULTS["seeds"] + 1, (
        r.metrics
    )  # the random runs, then replay + them
    good = check(
        stage, executor, tmp_path / "good", task, {"rtl/top.sv": PARITY.replace("^a", "^{a[15:0], a[31:16]}")}
    )
    assert good.status is Status.PASSED and good.metrics["formal"] == "proved" and good.metrics["sim_agrees"]


TICKER_PORTS = "input clk, input rst, input ld, input [15:0] d, output [15:0] q, output tick"
TICKER = f"""module top({TICKER_PORTS});
  reg [15:0] r; reg [5:0] c;
  always @(posedge clk) if (rst) begin r <= 0; c <= 0; end else begin c <= c + 1; if (ld) r <= d; end
  assign q = r;
  assign tick = (c == 6'd63);
endmodule
"""


def test_a_visible_bug_does_not_hide_a_bug_behind_a_trigger(stage, executor, tmp_path):
    # A red-team answer: every bit of q wrong behind a trigger no random run draws, and a cheap visible bug in
    # `tick`. Refuted by the random runs with credit left to pay, it still gets the proof, whose counterexample
    # charges the hidden bug: the reward is formal-first's, below the visible bug's alone (it was the same).
    task = Task(id="ticker", toplevel="top", expected_files=("top.sv",), reference={"top.sv": TICKER})
    hidden = TICKER.replace("assign q = r;", "assign q = (d == 16'h1234 && !rst) ? ~r : r;")
    both = hidden.replace("(c == 6'd63);", "(c == 6'd63) | (c == 6'd40);")
    visible = TICKER.replace("(c == 6'd63);", "(c == 6'd63) | (c == 6'd40);")
    got = {}
    for name, text in (("both", both), ("visible", visible)):
        for order in ORDERS:
            r = check(stage, executor, tmp_path / f"{name}-{order}", task, {"top.sv": text}, order=order)
            assert r.status is Status.FAILED and r.metrics["equivalence"] == "refuted", r.metrics
            got[name, order] = r
    assert got["both", "simulation-first"].metrics["formal"] == "cex", got["both", "simulation-first"].metrics
    assert got["both", "simulation-first"].score == got["both", "formal-first"].score
    assert got["both", "simulation-first"].score < got["visible", "simulation-first"].score


@pytest.mark.parametrize(
    "debug",
    [
        '  initial $display("top starts");\n',
        '  always @(posedge clk) $display("r=%h c=%d", r, c);\n',
        '  always @(posedge clk) begin $write("."); $strobe("%b", tick); end\n',
        '  always @(posedge clk) begin $display("%p", r); $display("%d %d", c); $info("tick"); end\n',
    ],
)
def test_a_debug_print_neither_blocks_a_proof_nor_buys_the_undecided_share(stage, executor, tmp_path, debug):
    # Yosys keeps a print as a cell no miter can hold: the formal step failed, so a correct answer with a debug
    # print was paid as undecided (0.25), and a wrong one with a trigger-hidden bug earned 0.25 for a print.
    task = Task(id="ticker", toplevel="top", expected_files=("top.sv",), reference={"top.sv": TICKER})
    good = check(
        stage, executor, tmp_path / "good", task, {"top.sv": TICKER.replace("endmodule", debug + "endmodule")}
    )
    assert good.status is Status.PASSED and good.metrics["formal"] == "proved", (good.metrics, good.feedback)
    hidden = TICKER.replace("assign q = r;", "assign q = (d == 16'h1234 && !rst) ? ~r : r;")
    plain = check(stage, executor, tmp_path / "plain", task, {"top.sv": hidden})
    printing = check(
        stage,
        executor,
        tmp_path / "print",
        task,
        {"top.sv": hidden.replace("endmodule", debug + "endmodule")},
    )
    assert plain.metrics["formal"] == printing.metrics["formal"] == "cex", (plain.metrics, printing.metrics)
    assert printing.score == plain.score < DEFAULTS["undecided"]


LATCH_REF = "module top(input clk, input [31:0] a, output reg [31:0] q);\n  always @(posedge clk) q <= a;\nendmodule\n"
LATCH_FORGE = """module top(input clk, input [31:0] a, output reg [31:0] q);
  reg bad = 1'b0;
  function clr(input [31:0] x); begin bad = 1'b0; clr = 1'b0; end endfunction
  always @(posedge clk) begin
    if (a == 32'hDEADBEEF) bad = 1'b1;
    USE;
    q <= bad ? ~a : a;
  end
endmodule
"""


@pytest.mark.parametrize(
    "use",
    ['$display("%d", (a == a) ? 1\'b0 : clr(a))', "q[0] <= (a == a) ? a[0] : clr(a)"],
    ids=["print", "logic"],
)
def test_a_function_writing_a_module_signal_is_not_proved(stage, executor, tmp_path, use):
    # A red-team answer: after a trigger no random run draws, `bad` stays set and q is inverted from then on. The
    # call that clears it sits in the arm of a `?:` the simulator never takes; Yosys runs a function's writes
    # wherever the call appears, so the proof cleared `bad` every cycle and passed the answer (1.0, both orders).
    # Not counting the proof would have paid it as undecided (0.25, more than the same bug without the call).
    task = Task(id="latch", toplevel="top", expected_files=("top.sv",), reference={"top.sv": LATCH_REF})
    r = check(stage, executor, tmp_path, task, {"top.sv": LATCH_FORGE.replace("USE", use)})
    assert r.status is Status.FAILED and r.score == 0.0, (r.metrics, r.feedback)
    assert "impure-function" in {d.code for d in r.diagnostics} and "writes `bad`" in r.feedback, r.feedback
    pure = LATCH_REF.replace(
        "  always",
        "  function [31:0] same(input [31:0] x); reg [31:0] t; begin t = x; same = t; end endfunction\n  always",
    ).replace("q <= a", "q <= same(a)")
    good = check(stage, executor, tmp_path / "pure", task, {"top.sv": pure})
    assert good.status is Status.PASSED and good.metrics["formal"] == "proved", (good.metrics, good.feedback)


STATIC_FORGES = {
    "function": """module top(input clk, input [31:0] a, output reg [31:0] q);
  function [31:0] f(input [31:0] x);
    reg armed;
    begin
      f = (armed === 1'b1) ? ~x : x;
      if (x == 32'hDEADBEEF) armed = 1'b1;
    end
  endfunction
  always @(posedge clk) q <= f(a);
endmodule
""",
    "task": """module top(input clk, input [31:0] a, output reg [31:0] q);
  reg [31:0] tmp;
  task t(input [31:0] x, output [31:0] y); reg s; begin if (x == 32'hDEADBEEF) s = 1; y = (s === 1'b1) ? ~x : x; end endtask
  always @(posedge clk) begin : b t(a, tmp); q <= tmp; end
endmodule
""",
}


@pytest.mark.parametrize("kind", sorted(STATIC_FORGES))
def test_a_subroutine_variable_kept_between_calls_is_refused(stage, executor, tmp_path, kind):
    # A red-team answer (the third pass): Icarus keeps a function's or task's variables from one call to the next,
    # Yosys starts each call afresh (x), so `armed === 1` was false for the proof, always, and the answer (wrong
    # after a trigger no random run draws) was proved, 1.0. Functions and tasks that write every variable before
    # reading it (an if/else, a case with a default, a for loop's counter) are proved as before.
    task = Task(id="latch", toplevel="top", expected_files=("top.sv",), reference={"top.sv": LATCH_REF})
    r = check(stage, executor, tmp_path, task, {"top.sv": STATIC_FORGES[kind]})
    assert r.status is Status.FAILED and r.score == 0.0, (r.metrics, r.feedback)
    assert "impure-function" in {d.code for d in r.diagnostics} and "before a write of it" in r.feedback
    fine = LATCH_REF.replace(
        "  always",
        "  function [31:0] g(input [31:0] x); reg [31:0] t; integer i;\n"
        "    begin if (x[0]) t = x; else t = x; g = 0; for (i = 0; i < 32; i = i + 1) g[i] = t[i]; end\n"
        "  endfunction\n  always",
    ).replace("q <= a", "q <= g(a)")
    good = check(stage, executor, tmp_path / "fine", task, {"top.sv": fine})
    assert good.status is Status.PASSED and good.metrics["formal"] == "proved", (good.metrics, good.feedback)


def test_a_recursive_call_is_not_a_read_of_the_functions_result():
    from rtlreward_equivalence import view

    recursive = "module m; function automatic integer d(input integer n); d = (n == 0) ? 0 : d(n - 1) + 1; endfunction endmodule"
    assert view.subroutine_state(recursive) == ""
    assert "`d` read in `d`" in view.subroutine_state(recursive.replace("d(n - 1) + 1", "d + 1"))


def test_an_answer_quoting_an_exec_error_is_not_a_missing_tool(stage, executor, tmp_path):
    # Yosys quotes an elaboration-time $error on stderr; "execvp yosys: No such file" anywhere in it was read as
    # Yosys not installed (an error result, which a trainer may drop): only bubblewrap's own line is.
    quoting = XOR_GATE.replace("endmodule", '  $error("execvp yosys: No such file or directory");\nendmodule')
    task = comb_task(XOR_GATE, "x1")
    r = check(stage, executor, tmp_path, task, {"rtl/top.sv": quoting}, order="formal-first")
    assert r.status is Status.FAILED, (r.status, r.feedback)


def test_an_answer_nested_past_the_parsers_limit_fails_instead_of_erring(stage, executor, tmp_path):
    # pyslang raises a bare RuntimeError past its nesting limit; an error result is one a trainer may drop, so an
    # answer could escape its penalty with 2,000 parentheses (a red-team pass); Icarus compiles it.
    deep = XOR_GATE.replace("assign y", "wire u = " + "(" * 2000 + "1'b0" + ")" * 2000 + ";\n  assign y")
    r = check(stage, executor, tmp_path, comb_task(XOR_GATE, "x1"), {"rtl/top.sv": deep})
    assert r.status is Status.FAILED and r.score == 0.0, (r.status, r.feedback)
    assert "parse-limit" in {d.code for d in r.diagnostics} and "nests deeper" in r.feedback


def test_an_unknown_order_is_an_error(stage, executor, tmp_path):
    r = check(stage, executor, tmp_path, comb_task(XOR_GATE, "x1"), {"rtl/top.sv": XOR_GATE}, order="fastest")
    assert r.status is Status.ERROR and "order" in r.feedback, r.feedback


MUX_WORDS = """module TopModule(input [1023:0] in, input [7:0] sel, output [3:0] out);
  assign out = {in[sel*4+3], in[sel*4+2], in[sel*4+1], in[sel*4+0]};
endmodule
"""


def test_a_wide_word_select_is_proved_within_a_small_yosys_budget(stage, executor, tmp_path):
    # VerilogEval Prob021_mux256to1v's reference: a shift by a product that Yosys's techmap and opt turned into a
    # 1024-bit barrel shifter (2.7 s of Yosys, 12 s on 0.23) before peepopt rewrote it into a word select.
    other = MUX_WORDS.replace("{in[sel*4+3], in[sel*4+2], in[sel*4+1], in[sel*4+0]}", "in[sel*4 +: 4]")
    r = check(
        stage, executor, tmp_path, comb_task(MUX_WORDS, "TopModule"), {"rtl/top.sv": other}, yosys_seconds=2
    )
    assert r.status is Status.PASSED and r.metrics["formal"] == "proved", (r.metrics, r.feedback)


def test_a_wrong_case_item_is_refuted_with_partial_credit(stage, executor, tmp_path):
    wrong = DEC_CASE.replace("3'b111: y = 4'b1000", "3'b111: y = 4'b0000")
    r = check(stage, executor, tmp_path, comb_task(DEC_IF, "dec"), {"rtl/top.sv": wrong})
    assert r.status is Status.FAILED and r.metrics["equivalence"] == "refuted"
    assert r.metrics["bit_credit"] == pytest.approx(3 / 4)  # y[3] differs, y[2:0] never do
    assert r.score == pytest.approx(DEFAULTS["refuted_max"] * 3 / 4)
    assert "y: expected 4'b1000, got 4'b0000" in r.feedback


MUX_X = """module m(input [1:0] s, input [3:0] d, output reg o);
  always @(*) case (s) 2'd0: o = d[0]; 2'd1: o = d[1]; 2'd2: o = d[2]; default: o = 1'bx; endcase
endmodule
"""
MUX_0 = """module m(input [1:0] s, input [3:0] d, output o);
  assign o = s == 2'd3 ? 1'b0 : d[s];
endmodule
"""


def test_x_in_the_reference_is_a_dont_care_and_x_in_the_answer_is_not(stage, executor, tmp_path):
    ok = check(stage, executor, tmp_path / "ok", comb_task(MUX_X, "m"), {"rtl/top.sv": MUX_0})
    assert ok.status is Status.PASSED and ok.metrics["equivalence"] == "proved", ok.feedback
    # The other way round: where the reference (MUX_0) says 0, an x is wrong.
    bad = check(stage, executor, tmp_path / "bad", comb_task(MUX_0, "m"), {"rtl/top.sv": MUX_X})
    assert bad.status is Status.FAILED and bad.metrics["equivalence"] == "refuted", bad.feedback
    assert "o: expected 0, got x" in bad.feedback


# -- the simulation fallback -----------------------------------------------------------------------------------
def test_a_design_yosys_cannot_read_is_undecided_where_the_reference_proves(stage, executor, tmp_path):
    """An answer the formal step cannot read (Yosys rejects `foreach`) is compared by simulation; since the
    reference proves against itself in budget, an undecided answer is suspect: it earns the profile's `undecided`
    share and does not pass (an answer could break the proof on purpose)."""
    r = check(stage, executor, tmp_path / "ok", comb_task(REV_GENERATE, "rev"), {"rtl/top.sv": REV_FOREACH})
    assert r.status is Status.FAILED and r.score == DEFAULTS["undecided"], r.feedback
    assert r.metrics["formal"] == "error" and r.metrics["method"] == "simulation"
    assert r.metrics["equivalence"] == "unknown" and r.metrics["reference_proves"] is True
    codes = {d.code for d in r.diagnostics}
    assert {"formal-error", "undecided"} <= codes
    assert r.metrics["sim_cycles"] > 0 and r.metrics["sim_compared_cycles"] > 0

    wrong = REV_FOREACH.replace("y[k] = t[7-k] ^ b[k];", "y[k] = t[k] ^ b[k];")
    bad = check(stage, executor, tmp_path / "bad", comb_task(REV_GENERATE, "rev"), {"rtl/top.sv": wrong})
    assert bad.status is Status.FAILED and bad.metrics["equivalence"] == "refuted"
    assert bad.metrics["method"] == "simulation"
    assert "seeded random simulation" in bad.feedback
    assert 0 < bad.score < DEFAULTS["undecided"]  # p never differs; refuted pays less than undecided


# A multi-dimensional packed array and a cast to a user type: Debian bookworm's Yosys 0.23 cannot read them,
# the pinned Yosys 0.70 (pyosys) and Icarus 11 can.
REV_PACKED = """typedef logic [7:0] byte_t;
module rev (input [7:0] a, input [7:0] b, output [7:0] y, output p);
  logic [1:0][7:0] both;
  assign both = {a, b};
  assign y = byte_t'({both[1][0], both[1][1], both[1][2], both[1][3], both[1][4], both[1][5], both[1][6],
                      both[1][7]} ^ both[0]);
  assign p = ^a;
endmodule
"""


def test_valid_systemverilog_is_not_failed_for_the_tools_age(stage, executor, tmp_path):
    """The answer is read by the pinned Yosys 0.70 (pyosys) on every executor, not by whatever the machine ships:
    constructs Debian bookworm's Yosys 0.23 rejects are proved like any other."""
    from rtlreward_equivalence import _pyosys_version

    if not _pyosys_version():
        pytest.skip("pyosys is not installed: the Yosys on PATH reads the answers")
    r = check(stage, executor, tmp_path, comb_task(REV_GENERATE, "rev"), {"rtl/top.sv": REV_PACKED})
    assert r.status is Status.PASSED and r.metrics["equivalence"] == "proved", r.feedback
    assert stage.tool_versions()["yosys"] == f"pyosys {_pyosys_version()}"


def test_a_hung_candidate_is_cut_and_refuted(stage, executor, tmp_path, examples):
    task = examples["fixed_priority_arbiter"]
    files = {task.expected_files[0]: completion("fixed_priority_arbiter", "forever_loop")}
    r = check(stage, executor, tmp_path, task, files)
    assert r.status is Status.FAILED and r.score == 0.0
    (cut,) = [d for d in r.diagnostics if d.code == "sim-timeout"]
    # The answer's run has half its wall-clock limit (2 s here) in CPU time: the loop burns only CPU and ends there.
    assert "did not finish within 1 s of CPU time" in cut.message


# -- hostile input --------------------------------------------------------------------------------------------
def test_a_hostile_file_name_never_reaches_the_yosys_script(stage, executor, tmp_path, examples):
    task = examples["counter"]
    good = completion("counter", "correct")
    names = ["rtl/c; shell touch PWNED_SHELL; #.sv", "rtl/d\n!touch PWNED_BANG\n.sv"]
    r = check(stage, executor, tmp_path, task, {names[0]: good, names[1]: "// nothing\n"})
    assert r.status is Status.PASSED and r.metrics["equivalence"] == "proved", r.feedback
    script = (tmp_path / "equivalence" / "eq.ys").read_text()
    assert "shell" not in script and "!" not in script and "PWNED" not in script
    assert all(not line.startswith(("tee", "script", "write_verilog")) for line in script.splitlines())
    assert not list(tmp_path.rglob("PWNED*"))


def test_attributes_and_pragmas_cannot_inject_yosys_commands(stage, executor, tmp_path, examples):
    task = examples["counter"]
    good = completion("counter", "correct")
    hostile = (
        '(* src = "x\\"; shell touch PWNED_ATTR; #", script = "!touch PWNED_ATTR2" *)\n'
        "// synopsys translate_off\n// yosys: shell touch PWNED_PRAGMA\n// synopsys translate_on\n"
        + good.replace(
            "assign wrap", '(* keep, script = "tee -o PWNED_TEE x" *) wire unused_w;\n  assign wrap'
        )
    )
    r = check(stage, executor, tmp_path, task, {task.expected_files[0]: hostile})
    assert r.status is Status.PASSED and r.metrics["equivalence"] == "proved", r.feedback
    assert not list(tmp_path.rglob("PWNED*"))


def test_finish_at_elaboration_cannot_end_a_proof_early(stage, executor, tmp_path):
    """`$finish` in an initial block: Yosys stops with an error (no proof), the simulation loses its samples."""
    wrong = MUX_X.replace("always @(*)", "initial $finish;\n  always @(*)")
    for order in ORDERS:
        r = check(
            stage, executor, tmp_path / order, comb_task(MUX_0, "m"), {"rtl/top.sv": wrong}, order=order
        )
        assert r.status is Status.FAILED and r.metrics["equivalence"] == "refuted", r.feedback
        assert r.metrics["formal"] == ("error" if order == "formal-first" else "skipped"), (order, r.metrics)


def test_a_blackbox_attribute_cannot_fake_a_proof(stage, executor, tmp_path, examples):
    """A design that hides itself from Yosys is compared by simulation, with its real behaviour."""
    task = examples["counter"]
    wrong = "(* blackbox *)\n" + completion("counter", "en_ignores_load")
    r = check(stage, executor, tmp_path, task, {task.expected_files[0]: wrong})
    assert r.status is Status.FAILED and r.metrics["equivalence"] == "refuted", r.feedback


# -- refusals and errors ---------------------------------------------------------------------------------------
def test_no_reference_is_skipped(stage, executor, tmp_path, examples):
    task = examples["counter"]
    bare = Task(id="bare", expected_files=task.expected_files, toplevel="counter")
    r = check(stage, executor, tmp_path, bare, {task.expected_files[0]: completion("counter", "correct")})
    assert r.status is Status.SKIPPED and r.score == 0.0
    assert r.diagnostics[0].code == "no-reference" and "no reference design" in r.feedback


def test_a_missing_tool_is_an_error(stage, executor, tmp_path, examples):
    task = examples["counter"]
    files = {task.expected_files[0]: completion("counter", "correct")}
    r = check(stage, executor, tmp_path, task, files, yosys="rtlreward-no-such-yosys")
    assert r.status is Status.ERROR and r.diagnostics[0].code == "tool-missing"
    assert "apt-get install yosys" in r.feedback


def test_missing_ports_fail_with_their_names(stage, executor, tmp_path, examples):
    task = examples["fixed_priority_arbiter"]
    files = {task.expected_files[0]: completion("fixed_priority_arbiter", "renamed_ports")}
    r = check(stage, executor, tmp_path, task, files)
    assert r.status is Status.FAILED and r.diagnostics[0].code == "missing-port"
    assert "input req" in r.feedback


# -- profiles ---------------------------------------------------------------------------------------------------
def test_equiv_and_trusted_profiles_on_the_lfsr(lfsr):
    """The LFSR harness passes the constant-0 and seed-ignoring designs; `equiv` and `trusted` do not."""
    from rtlreward.engine import Engine

    task, rel, text = lfsr
    noseed = text.replace("lfsr_out <= lfsr_seed;", "lfsr_out <= 8'h01;")
    items = [(task, Candidate(files={rel: body})) for body in (text, LFSR_CONST0, noseed)]
    with Engine("equiv", cache=False) as engine:
        ref, const0, seedless = engine.score_batch(items)
    assert ref.passed and ref.total == pytest.approx(1.0) and ref.max_total == pytest.approx(1.0)
    for r in (const0, seedless):
        assert not r.passed and r.total < ref.total
        assert r.stages["equivalence"].metrics["equivalence"] == "refuted"
        assert "tests" not in r.stages  # no harness run
    with Engine("trusted", cache=False) as engine:
        ref, const0, seedless = engine.score_batch(items)
    assert ref.passed and ref.total == pytest.approx(1.6), ref.feedback()
    assert seedless.stages["tests"].status is Status.PASSED  # the harness is fooled ...
    for r in (const0, seedless):
        assert not r.passed and r.total < ref.total  # ... the trusted reward is not


def test_the_const0_lfsr_behind_a_yosys_macro_earns_what_the_const0_design_earns(lfsr):
    """The measured forge: under `trusted`, the reference in an `ifdef YOSYS` branch over the constant-0 design
    (which the official harness passes) turned 0.0 into 1.6. The proof now reads the branch Icarus simulates."""
    from rtlreward.engine import Engine

    task, rel, text = lfsr
    body = text[text.index(");") + 2 : text.rindex("endmodule")]
    forge = LFSR_CONST0.replace(
        "  assign lfsr_out = 8'd0;\n", f"`ifdef YOSYS\n{body}\n`else\n  assign lfsr_out = 8'd0;\n`endif\n"
    )
    forge = forge.replace("output [7:0] lfsr_out", "output reg [7:0] lfsr_out")
    items = [(task, Candidate(files={rel: body_})) for body_ in (forge, LFSR_CONST0)]
    with Engine("trusted", cache=False) as engine:
        forged, plain = engine.score_batch(items)
    assert not forged.passed and forged.total <= plain.total == 0.0, forged.feedback()
    assert forged.stages["equivalence"].metrics["equivalence"] == "refuted"


# -- ABC's verdicts across versions -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("output", "verdict"),
    [
        (
            "Verification of invariant with 16 clauses was successful.  Time = 0.00 sec\nProperty proved.  Time = 0.02 sec",
            "proved",
        ),
        # newer ABC (pyosys 0.70, Debian trixie) on a property no frame violates
        (
            "All outputs solved or timed out in frame 1.\nBlock = 0  Cex =   0\nProperty UNDECIDED.  Time = 0.02 sec",
            "proved",
        ),
        ('Output 0 of miter "eq" was asserted in frame 2.  Time =     0.01 sec', "cex"),
        ("No output asserted in 8 frames. Resource limit reached (conf limit 0). Time = 0.02 sec", "bounded"),
        ("Reached timeout (5 seconds) in frame 12.\nProperty UNDECIDED.  Time = 5.00 sec", "undecided"),
        (
            "All outputs solved or timed out in frame 9.\nReached timeout (5 seconds).\nProperty UNDECIDED.",
            "undecided",
        ),
    ],
)
def test_abc_verdicts_are_read_the_same_from_old_and_new_abc(output, verdict):
    from rtlreward_equivalence import formal

    assert formal.parse_abc(output).verdict == verdict


HONEST = {
    "complete list": "module m(input a, input b, output reg y);\n  always @(a or b) y = a & b;\nendmodule\n",
    "star": "module m(input a, input b, output reg y);\n  always @* y = a & b;\nendmodule\n",
    "blocking temporary": "module m(input clk, input [3:0] a, output reg [3:0] q);\n  reg [3:0] t;\n"
    "  always @(posedge clk) begin t = a + 4'd1; q <= t; end\nendmodule\n",
    "blocking feedback through an assign": "module m(input clk, input rst, output reg [3:0] q);\n  wire f = ~(q[3] ^ q[2]);\n"
    "  always @(posedge clk, posedge rst) if (rst) q = 0; else q = {q[2:0], f};\nendmodule\n",
    "loop and parameter": "module m #(parameter N = 4) (input [N-1:0] a, output reg y);\n  integer i;\n"
    "  always @(a) begin y = 0; for (i = 0; i < N; i = i + 1) y = y ^ a[i]; end\nendmodule\n",
    "async reset": "module m(input clk, input rst_n, input d, output reg q);\n"
    "  always @(posedge clk or negedge rst_n) if (!rst_n) q <= 0; else q <= d;\nendmodule\n",
    "parameter override": "module m(input [3:0] a, output [3:0] y);\n  sub #(.W(4)) u (.a(a), .y(y));\nendmodule\n",
    "bits of a packed vector": "module m(input [7:0] a, output reg [7:0] y);\n  integer i;\n"
    "  always @* for (i = 0; i < $bits(y); i = i + 1) y[i] = a[$bits(a) - 1 - i];\nendmodule\n",
    "typed parameter of sized constants": "module m(input [8:0] a, output [8:0] y);\n"
    "  localparam [8:0] K = 8'hFF + 8'h01;\n  assign y = a ^ K;\nendmodule\n",
    "untyped parameter of unsized numbers": "module m(input [7:0] a, output [7:0] y);\n  localparam N = 8;\n"
    "  localparam M = N - 1;\n  assign y = a << M;\nendmodule\n",
    "pure function": "module m(input [3:0] a, output reg y);\n  function f; input [3:0] x; reg t;\n"
    "    begin t = x[0]; f = t ^ x[1]; end endfunction\n  always @* y = f(a);\nendmodule\n",
}


@pytest.mark.parametrize("name", list(HONEST))
def test_ordinary_constructs_are_not_taken_for_a_simulation_mismatch(name):
    from rtlreward_equivalence.view import simulation_mismatch

    assert simulation_mismatch(HONEST[name]) == ""


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("module m(input a, input b, output reg y);\n  always @(a) y = a & b;\nendmodule\n", "without `b`"),
        ("module m(input [1:0] a, output reg y);\n  always @(a[1]) y = a[0];\nendmodule\n", "not a plain"),
        ("module m(input a, output y);\n  assign #1 y = a;\nendmodule\n", "delay"),
        ("module m(output reg y);\n  always @* y = 1'b1;\nendmodule\n", "reads no signal"),
        ("module m(input s, output reg y);\n  always @(s) y = 1'b1;\nendmodule\n", "reads no signal"),
        ("module m(output reg y);\n  wire s;\n  always @* y = s;\nendmodule\n", "a net nothing drives"),
        (
            "module m(input a, output reg y);\n  reg k = 1'b1;\n  always @* y = k;\nendmodule\n",
            "reads no signal",
        ),
        ("module m(input a, output reg y);\n  initial y = a;\nendmodule\n", "`initial` block that reads `a`"),
        ("module m(input a, input b, output y);\n  assign y = a === b;\nendmodule\n", "tells z from x"),
        (
            "module m(input [3:0] a, input b, output reg y);\n  function f; input [3:0] x; f = x[0] ^ b; endfunction\n"
            "  always @* y = f(a);\nendmodule\n",
            "a call of `f`",
        ),
        (
            "module m(input a, input b, output reg y);\n  generate if (1) begin : g\n    always @(a) y = a | b;\n"
            "  end endgenerate\nendmodule\n",
            "without `b`",
        ),
    ],
)
def test_a_simulation_mismatch_is_named(text, why):
    from rtlreward_equivalence.view import simulation_mismatch

    assert why in simulation_mismatch(text)


def test_text_the_mismatch_rule_cannot_read_gets_no_proof(monkeypatch):
    from rtlreward_equivalence import view

    def broken(text, top):
        raise AttributeError("a syntax shape the rule did not expect")

    monkeypatch.setattr(view, "_mismatch", broken)
    assert view.simulation_mismatch("module m; endmodule\n") == "a design this check cannot read"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (
            "module m(input clk, input d, output reg q);\n  always @(posedge d) q <= 1;\nendmodule\n",
            "`@(posedge d)`",
        ),
        (
            "module m(input clk, input en, output reg q);\n  wire g = clk & en;\n  always @(posedge g) q <= 1;\n"
            "endmodule\n",
            "`@(posedge g)`",
        ),
        (
            "module m(input clk, input en, input d, output reg q);\n  always_ff @(posedge clk iff en) q <= d;\n"
            "endmodule\n",
            "`iff`",
        ),
        (
            "module s(input clk, output reg t);\n  always @(posedge clk) t <= ~t;\nendmodule\n"
            "module m(input clk, output q);\n  s u(.clk(clk), .t());\n  assign q = u.t;\nendmodule\n",
            "hierarchical reference (`u.t`)",
        ),
    ],
)
def test_an_edge_the_top_module_does_not_receive_as_its_clock_is_named(text, why):
    from rtlreward_equivalence.view import clock_edges

    got, _ = clock_edges(text, "m", ["clk"], [])
    assert why in got, got


def test_an_edge_of_the_reset_is_taken_only_beside_an_edge_of_the_clock():
    from rtlreward_equivalence.view import clock_edges

    head = "module m(input clk, input rst, input d, output reg q);\n"
    asynchronous = head + "  always @(posedge clk or posedge rst) if (rst) q <= 0; else q <= d;\nendmodule\n"
    alone = head + "  always @(posedge rst) q <= d;\nendmodule\n"
    assert clock_edges(asynchronous, "m", ["clk"], ["rst"]) == ("", frozenset({"posedge"}))
    assert "no edge of the clock beside it" in clock_edges(alone, "m", ["clk"], ["rst"])[0]


def test_the_clock_edges_a_design_takes_are_read_through_its_instances():
    from rtlreward_equivalence.view import clock_edges

    text = (
        "module s(input c, input d, output reg q);\n  always @(negedge c) q <= d;\nendmodule\n"
        "module m(input clk, input rst, input d, output q, output reg p);\n  s u(clk, d, q);\n"
        "  always @(posedge clk or posedge rst) if (rst) p <= 0; else p <= d;\nendmodule\n"
    )
    assert clock_edges(text, "m", ["clk"], ["rst"]) == ("", frozenset({"posedge", "negedge"}))
    assert clock_edges(text.replace("negedge c", "posedge c"), "m", ["clk"], ["rst"]) == (
        "",
        frozenset({"posedge"}),
    )
