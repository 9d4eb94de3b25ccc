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
        self.argvs: list[tuple[str, ...]] = []
        self.outputs: list[str] = []

    def run(self, argv, **kw):
        with self.lock:
            self.commands.append(" ".join(str(a) for a in argv)[:400])
            self.argvs.append(tuple(str(a) for a in argv))
        res = super().run(argv, **kw)
        with self.lock:
            self.outputs.append(res.stdout)
        return res


@pytest.fixture(scope="module")
def counter():
    return VerilogEvalDataset().load(VE_DATA, ids="Prob035_count1to10")[0]


def _variant(task, i: int) -> dict[str, str]:
    ref = task.reference["TopModule.sv"]
    return {"TopModule.sv": f"// variant {i}\n{ref}"}


def test_strict_costs_two_commands_per_candidate(counter, tmp_path, monkeypatch):
    monkeypatch.setenv("RTLREWARD_CACHE_DIR", str(tmp_path / "cache"))
    ex = Counting()
    with Engine("strict", executor=ex, cache=False, jobs=1, workspace_root=tmp_path / "ws") as eng:
        assert eng.score(
            counter, _variant(counter, 0)
        ).passed  # the task's one-time costs: limits, stub baseline
        ex.commands.clear()
        reward = eng.score(counter, _variant(counter, 1))
        assert reward.passed and reward.stages["tests"].metrics["mismatches"] == 0
        # safety: read in process (no macro, nothing a preprocessor would change); compile: Icarus's compiler
        # itself, without the launcher (rtlreward_hdl.icarus.direct_elaboration); tests: iverilog + vvp in one.
        assert len(ex.commands) == 2, ex.commands
        assert sum(c.split()[0].endswith("/ivl") for c in ex.commands) == 1
        assert sum("vvp -n _rtlreward_sim.vvp" in c for c in ex.commands) == 1
        # An answer with a macro: both preprocessors, in one more command.
        ex.commands.clear()
        ref = counter.reference["TopModule.sv"]
        macro = {"TopModule.sv": "`define RTLREWARD_UNUSED 1\n" + ref}
        assert eng.score(counter, macro).passed
    assert len(ex.commands) == 3, ex.commands
    assert sum("ivlpp" in c for c in ex.commands) == 1
    # ... and the compile stage's elaboration through the launcher, whose preprocessor expands the macro
    assert sum(c.startswith("iverilog -g2012 -t null -s TopModule") for c in ex.commands) == 1


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
    assert any(c.startswith("iverilog -g2012 -t null -s TopModule") for c in ex.commands)


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


@pytest.mark.parametrize("warm", [True, False], ids=["warm-yosys", "one-shot"])
def test_equiv_proof_costs(counter, tmp_path, monkeypatch, warm):
    """Under `equiv` a proved candidate with no macro costs the simulation that must agree with the proof: one
    command of the equivalence stage, the answer's compile and run (the gate and both designs' Icarus views are read
    in process, the reference's once per task; the reference's run of the task's random inputs is kept from the
    task's first sample). The proof itself runs on a warm Yosys server (libyosys loaded once, a forked child per
    proof); with the servers off (RTLREWARD_WARM_YOSYS=0) it is one more command, Yosys's miter with ABC's proof
    chained in the same sandbox, never a command of ABC's own."""
    monkeypatch.setenv("RTLREWARD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RTLREWARD_WARM_YOSYS", "1" if warm else "0")
    ex = Counting()
    with Engine("equiv", executor=ex, cache=False, jobs=1, workspace_root=tmp_path / "ws") as eng:
        assert eng.score(counter, _variant(counter, 0)).passed  # the task's one-time costs: the self-proof
        ex.commands.clear()
        ex.argvs.clear()
        reward = eng.score(counter, _variant(counter, 1))
    eq = reward.stages["equivalence"]
    assert reward.passed and eq.metrics["equivalence"] == "proved" and eq.metrics["formal"] == "proved", eq
    assert eq.metrics["formal_engine"] == "explicit", eq.metrics  # a counter: every reachable state visited
    chained = [a for a in ex.argvs if any(x.startswith("rtlreward-abc-") for x in a)]
    # ABC never started: a miter decided from its file ends the runner's chain before the nonce line
    assert not any(x.startswith("rtlreward-abc-") for out in ex.outputs for x in out.splitlines()), ex.outputs
    # no command of ABC's own (the fallback runs it through `sh -c b=$1 ...` or the Python runner)
    assert not any(a[:2] == ("sh", "-c") and a[2].startswith("b=$1") for a in ex.argvs), ex.commands
    own = [c for c in ex.commands if "ivlpp" not in c]  # the equivalence stage's (the gate's may be cached)
    assert not any("iverilog -g2012 -E" in c for c in ex.commands), ex.commands
    # The reference ran the task's random inputs for the first candidate: nothing of it runs for this one (neither
    # its compile nor its `vvp`); the answer's compiles (through Icarus's compiler itself, `ivl`, where no text is
    # one a preprocessor would change) and runs.
    assert not any("sim_gold/tb.vvp" in c or "sim_gold/_rtlreward_ivl" in c for c in ex.commands), ex.commands
    assert sum("ivl -Csim_gate/_rtlreward_ivl.conf" in c for c in ex.commands) == 1, ex.commands
    assert not any("+rtlreward_cycles=" in " ".join(a) for a in ex.argvs), ex.argvs
    # An answer with a macro: Icarus preprocesses it, and only it (the reference's view is remembered).
    ex.commands.clear()
    with Engine("equiv", executor=ex, cache=False, jobs=1, workspace_root=tmp_path / "ws") as eng:
        macro = {"TopModule.sv": "`define RTLREWARD_ONE 1\n" + counter.reference["TopModule.sv"]}
        eng.score(counter, _variant(counter, 2))
        ex.commands.clear()
        assert eng.score(counter, macro).passed
    views = [c for c in ex.commands if "iverilog -g2012 -E" in c]
    assert len(views) == 1 and "gate.pp.v" in views[0] and "gold.pp.v" not in views[0], ex.commands
    if warm:
        assert len(own) == 1 and not chained, ex.commands
        assert not any("import os, sys" in " ".join(a) for a in ex.argvs)  # no Yosys runner started
    else:
        assert len(own) == 2, ex.commands
        assert len(chained) == 1 and any(
            x.startswith("read_aiger eq.aig") and "pdr -T" in x for x in chained[0]
        )


def test_a_chained_yosys_past_its_own_limit_is_a_yosys_timeout(counter, tmp_path):
    """In the chained command Yosys keeps its own limit (an alarm in its runner), not the whole command's, and
    is reported as Yosys not finishing; the answer earns nothing."""
    from equivalence_helpers import run_equivalence

    from rtlreward_equivalence import EquivalenceStage

    heavy = counter.reference["TopModule.sv"].replace(
        "endmodule",
        "  genvar gi;\n  wire [59999:0] w;\n  generate for (gi = 0; gi < 60000; gi = gi + 1) begin : g\n"
        "    assign w[gi] = (gi % 3 == 0) ? q[0] : ~w[gi > 0 ? gi - 1 : 0];\n  end endgenerate\nendmodule",
    )
    files = {"TopModule.sv": heavy}
    r = run_equivalence(
        EquivalenceStage(),
        Counting(),
        tmp_path,
        counter,
        files,
        seed=1,
        timeout=60,
        yosys_seconds=1.0,
        simulate=False,
    )
    assert r.metrics["formal"] == "timeout", (r.metrics, [d.message for d in r.diagnostics])
    assert any("did not finish" in d.message for d in r.diagnostics)
    assert r.metrics["formal_seconds"] < 1.0 + 5


LINT_ONLY = {
    "name": "lint-only",
    "combiner": "weighted",
    "stages": ["format", "safety", "lint"],
    "gates": ["safety"],
    "verdict": "lint",
    "weights": {"format": 0.1, "lint": 1.0},
}


def test_lint_skips_the_std_package_only_where_nothing_names_it(counter, tmp_path, monkeypatch):
    """Verilator parses its built-in `std` package on every run (~3 of ~10 ms) unless `--no-std`: the lint stage
    passes it where no input names anything the package declares, with the same diagnostics (a warning-ridden
    mutant here; 591 VerilogEval and RTLLM references, mutants and stubs when it was written); an answer that uses
    the package keeps it and lints clean."""
    import rtlreward_lint

    monkeypatch.setenv("RTLREWARD_CACHE_DIR", str(tmp_path / "cache"))
    ref = counter.reference["TopModule.sv"]
    noisy = ref.replace("endmodule", "  wire unused_a, unused_b;\n  assign unused_a = unused_b;\nendmodule")
    uses_std = ref.replace(
        "endmodule", "  initial begin\n    semaphore s = new(1);\n    s.put(1);\n  end\nendmodule"
    )
    ex = Counting()
    seen = {}
    with Engine(LINT_ONLY, executor=ex, cache=False, jobs=1, workspace_root=tmp_path / "ws") as eng:
        eng.score(counter, {"TopModule.sv": ref})  # the task's one-time costs (the engine's calibration run)
        for name, text in (("noisy", noisy), ("std", uses_std)):
            ex.argvs.clear()
            st = eng.score(counter, {"TopModule.sv": text}).stages["lint"]
            lint = [a for a in ex.argvs if "--lint-only" in a]
            assert len(lint) == 1, ex.argvs
            seen[name] = (st.status, st.score, [(d.code, d.line, d.message) for d in st.diagnostics], lint[0])
        monkeypatch.setattr(rtlreward_lint, "_std_unused", lambda *a: False)
        with_std = eng.score(counter, {"TopModule.sv": noisy}).stages["lint"]
    assert "--no-std" in seen["noisy"][3] and "--no-std" not in seen["std"][3]
    assert seen["noisy"][:3] == (
        with_std.status,
        with_std.score,
        [(d.code, d.line, d.message) for d in with_std.diagnostics],
    )
    assert seen["noisy"][1] < 1.0 and seen["noisy"][2]  # the mutant's warnings are there with either reading
    assert seen["std"][0] is Status.PASSED and not any(d[0] and "error" in str(d[0]) for d in seen["std"][2])
