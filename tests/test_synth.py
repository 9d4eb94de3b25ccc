"""The `synth` and `ppa` stages (plugins/rtlreward_synth) with the real Yosys (pyosys 0.70), Icarus and, where
installed, nextpnr-ice40: references synthesise, single-site mutants that add a latch, a loop or an
initial-dependent behaviour fail with the construct named, a netlist that differs from the RTL's simulation fails,
and PPA credit orders designs by size, capped, for correct designs only."""

from __future__ import annotations

import shutil

import pytest
from verilog_eval_helpers import needs_rtllm, needs_verilog_eval

from rtlreward.engine import Engine
from rtlreward.integration import load_tasks
from rtlreward.model import Candidate, Interface, Port, Task
from rtlreward_synth import score_ppa

SYNTH_ONLY = {
    "name": "synth-only",
    "combiner": "weighted",
    "stages": ["format", "safety", "synth"],
    "verdict": "synth",
    "weights": {"synth": 1.0},
}
PPA_EQUIV = {
    "name": "ppa-equiv",
    "combiner": "weighted",
    "stages": ["format", "safety", "equivalence", "synth", "ppa"],
    "gates": ["safety", "synth"],
    "verdict": "equivalence",
    "partial": ["ppa"],
    "weights": {"equivalence": 1.0, "ppa": 1.0},
}

ADDER = """module top(input clk, input rst, input [7:0] a, input [7:0] b, output reg [8:0] s);
  always @(posedge clk) begin
    if (rst) s <= 9'd0;
    else s <= a + b;
  end
endmodule
"""
# The same function with its datapath built twice: a second copy of the sum register, kept inverted (so synthesis
# cannot merge the two copies), and the output taken from both.
ADDER_TWICE = """module top(input clk, input rst, input [7:0] a, input [7:0] b, output [8:0] s);
  reg [8:0] s1, s2;
  always @(posedge clk) begin
    if (rst) begin s1 <= 9'd0; s2 <= 9'h1ff; end
    else begin s1 <= a + b; s2 <= ~({1'b0, b} + {1'b0, a}); end
  end
  assign s = s1 & ~s2;
endmodule
"""
ADDER_WRONG = ADDER.replace("a + b", "a - b")


def _task(ref: str, name: str = "adder") -> Task:
    ports = (
        Port("clk", "input", 1),
        Port("rst", "input", 1),
        Port("a", "input", 8),
        Port("b", "input", 8),
        Port("s", "output", 9),
    )
    return Task(
        id=name,
        prompt="add",
        expected_files=("top.v",),
        toplevel="top",
        interface=Interface("top", ports),
        reference={"top.v": ref},
    )


def _score(engine: Engine, task: Task, text: str):
    return engine.score(task, Candidate(files={"top.v": text}))


@pytest.fixture(scope="module")
def synth_engine():
    return Engine(profile=SYNTH_ONLY, cache=False)


def _codes(result) -> set[str]:
    return {d.code for d in result.diagnostics}


# -- the mutant classes -------------------------------------------------------------------------------------------

MUX_REF = """module top(input [1:0] sel, input [3:0] a, input [3:0] b, input [3:0] c, output reg [3:0] y);
  always @(*) begin
    case (sel)
      2'd0: y = a;
      2'd1: y = b;
      default: y = c;
    endcase
  end
endmodule
"""


def _mux_task() -> Task:
    ports = (
        Port("sel", "input", 2),
        Port("a", "input", 4),
        Port("b", "input", 4),
        Port("c", "input", 4),
        Port("y", "output", 4),
    )
    return Task(
        id="mux",
        prompt="mux",
        expected_files=("top.v",),
        toplevel="top",
        interface=Interface("top", ports),
        reference={"top.v": MUX_REF},
    )


def test_reference_passes_with_figures(synth_engine):
    r = _score(synth_engine, _task(ADDER), ADDER).stages["synth"]
    assert r.passed, r.feedback
    assert r.metrics["flip_flops"] == 9
    assert r.metrics["area"] > 0 and r.metrics["depth"] > 0
    assert r.metrics["area"] == r.metrics["reference_area"]
    assert r.metrics["netlist_agrees"] is True


def test_latch_mutant_fails_naming_the_latch_and_line(synth_engine):
    # single site: the default branch dropped, so y holds its value for sel == 3
    mutant = MUX_REF.replace("      default: y = c;\n", "      2'd2: y = c;\n")
    r = _score(synth_engine, _mux_task(), mutant).stages["synth"]
    assert r.status.value == "failed"
    latch = [d for d in r.diagnostics if d.code == "latch"]
    assert latch, r.feedback
    assert "y" in latch[0].message and "top.v:2" in latch[0].message


def test_loop_mutant_fails_naming_the_loop(synth_engine):
    ref = "module top(input [3:0] a, input [3:0] b, output [3:0] y);\n  wire [3:0] t;\n  assign t = a & b;\n  assign y = t ^ a;\nendmodule\n"
    mutant = ref.replace("assign t = a & b;", "assign t = y & b;")
    task = Task(id="loop", prompt="", expected_files=("top.v",), toplevel="top", reference={"top.v": ref})
    assert _score(synth_engine, task, ref).stages["synth"].passed
    r = _score(synth_engine, task, mutant).stages["synth"]
    assert r.status.value == "failed"
    loop = [d for d in r.diagnostics if d.code == "loop"]
    assert loop, r.feedback
    assert "combinational loop" in loop[0].message and "top.v:" in loop[0].message


def test_initial_mutant_fails_naming_the_register(synth_engine):
    # single site: the reset branch dropped, the register's start value given by an initializer instead
    mutant = ADDER.replace("output reg [8:0] s);", "output reg [8:0] s = 9'd0);").replace(
        "if (rst) s <= 9'd0;\n    else s <= a + b;", "s <= a + b;"
    )
    r = _score(synth_engine, _task(ADDER), mutant).stages["synth"]
    assert r.status.value == "failed"
    init = [d for d in r.diagnostics if d.code == "initial"]
    assert init and "s" in init[0].message and "top.v:1" in init[0].message, r.feedback


def test_multiple_drivers_undriven_delay_and_display_only(synth_engine):
    task = _task(ADDER)
    two = ADDER.replace("endmodule", "  assign s[0] = a[0];\nendmodule")
    assert "multiple-drivers" in _codes(_score(synth_engine, task, two).stages["synth"])
    undriven = (
        "module top(input clk, input rst, input [7:0] a, input [7:0] b, output reg [8:0] s);\nendmodule\n"
    )
    assert "undriven" in _codes(_score(synth_engine, task, undriven).stages["synth"])
    delayed = ADDER.replace("else s <= a + b;", "else s <= #3 a + b;")
    r = _score(synth_engine, task, delayed).stages["synth"]
    assert "delay" in _codes(r) and any("top.v:4" in d.message for d in r.diagnostics)
    shown = ADDER.replace(
        "endmodule",
        '  reg [7:0] n;\n  always @(posedge clk) begin n <= n + 8\'d1; $display("%d", n); end\nendmodule',
    )
    r = _score(synth_engine, task, shown).stages["synth"]
    assert "display-only" in _codes(r), r.feedback


def test_netlist_that_differs_from_simulation_fails(synth_engine):
    # an incomplete sensitivity list: Icarus re-evaluates y only when a changes, synthesis builds a & b
    ref = "module top(input a, input b, output reg y);\n  always @(a or b) y = a & b;\nendmodule\n"
    mutant = ref.replace("@(a or b)", "@(a)")
    task = Task(id="sens", prompt="", expected_files=("top.v",), toplevel="top", reference={"top.v": ref})
    assert _score(synth_engine, task, ref).stages["synth"].passed
    r = _score(synth_engine, task, mutant).stages["synth"]
    assert r.status.value == "failed"
    assert "sim-mismatch" in _codes(r), r.feedback


def test_tool_macros_and_a_simulation_that_ends_itself_fail(synth_engine):
    task = _task(ADDER)
    # synthesis (YOSYS defined) would measure a constant; the simulators run the adder
    split = ADDER.replace("else s <= a + b;", "else s <= `ifdef YOSYS 9'd0 `else a + b `endif ;")
    r = _score(synth_engine, task, split).stages["synth"]
    assert r.status.value == "failed" and "tool-macro" in _codes(r), r.feedback
    assert any("top.v:4" in d.message for d in r.diagnostics if d.code == "tool-macro")
    # a $finish that would end the side-by-side simulation early cannot hide a difference: Yosys refuses it (and a
    # simulation the design ends before its last cycle fails as a mismatch)
    for ends in ("  initial $finish;\n", "  always @(posedge clk) if (a[2:0] == 3'd5) $finish;\n"):
        r = _score(synth_engine, task, ADDER.replace("endmodule", ends + "endmodule")).stages["synth"]
        assert r.status.value == "failed" and {"sim-mismatch", "not-synthesisable"} & _codes(r), r.feedback


def test_black_box_is_refused(synth_engine):
    hidden = "module top(input clk, input rst, input [7:0] a, input [7:0] b, output [8:0] s);\n  adder_box u(.a(a), .b(b), .s(s));\nendmodule\n"
    r = _score(synth_engine, _task(ADDER), hidden).stages["synth"]
    assert r.status.value == "failed"
    assert {"blackbox", "not-synthesisable"} & _codes(r), r.feedback


# -- PPA ------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ppa_engine():
    return Engine(profile=PPA_EQUIV, cache=False)


def test_ppa_orders_by_size_and_pays_nothing_wrong(ppa_engine):
    task = _task(ADDER)
    ref = ppa_engine.score(task, Candidate(files={"top.v": ADDER}))
    big = ppa_engine.score(task, Candidate(files={"top.v": ADDER_TWICE}))
    wrong = ppa_engine.score(task, Candidate(files={"top.v": ADDER_WRONG}))
    assert ref.stages["equivalence"].passed and big.stages["equivalence"].passed
    assert big.stages["synth"].metrics["area"] > ref.stages["synth"].metrics["area"]
    r_ref, r_big = ref.stages["ppa"], big.stages["ppa"]
    assert r_ref.passed and r_big.passed
    assert r_big.score < r_ref.score
    assert r_ref.score == pytest.approx(1 / 1.5)
    assert wrong.stages["ppa"].status.value == "skipped" and wrong.stages["ppa"].score == 0.0
    assert wrong.metrics["term/ppa"] == 0.0 if "term/ppa" in wrong.metrics else True
    assert big.total < ref.total


def test_ppa_cap_holds():
    ref = {"area": 100.0, "depth": 10}
    tiny = {"area": 1.0, "depth": 1}
    score, ratios = score_ppa(tiny, ref, {"cap": 1.5})
    assert score == pytest.approx(1.0) and ratios["area_ratio"] == 1.5
    same, _ = score_ppa(ref, ref, {"cap": 2.0})
    assert same == pytest.approx(0.5)
    double, _ = score_ppa({"area": 200.0, "depth": 20}, ref, {"cap": 1.5})
    assert double == pytest.approx(0.5 / 1.5)


def test_ppa_preset_loads():
    engine = Engine(profile="ppa", cache=False)
    assert "synth" in engine.profile.gates and "ppa" in engine.profile.stages


# -- benchmarks -----------------------------------------------------------------------------------------------------


@needs_verilog_eval
def test_verilog_eval_references_synthesise(synth_engine):
    tasks = {t.id: t for t in load_tasks("verilog-eval")}
    sample = [
        "Prob035_count1to10",
        "Prob082_lfsr32",
        "Prob095_review2015_fsmshift",  # a latch in the reference's always_comb: its own, so not counted
        "Prob120_fsm3s",
        "Prob140_fsm_hdlc",
    ]
    for tid in sample:
        task = tasks[tid]
        r = synth_engine.score(task, Candidate(files=dict(task.reference))).stages["synth"]
        assert r.passed, (tid, r.feedback)
        assert r.metrics["area"] == r.metrics["reference_area"]


@needs_rtllm
def test_rtllm_references_synthesise(synth_engine):
    tasks = {t.id: t for t in load_tasks("rtllm")}
    for tid in ("accu", "adder_8bit", "fsm", "multi_pipe_4bit"):
        task = tasks[tid]
        r = synth_engine.score(task, Candidate(files=dict(task.reference))).stages["synth"]
        assert r.passed, (tid, r.feedback)
        assert r.metrics["cells"] > 0


TINY_LIBERTY = """library(tiny) {
  cell(BUF) {
    area: 6;
    pin(A) { direction: input; }
    pin(Y) { direction: output; function: "A"; }
  }
  cell(NOT) {
    area: 3;
    pin(A) { direction: input; }
    pin(Y) { direction: output; function: "A'"; }
  }
  cell(NAND) {
    area: 4;
    pin(A) { direction: input; }
    pin(B) { direction: input; }
    pin(Y) { direction: output; function: "(A*B)'"; }
  }
  cell(NOR) {
    area: 4;
    pin(A) { direction: input; }
    pin(B) { direction: input; }
    pin(Y) { direction: output; function: "(A+B)'"; }
  }
  cell(DFF) {
    area: 18;
    ff(IQ, IQN) { clocked_on: C; next_state: D; }
    pin(C) { direction: input; clock: true; }
    pin(D) { direction: input; }
    pin(Q) { direction: output; function: "IQ"; }
  }
}
"""


def test_liberty_area(tmp_path):
    lib = tmp_path / "tiny.lib"
    lib.write_text(TINY_LIBERTY)
    profile = {**SYNTH_ONLY, "name": "synth-liberty", "stage": {"synth": {"options": {"liberty": str(lib)}}}}
    engine = Engine(profile=profile, cache=False)
    ref = _score(engine, _task(ADDER), ADDER).stages["synth"]
    big = _score(engine, _task(ADDER), ADDER_TWICE).stages["synth"]
    assert ref.passed and big.passed, (ref.feedback, big.feedback)
    assert ref.metrics["area_unit"] == "liberty"
    # 9 DFFs of area 18 at least, and the reference's own figure beside it
    assert ref.metrics["area"] >= 9 * 18 and ref.metrics["reference_area"] == ref.metrics["area"]
    assert big.metrics["area"] > ref.metrics["area"]


# -- iCE40 and Docker -------------------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("nextpnr-ice40") is None, reason="nextpnr-ice40 not installed")
def test_ice40_flow_reports_luts_and_fmax():
    profile = {**SYNTH_ONLY, "name": "synth-ice40", "stage": {"synth": {"options": {"ice40": True}}}}
    engine = Engine(profile=profile, cache=False)
    acc = ADDER.replace("else s <= a + b;", "else s <= s + a;")  # a register-to-register path: an Fmax
    r = _score(engine, _task(acc), acc).stages["synth"]
    assert r.passed, r.feedback
    assert r.metrics["ice40_luts"] > 0 and r.metrics["ice40_flip_flops"] == 9
    assert r.metrics["ice40_fmax_mhz"] > 0 and r.metrics["ice40_max_delay_ns"] > 0
    assert r.metrics["reference_ice40_luts"] == r.metrics["ice40_luts"]


def test_docker_gives_the_same_figures(synth_engine):
    from sandbox_helpers import sim_docker_executor

    ex = sim_docker_executor()
    try:
        engine = Engine(profile=SYNTH_ONLY, executor=ex, cache=False)
        task = _mux_task()
        docker = engine.score(task, Candidate(files={"top.v": MUX_REF})).stages["synth"]
        local = synth_engine.score(task, Candidate(files={"top.v": MUX_REF})).stages["synth"]
        assert docker.passed, docker.feedback
        for k in ("cells", "area", "depth", "flip_flops"):
            assert docker.metrics[k] == local.metrics[k]
        mutant = MUX_REF.replace("      default: y = c;\n", "      2'd2: y = c;\n")
        assert "latch" in _codes(engine.score(task, Candidate(files={"top.v": mutant})).stages["synth"])
        # the sim image carries no nextpnr-ice40: the iCE40 figures say so, the answer still passes
        ice = {**SYNTH_ONLY, "name": "synth-ice40-docker", "stage": {"synth": {"options": {"ice40": True}}}}
        with Engine(profile=ice, executor=ex, cache=False) as eng:
            r = eng.score(task, Candidate(files={"top.v": MUX_REF})).stages["synth"]
        assert r.passed, r.feedback
        if "ice40_fmax_mhz" not in r.metrics and "ice40_max_delay_ns" not in r.metrics:
            assert "not available in this executor" in r.metrics["ice40_error"]
            assert any(d.code == "ice40" and d.severity == "warning" for d in r.diagnostics)
    finally:
        ex.close()


# -- task health ----------------------------------------------------------------------------------------------------


def test_tasks_check_records_figures_and_flags_unclean_references(tmp_path):
    import attrs

    from rtlreward_health.check import CheckSettings, check_tasks

    counter = next(t for t in load_tasks("examples") if t.id == "counter")
    ((path, text),) = counter.reference.items()
    # the same reference with a delay on its register: it still passes its harness, but synthesis ignores delays
    delayed = attrs.evolve(
        counter, id="counter_delayed", reference={path: text.replace("q <= d;", "q <= #1 d;")}
    )
    _, entries = check_tasks(
        [counter, delayed], CheckSettings(seeds=1, mutants=0, stubs=False), use_cache=False
    )
    clean, dirty = entries
    assert clean["synthesis"] == "clean", clean
    assert clean["synthesis_figures"]["flip_flops"] == 8 and clean["synthesis_figures"]["area"] > 0
    assert dirty["synthesis"] == "not clean", dirty
    assert any("delay" in p and "counter.sv:13" in p for p in dirty["synthesis_problems"]), dirty
