"""Each fixed cost paid once (issue 16): the commands one candidate costs under `strict` on a small task. The
safety gate's preprocessor run also serves the tests stage's check of the answer, the compile stage's
elaboration of the answer alone is the tests stage's isolation check, and the testbench's compile and its
simulation share one sandbox. Real Icarus, the real local executor (each command still gets its own limits)."""

from __future__ import annotations

import threading

import pytest
from verilog_eval_helpers import VE_DATA, needs_verilog_eval

from rtlreward.engine import Engine
from rtlreward.model import Status
from rtlreward.sandbox.local import LocalExecutor
from rtlreward_verilog_eval.dataset import VerilogEvalDataset

pytestmark = needs_verilog_eval


class Counting(LocalExecutor):
    """The local executor, recording each command's program."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.commands: list[str] = []

    def run(self, argv, **kw):
        with self.lock:
            self.commands.append(" ".join(str(a) for a in argv)[:400])
        return super().run(argv, **kw)


@pytest.fixture(scope="module")
def counter():
    return VerilogEvalDataset().load(VE_DATA, ids="Prob035_count1to10")[0]


def _variant(task, i: int) -> dict[str, str]:
    ref = task.reference["TopModule.sv"]
    return {"TopModule.sv": f"// variant {i}\n{ref}"}


def test_strict_costs_three_commands_per_candidate(counter, tmp_path, monkeypatch):
    monkeypatch.setenv("RTLREWARD_CACHE_DIR", str(tmp_path / "cache"))
    ex = Counting()
    with Engine("strict", executor=ex, cache=False, jobs=1, workspace_root=tmp_path / "ws") as eng:
        assert eng.score(
            counter, _variant(counter, 0)
        ).passed  # the task's one-time costs: limits, stub baseline
        ex.commands.clear()
        reward = eng.score(counter, _variant(counter, 1))
    assert reward.passed and reward.stages["tests"].metrics["mismatches"] == 0
    # safety: both preprocessors in one command; compile: iverilog -s TopModule; tests: iverilog + vvp in one.
    assert len(ex.commands) == 3, ex.commands
    assert sum("ivlpp" in c for c in ex.commands) == 1
    assert sum(c.startswith("iverilog -g2012 -o compile.vvp") for c in ex.commands) == 1
    assert sum("vvp -n _rtlreward_sim.vvp" in c for c in ex.commands) == 1


def test_without_the_compile_stage_the_tests_stage_still_checks_the_answer_alone(
    counter, tmp_path, monkeypatch
):
    monkeypatch.setenv("RTLREWARD_CACHE_DIR", str(tmp_path / "cache"))
    profile = {
        "name": "tests-only",
        "stages": ["format", "safety", "tests"],
        "gates": ["safety"],
        "verdict": "tests",
        "weights": {"tests": 1.0},
    }
    # An answer that reads the testbench's own signal: it compiles with the testbench, never on its own.
    upward = counter.reference["TopModule.sv"].replace("endmodule", "  wire peek = tb.clk;\nendmodule")
    ex = Counting()
    with Engine(profile, executor=ex, cache=False, jobs=1, workspace_root=tmp_path / "ws") as eng:
        reward = eng.score(counter, {"TopModule.sv": upward})
    tests = reward.stages["tests"]
    assert tests.status is Status.FAILED and tests.metrics.get("step") == "isolate", tests
    assert any(d.code == "not-self-contained" for d in tests.diagnostics), tests.diagnostics
    assert any(c.startswith("iverilog -g2012 -s TopModule") for c in ex.commands)


def test_a_compile_error_with_the_testbench_is_reported_from_the_shared_command(
    counter, tmp_path, monkeypatch
):
    monkeypatch.setenv("RTLREWARD_CACHE_DIR", str(tmp_path / "cache"))
    # Elaborates on its own, but also defines the benchmark's reference module: compiled with the testbench and
    # the reference, the name is defined twice.
    clash = counter.reference["TopModule.sv"] + "\nmodule RefModule;\nendmodule\n"
    with Engine("strict", cache=False, jobs=1, workspace_root=tmp_path / "ws") as eng:
        reward = eng.score(counter, {"TopModule.sv": clash})
    tests = reward.stages["tests"]
    assert reward.stages["compile"].passed
    assert tests.status is Status.FAILED and tests.metrics.get("step") == "compile", tests
    # The compiler's own words, read back from the shared command's log, located in the answer's file.
    assert any("RefModule" in d.message for d in tests.diagnostics), tests.diagnostics
