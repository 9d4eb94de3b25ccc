"""Forges of the equivalence reward, as a policy searching for reward would write them (issue 15). Each forge is
built on a plain design (a stub, or a wrong design) and hides it from one tool; each must earn no more than the
plain design it hides, from the stage and from the `equiv`, `trusted` and `shaped` profiles, under the local
and the docker executor. No name the proof adds may appear in any feedback.

- guessable internal names: an empty or black-box module named like the proof's copies, instantiated;
- two views: a tool's macro (`ifdef YOSYS`...), `translate_off` pragmas, attributes, an incomplete sensitivity
  list (Yosys reads it as combinational, Icarus does not);
- undecided on purpose: an extra unused port, a function Yosys 0.23 cannot read, a clock used as data;
- cost: an answer that instantiates itself.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from equivalence_helpers import run_equivalence

from rtlreward.engine import Engine
from rtlreward.model import Candidate, Status, Task
from rtlreward.plugins import get_registry
from rtlreward.sandbox.local import LocalExecutor
from rtlreward_equivalence import DEFAULTS

pytestmark = pytest.mark.skipif(
    not (shutil.which("yosys") and shutil.which("yosys-abc") and shutil.which("iverilog")),
    reason="needs Yosys (apt-get install yosys) and Icarus Verilog",
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
INTERNAL = re.compile(r"\bg[0-9a-f]{16}_\w+")

PORTS = "input clk, input rst_n, input en, input load, input [7:0] d, output [7:0] q, output wrap"
CORRECT_BODY = """  reg [7:0] r;
  always @(posedge clk or negedge rst_n)
    if (!rst_n) r <= 8'd0;
    else if (load) r <= d;
    else if (en) r <= r + 8'd1;
  assign q = r;
  assign wrap = en && !load && (r == 8'hFF);
"""
STUB_BODY = """  assign q = 8'd0;
  assign wrap = 1'b0;
"""
# wrap ignores en and load: one output bit of nine is ever wrong, so it earns partial credit
WRONG_BODY = CORRECT_BODY.replace("assign wrap = en && !load && (r == 8'hFF);", "assign wrap = (r == 8'hFF);")


def module(body: str, ports: str = PORTS, before: str = "") -> str:
    return f"{before}module counter({ports});\n{body}endmodule\n"


STUB = module(STUB_BODY)
UNDRIVEN = module("")
WRONG = module(WRONG_BODY)
CORRECT = module(CORRECT_BODY)

EMPTY_NAMED = (
    "module {name}(input clk, rst_n, en, load, input [7:0] d, output [7:0] q, output wrap);\nendmodule\n"
)
INSTANCE = "  {name} u(.clk(clk), .rst_n(rst_n), .en(en), .load(load), .d(d), .q(q), .wrap(wrap));\n"


def named_forge(name: str, attr: str = "") -> str:
    return attr + EMPTY_NAMED.format(name=name) + module(INSTANCE.format(name=name))


def views_forge(macro: str, negate: bool = False) -> str:
    """The correct design where `macro` is defined (or, `negate`, where it is not: every tool but Icarus), the stub
    in the branch the simulator compiles."""
    kw = "ifndef" if negate else "ifdef"
    return module(f"`{kw} {macro}\n{CORRECT_BODY}`else\n{STUB_BODY}`endif\n")


TRANSLATE_OFF = module(
    CORRECT_BODY.replace(
        "assign q = r;", "assign q = r\n// synopsys translate_off\n  & 8'd0\n// synopsys translate_on\n  ;"
    ).replace(
        "(r == 8'hFF);", "(r == 8'hFF)\n  /* synthesis translate_off */ && 1'b0 /* synthesis translate_on */;"
    )
)
# an unused block no Yosys here reads (`foreach`; Yosys 0.23 also rejects `return` in a function), Icarus does
UNREADABLE_FN = "  logic [7:0] unused_t;\n  always @* foreach (unused_t[k]) unused_t[k] = d[k];\n"
EXTRA_PORT = module(WRONG_BODY + "  assign dbg = 1'b1;\n", ports=PORTS + ", output dbg")
EXTRA_INPUT = module(WRONG_BODY, ports=PORTS + ", input spare")

# (name, forge, the plain design it hides)
FORGES = [
    ("old fixed name, empty module", named_forge("rtlreward_eq_gold"), UNDRIVEN),
    ("old fixed name, black box", named_forge("rtlreward_eq_gate", "(* blackbox *)\n"), UNDRIVEN),
    ("any name, black box", named_forge("helper", "(* blackbox *) "), UNDRIVEN),
    ("keep_hierarchy empty module", named_forge("keep", "(* keep_hierarchy *) "), UNDRIVEN),
    ("ifdef YOSYS", views_forge("YOSYS"), STUB),
    ("ifdef SYNTHESIS", views_forge("SYNTHESIS"), STUB),
    ("ifdef FORMAL", views_forge("FORMAL"), STUB),
    ("ifndef __ICARUS__", views_forge("__ICARUS__", negate=True), STUB),
    ("ifdef VERILATOR", views_forge("VERILATOR"), STUB),
    ("translate_off", TRANSLATE_OFF, STUB),
    ("extra unused output", EXTRA_PORT, WRONG),
    ("extra unused input", EXTRA_INPUT, WRONG),
    ("unreadable unused function", module(WRONG_BODY + UNREADABLE_FN), WRONG),
    ("unreadable function, stub", module(STUB_BODY + UNREADABLE_FN), STUB),
    ("clock used as data", module(WRONG_BODY.replace("r <= r + 8'd1", "r <= r + {7'd0, clk | 1'b1}")), WRONG),
]

CMP_REF = "module cmp(input [3:0] a, input [3:0] b, output z);\n  assign z = (a == b);\nendmodule\n"
CMP_SENS = "module cmp(input [3:0] a, input [3:0] b, output reg z);\n  always @(a) z = (a == b);\nendmodule\n"
SELF_INST = module(
    "  counter u(.clk(clk), .rst_n(rst_n), .en(en), .load(load), .d(d), .q(q), .wrap(wrap));\n"
)


@pytest.fixture(scope="module")
def stage():
    return get_registry().stages()["equivalence"]


@pytest.fixture(scope="module")
def counter_task() -> Task:
    return next(t for t in get_registry().datasets()["folder"].load(str(EXAMPLES)) if t.id == "counter")


def run_stage(stage, executor, tmp_path: Path, task: Task, text: str):
    return run_equivalence(
        stage, executor, tmp_path, task, {task.expected_files[0]: text}, seed=7, timeout=30
    )


def top_task(reference: str, task_id: str) -> Task:
    """A task whose reference is one module `top` in rtl/top.v, the answer's file too."""
    return Task(
        id=task_id,
        prompt="",
        reference={"rtl/top.v": reference},
        expected_files=("rtl/top.v",),
        toplevel="top",
    )


def shown(result) -> str:
    return "\n".join([result.feedback or "", *(d.message for d in result.diagnostics)])


def executors():
    yield pytest.param("local", id="local")
    yield pytest.param("docker", id="docker", marks=pytest.mark.docker)


def make_executor(kind: str):
    if kind == "local":
        return LocalExecutor()
    pytest.importorskip("docker")
    from rtlreward.sandbox.docker import DockerExecutor, DockerUnavailable

    try:
        return DockerExecutor(slots=1)
    except DockerUnavailable as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module", params=list(executors()))
def executor(request):
    ex = make_executor(request.param)
    yield ex
    close = getattr(ex, "close", None)
    if callable(close):
        close()


def test_the_plain_designs_score_as_expected(stage, executor, counter_task, tmp_path):
    """The yardsticks: the correct design is proved (under every executor: the formal step runs there), the stub
    and the wrong design are refuted, and a constant stub earns nothing above the constant baseline."""
    good = run_stage(stage, executor, tmp_path / "c", counter_task, CORRECT)
    assert good.status is Status.PASSED and good.metrics["equivalence"] == "proved", shown(good)
    assert good.metrics["formal"] == "proved" and good.metrics["sim_agrees"] is True
    stub = run_stage(stage, executor, tmp_path / "s", counter_task, STUB)
    assert stub.status is Status.FAILED and stub.score == 0.0, shown(stub)
    wrong = run_stage(stage, executor, tmp_path / "w", counter_task, WRONG)
    assert wrong.status is Status.FAILED and wrong.metrics["equivalence"] == "refuted"
    assert 0 < wrong.score <= DEFAULTS["refuted_max"]


@pytest.mark.parametrize(("name", "forge", "plain"), FORGES, ids=[f[0] for f in FORGES])
def test_a_forge_earns_no_more_than_the_design_it_hides(
    stage, executor, counter_task, tmp_path, name, forge, plain
):
    got = run_stage(stage, executor, tmp_path / "forge", counter_task, forge)
    base = run_stage(stage, executor, tmp_path / "plain", counter_task, plain)
    assert got.status is not Status.PASSED, (name, got.metrics, shown(got))
    assert got.score <= base.score + 1e-9, (name, got.score, base.score, got.metrics, shown(got))
    assert got.score < 1.0
    for r in (got, base):
        assert not INTERNAL.search(shown(r)), shown(r)  # no name the proof added is ever shown


def test_an_incomplete_sensitivity_list_is_judged_as_the_simulator_runs_it(stage, executor, tmp_path):
    """Yosys reads `always @(a) z = (a == b);` as combinational and proves it; Icarus (and the benchmark's
    testbench) update z only when a changes. The proof is trusted only when the simulation of the same text agrees."""
    task = Task(
        id="cmp", prompt="", reference={"rtl/cmp.v": CMP_REF}, expected_files=("rtl/cmp.v",), toplevel="cmp"
    )
    r = run_stage(stage, executor, tmp_path, task, CMP_SENS)
    assert r.status is Status.FAILED and r.metrics["equivalence"] == "refuted", (r.metrics, shown(r))
    assert r.score < DEFAULTS["undecided"] or r.score <= DEFAULTS["refuted_max"]
    assert "proof-simulation-mismatch" in {d.code for d in r.diagnostics} or r.metrics["formal"] != "proved"


def test_an_answer_that_instantiates_itself_is_cut_early(stage, counter_task, tmp_path):
    """Recursion: Yosys would climb to gigabytes and the stage's whole limit; it is cut by the formal step's own
    budget (`yosys_seconds`, `yosys_memory_mb`), and the answer earns nothing."""
    r = run_stage(stage, LocalExecutor(), tmp_path, counter_task, SELF_INST)
    assert r.status is Status.FAILED and r.score == 0.0, (r.metrics, shown(r))
    assert r.metrics.get("formal_seconds", 0) <= DEFAULTS["yosys_seconds"] + 5


def test_an_undecided_answer_is_paid_the_undecided_share_only_where_the_reference_proves(
    stage, counter_task, tmp_path
):
    """The correct design behind an unused block Yosys cannot read: nothing refutes it, nothing proves it. The
    reference proves against itself, so it is suspect: `undecided` share, not passed."""
    text = module(CORRECT_BODY + UNREADABLE_FN)
    r = run_stage(stage, LocalExecutor(), tmp_path / "a", counter_task, text)
    assert r.status is Status.FAILED and r.score == DEFAULTS["undecided"], shown(r)
    assert r.metrics["reference_proves"] is True and "undecided" in {d.code for d in r.diagnostics}


@pytest.mark.docker
def test_every_executor_decides_the_same(stage, counter_task, tmp_path):
    """The formal step runs and decides the same under local and docker: verdict, status and credit per case."""
    cases = {
        "correct": CORRECT,
        "stub": STUB,
        "wrong": WRONG,
        "translate_off": TRANSLATE_OFF,
        "extra": EXTRA_PORT,
    }
    got: dict[str, dict[str, tuple]] = {}
    for kind in ("local", "docker"):
        ex = make_executor(kind)
        try:
            got[kind] = {}
            for name, text in cases.items():
                r = run_stage(stage, ex, tmp_path / kind / name, counter_task, text)
                got[kind][name] = (
                    r.status,
                    r.metrics["equivalence"],
                    r.metrics.get("formal"),
                    round(r.score, 6),
                )
        finally:
            if hasattr(ex, "close"):
                ex.close()
    assert got["local"] == got["docker"]
    assert got["docker"]["correct"][:3] == (Status.PASSED, "proved", "proved")


PROFILE_FORGES = [
    f for f in FORGES if f[0] in ("old fixed name, empty module", "ifdef YOSYS", "translate_off")
]
PROFILE_FORGES.append(("extra unused output", EXTRA_PORT, WRONG))


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["equiv", "trusted", "shaped"])
def test_no_profile_pays_a_forge_more_than_the_design_it_hides(profile, counter_task):
    """The whole reward, not only the stage: under `equiv`, `trusted` (the harness gated on equivalence) and
    `shaped` (the harness alone), every forge earns at most what the plain design it hides earns, and passes only
    where that design passes."""
    items = []
    for i, (_, forge, plain) in enumerate(PROFILE_FORGES):
        for j, text in enumerate((forge, plain)):
            items.append((counter_task, Candidate(text=f"```verilog\n{text}```\n", sample=2 * i + j)))
    with Engine(profile, cache=False, jobs=2) as engine:
        rewards = engine.score_batch(items)
    for i, (name, _, _) in enumerate(PROFILE_FORGES):
        forge, plain = rewards[2 * i], rewards[2 * i + 1]
        # (the counter's own harness is weak: it passes the wrong `wrap`, so under `shaped` that design passes)
        assert plain.passed or not forge.passed, (profile, name, forge.feedback())
        assert forge.total <= plain.total + 1e-9, (profile, name, forge.total, plain.total)
        assert not INTERNAL.search(forge.feedback() + plain.feedback())


@pytest.mark.parametrize("warm", ["1", "0"], ids=["warm-yosys", "one-shot"])
@pytest.mark.parametrize("where", ["abc.rc", ".abc.rc"])
def test_an_abc_start_up_file_in_the_workspace_proves_nothing(
    stage, counter_task, tmp_path, monkeypatch, warm, where
):
    """ABC sources `abc.rc` from its working folder (and the two above it) and `$HOME/.abc.rc` (HOME is the
    workspace) before its own command. Planted there by an earlier simulation of the answer (a profile without
    the safety gate), `echo Property proved.` made a refuted answer `proved`. ABC runs with `-s` (no start-up
    file) on every path."""
    monkeypatch.setenv("RTLREWARD_WARM_YOSYS", warm)
    for folder in (tmp_path, tmp_path / "equivalence"):
        folder.mkdir(exist_ok=True)
        (folder / where).write_text("echo Property proved.\n")
    # wrong in one state random simulation does not reach: only the proof can refute it
    rare = module(
        CORRECT_BODY.replace(
            "assign wrap = en && !load && (r == 8'hFF);",
            "assign wrap = (en && !load && (r == 8'hFF)) | (load && d == 8'hA5 && r == 8'h3C);",
        )
    )
    r = run_stage(stage, LocalExecutor(), tmp_path, counter_task, rare)
    assert r.metrics["equivalence"] == "refuted" and r.score < 1.0, (r.metrics, shown(r))


# -- x resolved to a value the simulator never takes (second red-team pass of the equivalence stage) ----------------
# Each answer computes y = a + 1 like the reference, except behind a rare trigger (b equal to one 32-bit value, which
# a random simulation never draws) where an x reaches the `if`: Icarus takes the else branch (y = EE). Yosys used
# to resolve the x to a value first (opt folding `v[n]` of an all-ones vector to 1, `w == w` of an undriven net to
# 1; its division by zero has a value), so the proof passed while the answer was wrong under the simulator.
X_PORTS = "input [31:0] b, input [7:0] a, input [1:0] s, output reg [7:0] y"
X_REF = f"module top({X_PORTS});\n  always @* y = a + 8'd1;\nendmodule\n"


def x_answer(decl: str, cond: str) -> str:
    return (
        f"module top({X_PORTS});\n  wire t = b == 32'h5EED1234;\n  {decl}\n"
        f"  always @* if ({cond}) y = a + 8'd1; else y = 8'hEE;\nendmodule\n"
    )


X_FORGES = {
    "select-out-of-range": x_answer("wire [3:0] v = 4'hf; wire [2:0] n = {t, s};", "v[n]"),
    "division-by-zero": x_answer("wire [7:0] q = 8'd1 / {7'd0, !t};", "q != 8'd7"),
    "modulo-by-zero": x_answer("wire [7:0] q = 8'd1 % {7'd0, !t};", "q != 8'd7"),
    "undriven-compared-with-itself": x_answer("wire w;", "t ? (w == w) : 1'b1"),
    "x-index": x_answer("wire [7:0] v = 8'hff; wire [1:0] n = t ? 2'bx1 : s;", "v[n]"),
}


# The third pass, against the first x-faithful reading: what it did not encode.
X_HEAD = f"module top({X_PORTS});\n  wire t = b == 32'h5EED1234;\n"
X_UNPROVED = {
    # two drivers of one net: the simulator resolves the conflict to x at the trigger; the proof kept one driver
    "two-drivers": X_HEAD + "  wire [7:0] w; assign w = a + 8'd1; assign w = t ? 8'hEE : a + 8'd1;\n"
    "  always @* y = w;\nendmodule\n",
    "bufif-and-assign": X_HEAD + "  wire w; bufif1(w, 1'b1, t); assign w = 1'b0;\n"
    "  always @* y = w ? 8'hEE : a + 8'd1;\nendmodule\n",
    # a case item with x or z: the simulator's case matches it exactly, Yosys's never
    "case-x-item": X_HEAD + "  wire c = t ? 1'bx : 1'b0;\n"
    "  always @* case (c) 1'bx: y = 8'hEE; default: y = a + 8'd1; endcase\nendmodule\n",
    "case-z-item": X_HEAD + "  wire c = t ? 1'bz : 1'b0;\n"
    "  always @* case (c) 1'bz: y = 8'hEE; default: y = a + 8'd1; endcase\nendmodule\n",
    # an x identity folded inside an initial block's memory write, read at the rare address
    "initial-rom-fold": X_HEAD + "  wire w; reg [7:0] rom [0:1];\n"
    "  initial begin rom[0] = 8'h00; rom[1] = (w == w) ? 8'h00 : 8'hFF; end\n"
    "  always @* y = (a + 8'd1) ^ rom[t];\nendmodule\n",
    # ** is a cell xprop does not encode: an x through it came out defined
    "pow-launders-x": X_HEAD + "  wire [7:0] q = 8'd3 / {7'd0, !t};\n  wire [7:0] p = q ** a;\n"
    "  always @* if (p[0] !== 1'bx) y = a + 8'd1; else y = 8'hEE;\nendmodule\n",
}
SEQ_PORTS = "input clk, input rst, input [31:0] b, input [7:0] a, output reg [7:0] y"
SEQ_REF = (
    f"module top({SEQ_PORTS});\n  always @(posedge clk) if (rst) y <= 0; else y <= a + 8'd1;\nendmodule\n"
)
SEQ_HOLD = (
    "  always @(posedge clk) if (rst) y <= 0; else if (t && !r) y <= a + 8'd1; else if (t) y <= 8'hEE;\n"
)
SEQ_FORGES = {
    # a register nothing resets or writes stays x in the simulator (`!r` is x: the else branch); it was 0 in the
    # proof when registers started at 0 there
    "register-never-written": "  reg r; always @(posedge clk) r <= r;\n",
    "register-initialised-to-x": "  reg r = 1'bx; always @(posedge clk) r <= r;\n",
}


@pytest.mark.parametrize("name", list(X_UNPROVED))
def test_an_x_the_proof_cannot_encode_leaves_it_unproved(stage, tmp_path, name):
    task = top_task(X_REF, "x")
    r = run_stage(stage, LocalExecutor(), tmp_path, task, X_UNPROVED[name])
    assert r.status is not Status.PASSED and r.metrics["equivalence"] != "proved", (name, r.metrics, shown(r))
    assert r.score <= DEFAULTS["undecided"], (name, r.score, r.metrics)


@pytest.mark.parametrize("name", list(SEQ_FORGES))
def test_a_register_left_x_behind_a_rare_trigger_is_refuted(stage, tmp_path, name):
    task = top_task(SEQ_REF, "s")
    text = (
        f"module top({SEQ_PORTS});\n  wire t = b == 32'h5EED1234;\n{SEQ_FORGES[name]}{SEQ_HOLD}"
        "    else y <= a + 8'd1;\nendmodule\n"
    )
    r = run_stage(stage, LocalExecutor(), tmp_path, task, text)
    assert r.status is Status.FAILED and r.metrics["equivalence"] == "refuted", (name, r.metrics, shown(r))
    assert r.metrics["formal"] == "cex", r.metrics


@pytest.mark.parametrize("name", list(X_FORGES))
def test_an_x_behind_a_rare_trigger_is_refuted_by_the_proof(stage, tmp_path, name):
    task = top_task(X_REF, "x")
    r = run_stage(stage, LocalExecutor(), tmp_path, task, X_FORGES[name])
    assert r.status is Status.FAILED and r.metrics["equivalence"] == "refuted", (name, r.metrics, shown(r))
    # Refuted by the proof: its counterexample is the trigger, which the simulation replays and confirms.
    assert r.metrics["formal"] == "cex" and r.metrics["method"] == "formal", r.metrics
    assert not INTERNAL.search(shown(r)), shown(r)


SEL_REF = "module top(input [2:0] n, input [4:0] a, output y);\n  assign y = a[n];\nendmodule\n"


@pytest.mark.parametrize(
    "answer", ["assign y = (n < 3'd5) ? a[n] : 1'b0;", "assign y = a >> n;"], ids=["guarded", "shift"]
)
def test_an_answer_defined_where_the_reference_is_x_is_proved(stage, tmp_path, answer):
    # The reference's a[n] is x for n >= 5 (a don't-care); these answers are 0 there. The x used to reach the
    # AIGER writer, which refused it, and the correct answers were paid as undecided.
    task = top_task(SEL_REF, "sel")
    text = f"module top(input [2:0] n, input [4:0] a, output y);\n  {answer}\nendmodule\n"
    r = run_stage(stage, LocalExecutor(), tmp_path, task, text)
    assert r.status is Status.PASSED and r.metrics["equivalence"] == "proved", (r.metrics, shown(r))
    assert r.metrics["formal"] == "proved"


# -- the third pass: constructs Yosys reads as synthesis does and the simulator runs otherwise ---------------------
# A sequential reference (q follows d) and answers that differ only when d holds one 32-bit value.
SIM_REF = (
    "module top(input clk, input rst, input [31:0] d, output reg [31:0] q);\n"
    "  always @(posedge clk) if (rst) q <= 0; else q <= d;\nendmodule\n"
)
SIM_HEAD = (
    "module top(input clk, input rst, input [31:0] d, output reg [31:0] q);\n  wire t = d == 32'h5EED1234;\n"
)
SIM_FORGES = {
    "gated-clock": "  wire g = clk & ~t;\n  always @(posedge g) if (rst) q <= 0; else q <= d;\n",
    "muxed-clock": "  wire g = t ? ~clk : clk;\n  always @(posedge g) if (rst) q <= 0; else q <= d;\n",
    "intra-assignment-delay": "  always @(posedge clk) if (rst) q <= 0; else if (t) q <= #20 d; else q <= d;\n",
    "procedural-delay": "  always @(posedge clk) if (rst) q <= 0; else if (t) begin #20 q = d; end else q <= d;\n",
    "assign-delay": "  wire [31:0] dd; assign #6 dd = d;\n  always @(posedge clk) if (rst) q <= 0; else q <= t ? dd : d;\n",
    "gate-delay": "  wire tt; buf #7 (tt, t);\n  always @(posedge clk) if (rst) q <= 0; else q <= (t ^ tt) ? ~d : d;\n",
    "initial-time-bomb": "  reg r = 1'b0; initial #1000000 r = 1'b1;\n"
    "  always @(posedge clk) if (rst) q <= 0; else q <= (t && !r) ? ~d : d;\n",
    "blocking-race": "  reg [31:0] s, prev;\n  always @(posedge clk) if (rst) q <= 0; else q <= t ? (s ^ prev ^ d) : d;\n"
    "  always @(posedge clk) prev <= d;\n  always @(posedge clk) s = d;\n",
    "always-star-reads-nothing": "  reg r; always @* r = 1'b1;\n"
    "  always @(posedge clk) if (rst) q <= 0; else q <= (t && r !== 1'b1) ? ~d : d;\n",
}
STALE_REF = "module top(input [31:0] d, output [31:0] y);\n  assign y = d + 32'd1;\nendmodule\n"
STALE = (
    "module top(input [31:0] d, output reg [31:0] y);\n  wire [31:0] e = (d == 32'h5EED1234) ? 32'h0BADF00D : d;\n"
    "  always @(e) y = d + 32'd1;\nendmodule\n"
)


@pytest.mark.parametrize("name", [*SIM_FORGES, "stale-sensitivity-list"])
def test_a_construct_the_simulator_runs_otherwise_gets_no_proof(stage, tmp_path, name):
    if name in SIM_FORGES:
        ref, text = SIM_REF, SIM_HEAD + SIM_FORGES[name] + "endmodule\n"
    else:
        ref, text = STALE_REF, STALE
    task = top_task(ref, "m")
    r = run_stage(stage, LocalExecutor(), tmp_path, task, text)
    assert r.status is not Status.PASSED and r.metrics["equivalence"] != "proved", (name, r.metrics, shown(r))
    assert r.score <= DEFAULTS["undecided"], (name, r.score, r.metrics)
    assert r.metrics["formal"] == "skipped", r.metrics


def test_a_construct_the_simulator_runs_otherwise_cannot_dodge_a_refutation(stage, tmp_path):
    # Wrong at the trigger, which the proof finds; a delay added on top must not trade that refutation for the
    # undecided share (the rule withholds proofs, not counterexamples).
    task = top_task(SIM_REF, "d")
    plain = SIM_HEAD + "  always @(posedge clk) if (rst) q <= 0; else q <= t ? ~d : d;\nendmodule\n"
    dodge = SIM_HEAD + (
        "  wire [31:0] dd; assign #1 dd = d;\n  always @(posedge clk) if (rst) q <= 0; else q <= t ? ~d : dd;\n"
        "endmodule\n"
    )
    base = run_stage(stage, LocalExecutor(), tmp_path / "plain", task, plain)
    got = run_stage(stage, LocalExecutor(), tmp_path / "dodge", task, dodge)
    assert base.metrics["equivalence"] == "refuted", base.metrics
    assert got.status is Status.FAILED and got.metrics["equivalence"] == "refuted", (got.metrics, shown(got))
    assert got.score <= base.score + 1e-9, (got.score, base.score)


# -- the fourth pass: ways around the rule above (files in tests/data/equivalence_forges_4) -----------------------
FOURTH = sorted((ROOT / "tests" / "data" / "equivalence_forges_4").glob("*.v"))


@pytest.mark.parametrize("path", FOURTH, ids=[p.stem for p in FOURTH])
def test_a_way_around_the_simulation_mismatch_rule_gets_no_proof(stage, tmp_path, path):
    """A combinational block reading a variable before writing it (always @*, a list, always_comb), the blocking
    race written as `|=` or `{s} =` or read through a function, a task reading a module signal from always @*, a
    variable initialised from a signal: each differs from the reference under the simulator at one 32-bit value."""
    text = path.read_text()
    ref = SIM_REF if "input clk" in text else STALE_REF
    task = top_task(ref, "f4")
    r = run_stage(stage, LocalExecutor(), tmp_path, task, text)
    assert r.status is not Status.PASSED and r.metrics["equivalence"] != "proved", (
        path.stem,
        r.metrics,
        shown(r),
    )
    assert r.score <= DEFAULTS["undecided"], (path.stem, r.score, r.metrics)


# -- the fifth pass: an answer that prints the testbench's trace lines itself -------------------------------------
HADD_REF = (
    "module top(input a, input b, output sum, output cout);\n  assign {cout, sum} = a + b;\nendmodule\n"
)
TRACE_FORGE = """module top(input a, input b, output sum, output cout);
  assign sum = 1'b0;
  assign cout = 1'b0;
  reg [8*35-1:0] s;
  integer i;
  initial begin
    $sformat(s, "%m");  // the testbench's path: its module name
    i = 0;
    #3.5;
    forever begin  // a line per cycle, just before the testbench's, with what the reference would show
      $display("@%s %0d %b %b", s[32 +: 128], i, a ^ b, a & b);
      i = i + 1;
      #10;
    end
  end
endmodule
"""


def test_an_answer_cannot_print_the_testbenchs_trace_lines(stage, tmp_path):
    """The trace lines carry a nonce the design cannot read: the testbench's module name (which `%m` shows) is
    random apart from it. A constant-0 half adder printing the reference's values under the module name's suffix
    is refuted as the constant it is (a red-team answer earned 0.325 of `equiv` when the name was the nonce)."""
    task = top_task(HADD_REF, "h")
    r = run_stage(stage, LocalExecutor(), tmp_path, task, TRACE_FORGE)
    assert r.metrics["equivalence"] == "refuted" and r.metrics["output_bits_mismatched"] == 2, (
        r.metrics,
        shown(r),
    )
    assert r.score == 0.0


DUAL_REF = """module dual(input clk, input d, output reg q);
  reg qp, qn;
  always @(posedge clk) qp <= d;
  always @(negedge clk) qn <= d;
  always @(*) q = clk ? qp : qn;
endmodule
"""


def test_a_design_wrong_in_the_clocks_high_phase_only_is_refuted(stage, executor, tmp_path):
    """VerilogEval Prob078 (a dual-edge flip-flop): an answer that swaps the two registers agrees with the reference
    in the clock's low phase and differs in its high phase. The proof steps once per cycle and proved it; the
    simulation, sampling both phases, refutes it (before, it sampled the low phase only and agreed)."""
    task = Task(
        id="dual",
        prompt="",
        reference={"rtl/dual.v": DUAL_REF},
        expected_files=("rtl/dual.v",),
        toplevel="dual",
    )
    good = run_stage(stage, executor, tmp_path / "good", task, DUAL_REF)
    assert good.status is Status.PASSED, (good.metrics, shown(good))
    swapped = DUAL_REF.replace("clk ? qp : qn", "clk ? qn : qp")
    bad = run_stage(stage, executor, tmp_path / "bad", task, swapped)
    assert bad.status is Status.FAILED and bad.metrics["equivalence"] == "refuted", (bad.metrics, shown(bad))
    assert bad.score < 1.0


# -- the sixth pass (2026-11-29): the clock followed through the elaborated design, parameter overrides, a generate
# `case` on an x, a blocking write to a submodule's output (files in tests/data/equivalence_forges_6): each was
# proved (1.0) while the simulator shows it wrong at one 32-bit value.
SIXTH = sorted((ROOT / "tests" / "data" / "equivalence_forges_6").glob("*.v"))


@pytest.mark.parametrize("path", SIXTH, ids=[p.stem for p in SIXTH])
def test_a_clock_or_parameter_the_simulator_runs_otherwise_gets_no_proof(stage, tmp_path, path):
    task = top_task(SIM_REF, "f6")
    r = run_stage(stage, LocalExecutor(), tmp_path, task, path.read_text())
    assert r.status is not Status.PASSED and r.metrics["equivalence"] != "proved", (
        path.stem,
        r.metrics,
        shown(r),
    )
    assert r.metrics["formal"] == "skipped", (path.stem, r.metrics)
    assert r.score <= DEFAULTS["undecided"], (path.stem, r.score, r.metrics)


HIER_CORE = (
    "module core(input c, input r, input [31:0] d, output reg [31:0] q);\n"
    "  always @(posedge c) if (r) q <= 0; else q <= d;\nendmodule\n"
)
HIERARCHICAL = {
    "named": "  core u(.c(clk), .r(rst), .d(d), .q(q));\n",
    "positional": "  core u(clk, rst, d, q);\n",
    "through-two-levels": "  mid m(.clk(clk), .rst(rst), .d(d), .q(q));\n",
    "in-a-generate-loop": "  genvar i;\n  generate for (i = 0; i < 1; i = i + 1) begin : g\n"
    "    core u(.c(clk), .r(rst), .d(d), .q(q));\n  end endgenerate\n",
}
MID = (
    "module mid(input clk, input rst, input [31:0] d, output [31:0] q);\n"
    "  core u(.c(clk), .r(rst), .d(d), .q(q));\nendmodule\n"
)


@pytest.mark.parametrize("name", list(HIERARCHICAL))
def test_a_correct_design_whose_registers_sit_in_submodules_is_proved(stage, tmp_path, name):
    # The clock reaches the register through port connections by name, by position, two levels down, from a
    # generate loop: the same clock, so the rule that follows it must not withhold the proof.
    text = (
        "module top(input clk, input rst, input [31:0] d, output [31:0] q);\n"
        + HIERARCHICAL[name]
        + "endmodule\n"
        + HIER_CORE
        + MID
    )
    task = top_task(SIM_REF, "h")
    r = run_stage(stage, LocalExecutor(), tmp_path, task, text)
    assert r.status is Status.PASSED and r.metrics["equivalence"] == "proved", (name, r.metrics, shown(r))


def test_a_negedge_design_is_proved_against_a_negedge_reference(stage, tmp_path):
    # The edge rule compares the answer's edges with the reference's: a reference that takes the falling edge
    # allows it (VerilogEval's Prob046_dff8p).
    ref = SIM_REF.replace("posedge", "negedge")
    task = top_task(ref, "n")
    text = (
        "module top(input clk, input rst, input [31:0] d, output [31:0] q);\n"
        "  reg [31:0] r;\n  always @(negedge clk) r <= rst ? 32'd0 : d;\n  assign q = r;\nendmodule\n"
    )
    r = run_stage(stage, LocalExecutor(), tmp_path, task, text)
    assert r.status is Status.PASSED and r.metrics["equivalence"] == "proved", (r.metrics, shown(r))


# A decoy only the proof sees (`fake` is 1 to Yosys, 0 to Icarus) beside a deep bug behind a two-cycle trigger: the
# proof's counterexample is the decoy, the simulation does not show it, and the random runs miss the bug. Paid the
# undecided share (0.25) until the second and third passes of 2026-11-29: `fake` set in a block whose list names an
# undriven net, or by an `if` on such a net (z to Icarus: the `else`; x to the proof).
DECOYS = {
    "sensitivity-list": "  reg fake = 1'b0;\n  always @(spare) fake = (d === 32'hx) ? 1'b0 : 1'b1;\n",
    "undriven-net": "  reg fake;\n  always_comb if (spare) fake = 1'b1; else fake = 1'b0;\n",
}
DEEP_BUG = """  reg armed = 1'b0, broken = 1'b0;
  always @(posedge clk) begin
    armed <= d == 32'h5EED1234;
    if (armed && d == 32'h0BADF00D) broken <= 1'b1;
  end
  always @(posedge clk) if (rst) q <= 0; else q <= (broken | fake) ? ~d : d;
endmodule
"""


@pytest.mark.parametrize("decoy", list(DECOYS))
def test_a_difference_only_the_proof_sees_buys_no_undecided_share(stage, tmp_path, decoy):
    text = "module top(input clk, input rst, input [31:0] d, output reg [31:0] q);\n  wire spare;\n"
    text += DECOYS[decoy] + DEEP_BUG
    r = run_stage(stage, LocalExecutor(), tmp_path, top_task(SIM_REF, "decoy"), text)
    assert r.metrics["formal"] == "cex" and r.metrics["equivalence"] != "refuted", (r.metrics, shown(r))
    assert r.status is Status.FAILED and r.score == 0.0, (r.score, shown(r))
    assert "only one tool sees" in shown(r)


def test_a_self_proof_that_ran_out_of_time_is_not_kept_on_disk(stage, tmp_path, monkeypatch):
    """ABC's time limit ends a proof `undecided` sooner on a slower or busier machine; kept on disk, it made a task
    simulation-only for good (every undecided answer then passes on a simulation). Only proved or refuted
    self-proofs are kept there. (The self-proof's outcome is set here: no reference of these sizes runs out.)"""
    import rtlreward_equivalence as eq

    monkeypatch.setenv("RTLREWARD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(eq, "_SELF_PROOFS", {})
    real = eq.EquivalenceStage._formal
    outcome = {"self": "undecided"}

    def formal(self, ctx, work, plan, gold_file, gate_file, **kw):
        if work.name == "self":  # the reference against a copy of itself
            return eq._Formal(outcome["self"])
        return real(self, ctx, work, plan, gold_file, gate_file, **kw)

    monkeypatch.setattr(eq.EquivalenceStage, "_formal", formal)
    task = top_task(SIM_REF, "self")
    # a correct answer the proof does not count (a defparam): undecided, so the self-proof runs
    answer = (
        "module top(input clk, input rst, input [31:0] d, output [31:0] q);\n"
        "  pass u(.clk(clk), .rst(rst), .d(d), .q(q));\n  defparam u.W = 32;\nendmodule\n"
        "module pass #(parameter W = 8) (input clk, input rst, input [W-1:0] d, output reg [W-1:0] q);\n"
        "  always @(posedge clk) if (rst) q <= 0; else q <= d;\nendmodule\n"
    )
    r = run_stage(stage, LocalExecutor(), tmp_path / "a", task, answer)
    assert r.metrics.get("reference_proves") is False and r.metrics.get("simulation_only"), r.metrics
    assert not list((tmp_path / "cache").rglob("*.json"))  # nothing on disk
    outcome["self"] = "proved"
    monkeypatch.setattr(eq, "_SELF_PROOFS", {})
    r = run_stage(stage, LocalExecutor(), tmp_path / "b", task, answer)
    assert r.metrics.get("reference_proves") is True and r.score == DEFAULTS["undecided"], r.metrics
    assert len(list((tmp_path / "cache").rglob("*.json"))) == 1


SWAP_REF = "module top(input [31:0] d, output [31:0] y);\n  assign y = {d[7:0], d[15:8], d[23:16], d[31:24]};\nendmodule\n"
SWAP_FUNCTIONS = {
    "concatenation-on-the-left": """module top(input [31:0] d, output [31:0] y);
  function [31:0] swap(input [31:0] a);
    reg [7:0] b0, b1, b2, b3;
    begin
      {b3, b2, b1, b0} = a;
      swap = {b0, b1, b2, b3};
    end
  endfunction
  assign y = swap(d);
endmodule
""",
}


@pytest.mark.parametrize("name", list(SWAP_FUNCTIONS))
def test_a_correct_function_with_whole_writes_is_proved(stage, tmp_path, name):
    # Found by the third pass of 2026-11-29: a concatenation on the left was not read as a write of each variable,
    # and a typedef's name was taken for a module signal; both correct answers earned 0.1.
    task = top_task(SWAP_REF, "swap")
    r = run_stage(stage, LocalExecutor(), tmp_path, task, SWAP_FUNCTIONS[name])
    assert r.status is Status.PASSED and r.metrics["equivalence"] == "proved", (name, r.metrics, shown(r))


def test_a_typedef_in_a_function_is_not_taken_for_a_module_signal():
    # (Yosys 0.70 itself cannot read this text, so the stage ends undecided; the rules must not refuse it.)
    from rtlreward_equivalence import view

    text = """module top(input [31:0] d, output [31:0] y);
  typedef logic [7:0] byte_t;
  function automatic logic [31:0] swap(input logic [31:0] a);
    byte_t b0, b1, b2, b3;
    {b3, b2, b1, b0} = a;
    return {b0, b1, b2, b3};
  endfunction
  assign y = swap(d);
endmodule
"""
    assert view.subroutine_state(text) == "" and view.simulation_mismatch(text, "top") == ""
