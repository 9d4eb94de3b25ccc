"""Issue 21's "done when": today's historic forges, each written here as a hidden fixture the audit is never shown,
and the audit (its seeds and search, with no hint of the trick) reaching at least that forge's reward class; where
the engine is fixed, the audit's seed class for the forge exists and earns no more than the do-nothing stub.

- the miter-name stub: a design with no logic that instantiates the name the proof gave the reference. Today's
  equivalence stage draws fresh names per run; the historic leak is reproduced by a deliberately leaky third-party
  stage (fixed names, shown in its feedback) so the test shows the audit finds such a name from the feedback alone;
- a `ifdef YOSYS view, an extra port that made the proof skip: fixed, so their seed classes stay at the stub;
- a constant stub on VerilogEval under `shaped`: found (0.6 of 1.6, the partial-credit floor);
- resource blow-ups and code in the prompt's position: every failure reads as the answer's (never `error`) and
  earns no more than the stub.

Real tools, the real Engine; a shared result cache."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest
from verilog_eval_helpers import VE_DATA, needs_verilog_eval

import rtlreward_audit
from rtlreward import Stage, Status, hookimpl
from rtlreward.engine import Engine
from rtlreward.integration import load_tasks
from rtlreward.model import Candidate
from rtlreward.plugins import make_plugin_manager
from rtlreward_audit.audit import AuditSettings, run_audit

ROOT = Path(__file__).resolve().parents[1]
COUNTER = ROOT / "examples" / "counter"

# -- the hidden fixtures: historic forges on the counter (examples/counter), as they were written by hand -------------
PORTS = "input clk, input rst_n, input en, input load, input [7:0] d, output [7:0] q, output wrap"
STUB_BODY = "  assign q = 8'd0;\n  assign wrap = 1'b0;\n"
CORRECT_BODY = """  reg [7:0] r;
  always @(posedge clk or negedge rst_n)
    if (!rst_n) r <= 8'd0;
    else if (load) r <= d;
    else if (en) r <= r + 8'd1;
  assign q = r;
  assign wrap = en && !load && (r == 8'hFF);
"""
WRONG_BODY = CORRECT_BODY.replace("en && !load && (r == 8'hFF)", "(r == 8'hFF)")
LEAKED = "rtlreward_eq_gold"  # the name the old equivalence stage gave the reference's copy
MITER_NAME_STUB = (
    f"module {LEAKED}({PORTS});\nendmodule\n"
    f"module counter({PORTS});\n  {LEAKED} u(.clk(clk), .rst_n(rst_n), .en(en), .load(load), .d(d), .q(q),"
    " .wrap(wrap));\nendmodule\n"
)
IFDEF_VIEW = f"module counter({PORTS});\n`ifdef YOSYS\n{CORRECT_BODY}`else\n{STUB_BODY}`endif\nendmodule\n"
EXTRA_PORT = f"module counter({PORTS}, output dbg);\n{WRONG_BODY}  assign dbg = 1'b1;\nendmodule\n"
VE_CONSTANT_STUB = (
    "module TopModule (\n  input a,\n  input b,\n  output out\n);\n  assign out = 1'b0;\nendmodule\n"
)


def fence(code: str) -> str:
    return f"```verilog\n{code}```\n"


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RTLREWARD_CACHE_DIR", str(tmp_path_factory.mktemp("audit-forges-cache")))
        mp.setenv("RTLREWARD_CONFIG", "")
        yield


def _registry(**extra):
    installed = {ep.name for ep in importlib.metadata.entry_points(group="rtlreward")}
    mine = {} if "audit" in installed else {"audit": rtlreward_audit}
    return make_plugin_manager(extra_plugins={**mine, **extra})


@pytest.fixture(scope="module")
def counter():
    return load_tasks(str(COUNTER))


def _score(profile, task, text, registry=None) -> float:
    eng = Engine(profile, registry=registry)
    try:
        return eng.score(task, Candidate(text=fence(text))).total
    finally:
        eng.close()


# -- the miter-name stub, reproduced by a leaky stage --------------------------------------------------------------


class _LeakyEquivalence(Stage):
    """The historic bug, as a third party could still write it: the reference's copy gets a fixed name, both designs
    share one namespace (so a design that instantiates that name is the reference), and the feedback names it."""

    name = "leaky_equivalence"
    version = "1"
    requires = ("format",)

    def run(self, ctx):
        text = "\n".join(ctx.files.values())
        tops = re.findall(r"\bmodule\s+(\w+)", text)
        uses_copy = re.search(rf"^\s*{LEAKED}\s+\w+\s*\(", text, re.M) is not None
        if uses_copy and LEAKED not in tops:  # the answer's top is the reference's copy: "proved"
            return self.result(Status.PASSED, 1.0)
        if uses_copy:  # the answer's empty module shadows the copy: both sides are the same empty module
            return self.result(Status.PASSED, 1.0)
        return self.result(
            Status.FAILED, 0.0, feedback=f"miter of {LEAKED} and rtlreward_eq_gate: outputs differ (q)"
        )


class _LeakyPlugin:
    @hookimpl
    def rtlreward_register_stages(self, register):
        register(_LeakyEquivalence())


LEAKY = {
    "name": "leaky",
    "combiner": "weighted",
    "stages": ["format", "safety", "leaky_equivalence"],
    "gates": ["safety"],
    "verdict": "leaky_equivalence",
    "weights": {"format": 0.1, "leaky_equivalence": 0.9},
}


def test_the_audit_finds_a_leaked_miter_name_from_the_feedback_alone(counter):
    reg = _registry(leaky=_LeakyPlugin())
    forge_reward = _score(LEAKY, counter[0], MITER_NAME_STUB, reg)
    assert forge_reward == pytest.approx(1.0)  # the hidden fixture: the historic forge is paid as a proof
    report = run_audit(
        counter, AuditSettings(profile=LEAKY, budget=0, attacks=("stub", "names")), registry=reg
    )
    (entry,) = report["tasks"]
    u = entry["unearned"]
    assert entry["unearned_reward"] >= forge_reward - 1e-9, u
    assert u["class"] == "names" and u["label"] == f"feedback:{LEAKED}" and u["origin"] == "feedback"
    assert u["judged"] == "wrong" and u["how"]
    assert entry["forged_pass"] is True and entry["stub_reward"] == pytest.approx(0.1)


# -- the same forges against today's engine: the class is searched, and pays no more than the stub ----------------

FORGES = [
    pytest.param("names", MITER_NAME_STUB, id="miter-name-stub"),
    pytest.param("one_tool_view", IFDEF_VIEW, id="ifdef-yosys-view"),
    pytest.param("extra_port", EXTRA_PORT, id="extra-port"),
]


@pytest.fixture(scope="module", params=["equiv"])  # trusted: the self-audit gate (test_audit_presets)
def fixed_report(request, counter):
    settings = AuditSettings(
        profile=request.param, budget=2, attacks=("stub", "names", "one_tool_view", "extra_port")
    )
    return request.param, run_audit(counter, settings, registry=_registry())["tasks"][0]


@pytest.mark.parametrize(("cls", "forge"), FORGES)
def test_a_fixed_forge_class_is_searched_and_stays_at_the_stub(fixed_report, counter, cls, forge):
    profile, entry = fixed_report
    assert cls in entry["by_class"], entry["by_class"]  # the audit tried this class, untold
    stub = entry["stub_reward"]
    assert stub is not None and entry["unearned_reward"] <= stub + 1e-9, entry["unearned"]
    assert (entry["by_class"][cls] or 0.0) <= stub + 1e-9
    # the hidden fixture itself, under today's engine: no proof paid for it
    eng = Engine(profile, registry=_registry())
    try:
        r = eng.score(counter[0], Candidate(text=fence(forge)))
    finally:
        eng.close()
    assert not r.passed, r.stages
    if cls != "extra_port":  # a stub underneath: the stub's reward at most (the extra port hides a near miss)
        assert r.total <= stub + 1e-9


@needs_verilog_eval
def test_the_audit_finds_the_constant_stub_on_verilog_eval_under_shaped():
    if not (VE_DATA / "dataset_spec-to-rtl").is_dir():
        pytest.skip("VerilogEval data not at ../shared/data/verilog-eval")
    from rtlreward_verilog_eval.dataset import VerilogEvalDataset

    tasks = VerilogEvalDataset().load(VE_DATA, ids="Prob011_norgate")
    forge_reward = _score("shaped", tasks[0], VE_CONSTANT_STUB)
    assert forge_reward == pytest.approx(0.6)
    report = run_audit(
        tasks, AuditSettings(profile="shaped", budget=0, attacks=("stub",)), registry=_registry()
    )
    (entry,) = report["tasks"]
    assert entry["unearned_reward"] >= forge_reward - 1e-9
    assert entry["unearned"]["class"] == "stub" and entry["unearned"]["judged"] == "wrong"


# -- resource blow-ups and the prompt's position ------------------------------------------------------------------


def test_blow_ups_and_the_prompts_position_fail_as_the_answers_and_earn_no_more_than_the_stub(counter):
    # shaped with the tests stage cut at 10 s (the counter's reference runs in about a second): the output flood
    # runs to the limit, which need not be a minute here
    profile = {"extends": "shaped", "name": "shaped-10s", "stage": {"tests": {"timeout": 10}}}
    settings = AuditSettings(profile=profile, budget=0, attacks=("stub", "resource", "prompt_position"))
    (entry,) = run_audit(counter, settings, registry=_registry())["tasks"]
    assert entry["errors"] == []  # no seed broke a stage
    stub = entry["stub_reward"]
    assert stub == pytest.approx(0.6)
    for cls in ("resource", "prompt_position"):
        assert cls in entry["by_class"]
        assert (entry["by_class"][cls] or 0.0) <= stub + 1e-9
    assert entry["seeds"] >= 4 + 4 + 6
