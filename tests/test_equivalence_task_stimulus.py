"""The equivalence stage's random runs are the task's own (`rtlreward_equivalence.task_seed`): every sample of a task
is compared on the same inputs, so the reference simulates them once per task and its trace is kept
(`_GOLD_TRACES`), never from a run after code of an answer ran in the workspace."""

from __future__ import annotations

import pytest

import rtlreward_equivalence
from rtlreward.engine import Engine
from rtlreward.integration import load_tasks
from rtlreward_equivalence import EquivalenceStage

RUNS: list = []  # (side, plan, stimulus, trace) of every simulation, for the tests that build answers from them
FORMAL_FIRST = {"extends": "equiv", "stage": {"equivalence": {"options": {"order": "formal-first"}}}}


def _groups():
    from rtlreward_hdl.mutate import mutants
    from rtlreward_hdl.stubs import stub_designs

    out = []
    for task in load_tasks("verilog-eval", skip_known_issues=True, limit=60)[::15]:
        ref = next(iter(task.reference.values()))
        answers = [ref, "// the same design\n" + ref]
        answers += [next(iter(m.files.values())) for m in mutants(dict(task.reference), limit=2)]
        answers.append(next(iter(stub_designs(task)["ones"].values())))
        out.append((task, [{"TopModule.sv": a} for a in answers]))
    return out


def _seen(reward):
    st = reward.stages["equivalence"]
    keep = (
        "equivalence",
        "formal",
        "first_mismatch_cycle",
        "output_bits_mismatched",
        "bit_credit",
        "sim_cycles",
    )
    return reward.total, st.status.value, {k: st.metrics.get(k) for k in keep}


@pytest.fixture
def simulations(monkeypatch):
    """Every simulation the stage runs: (task id, side, the stimulus file's text, whether the trace was kept)."""
    seen: list[tuple[str, str, str, bool]] = []
    simulate = EquivalenceStage._simulate

    def recording(self, ctx, work, side, files, plan, stim, timeout, stim_hex, **kw):
        got = simulate(self, ctx, work, side, files, plan, stim, timeout, stim_hex, **kw)
        seen.append((ctx.task.id, side, stim_hex, got.kept))
        RUNS.append((side, plan, stim, got.trace))
        return got

    monkeypatch.setattr(EquivalenceStage, "_simulate", recording)
    rtlreward_equivalence._GOLD_TRACES.clear()
    yield seen
    rtlreward_equivalence._GOLD_TRACES.clear()


def test_the_samples_of_a_task_share_its_random_runs_and_the_reference_runs_them_once(
    tmp_path, monkeypatch, simulations
):
    monkeypatch.setenv("RTLREWARD_CACHE_DIR", str(tmp_path / "cache"))
    groups = _groups()
    with Engine("equiv", cache=False, jobs=1, workspace_root=tmp_path / "ws") as eng:
        kept = [[_seen(eng.score(task, files)) for files in answers] for task, answers in groups]
        first = list(simulations)
        # every sample afresh: the reference simulated for each one
        fresh = []
        for task, answers in groups:
            row = []
            for files in answers:
                rtlreward_equivalence._GOLD_TRACES.clear()
                row.append(_seen(eng.score(task, files)))
            fresh.append(row)
    assert kept == fresh  # a kept trace is the trace: the same rewards, verdicts and first differences
    runs_of = {}
    for task, answers in groups:
        gold = [(hexed, k) for tid, side, hexed, k in first if tid == task.id and side == "gold"]
        gate = [hexed for tid, side, hexed, _ in first if tid == task.id and side == "gate"]
        assert len(gate) >= len(answers) - 1  # the truncated answers aside, each sample simulated
        task_runs = runs_of[task.id] = gold[0][0]
        # the first simulation of every sample (the ones a counterexample replay follows included) is on the
        # task's own random runs, and the reference ran them once: the first sample's run, kept for the others
        assert sum(h == task_runs for h in gate) >= len(answers), (task.id, len(gate))
        assert [k for h, k in gold if h == task_runs] == [False] + [True] * (len(answers) - 1)
        # runs with a replay in front are the answer's own: never kept, never served from the kept traces
        assert not any(k for h, k in gold if h != task_runs)
    assert len(set(runs_of.values())) == len(groups)  # each task its own runs


def test_a_trace_is_kept_only_from_a_run_before_the_answer_ran(tmp_path, monkeypatch, simulations):
    """Under `formal-first` a counterexample's replay comes first: that run's stimulus is the answer's own, and the
    reference's trace of it is not kept; a proved answer's simulation (the task's runs, nothing of the answer run
    before it) is."""
    from rtlreward_hdl.mutate import mutants

    monkeypatch.setenv("RTLREWARD_CACHE_DIR", str(tmp_path / "cache"))
    task = load_tasks("verilog-eval", skip_known_issues=True, limit=60)[15]
    wrong = next(iter(mutants(dict(task.reference), limit=1)[0].files.values()))
    ref = next(iter(task.reference.values()))
    with Engine(FORMAL_FIRST, cache=False, jobs=1, workspace_root=tmp_path / "ws") as eng:
        eng.score(task, {"TopModule.sv": ref})  # the task's one-time costs (the engine's calibration run)
        rtlreward_equivalence._GOLD_TRACES.clear()
        st = eng.score(task, {"TopModule.sv": wrong}).stages["equivalence"]
        assert st.metrics["formal"] == "cex", st.metrics
        assert rtlreward_equivalence._GOLD_TRACES.values() == []
        ok = eng.score(task, {"TopModule.sv": "// again\n" + ref}).stages["equivalence"]
        assert ok.metrics["equivalence"] == "proved"
        assert len(rtlreward_equivalence._GOLD_TRACES.values()) == 1
    # simulation first, the same wrong answer: its random runs come first (kept), then the replay (not kept)
    with Engine("equiv", cache=False, jobs=1, workspace_root=tmp_path / "ws2") as eng:
        eng.score(task, {"TopModule.sv": ref})
        rtlreward_equivalence._GOLD_TRACES.clear()
        simulations.clear()
        st = eng.score(task, {"TopModule.sv": wrong}).stages["equivalence"]
    gold = [(h, k) for _, side, h, k in simulations if side == "gold"]
    assert len(rtlreward_equivalence._GOLD_TRACES.values()) == 1
    if st.metrics.get("formal") == "cex":  # a mutant with credit to pay: proved after the random runs
        assert len(gold) == 2 and gold[0][0] != gold[1][0]


def _lookup_table(plan, stim, trace, blocker: bool) -> str:
    """A combinational answer that knows nothing of the function: the reference's outputs for each input vector the
    task's runs drive, 0 elsewhere; `blocker` keeps the proof from running (a backtick in a string the proof's view
    cannot read, the answer's own problem)."""
    width_in = sum(p.width or 1 for p in plan.inputs)
    width_out = sum(p.width or 1 for p in plan.outputs)
    table = {}
    for c in range(stim.compare_from, len(stim)):
        if trace.samples[c] is not None:
            key = 0
            for p, v in zip(plan.inputs, stim.vectors[c], strict=True):
                key = (key << (p.width or 1)) | v
            table[key] = "".join(trace.samples[c]).replace("x", "0").replace("z", "0")
    ports = [f"input [{(p.width or 1) - 1}:0] {p.name}" for p in plan.inputs]
    ports += [f"output reg [{(p.width or 1) - 1}:0] {p.name}" for p in plan.outputs]
    ins = "{" + ", ".join(p.name for p in plan.inputs) + "}"
    outs = "{" + ", ".join(p.name for p in plan.outputs) + "}"
    lines = [f"module {plan.top}({', '.join(ports)});", "  always @* begin", f"    case ({ins})"]
    lines += [f"      {width_in}'d{k}: {outs} = {width_out}'b{v};" for k, v in sorted(table.items())]
    lines += [f"      default: {outs} = {width_out}'d0;", "    endcase", "  end"]
    if blocker:
        lines.append('  initial if (0) $display("`");')
    return "\n".join([*lines, "endmodule", ""])


@pytest.mark.parametrize("blocker", [False, True], ids=["proved-against", "proof-skipped"])
def test_an_answer_that_matches_only_the_tasks_runs_earns_what_a_stub_earns(
    tmp_path, monkeypatch, simulations, blocker
):
    """The task's inputs are the same for every sample and can be learned (from feedback) or computed (from the
    task), so they settle only a pass (with a proof) or nothing: a lookup table of the reference's outputs on them
    (an 8-bit adder, ~1% of its inputs) is paid neither the undecided share nor output-bit credit, with the proof
    refuting it or kept from running. (Before the fix: 0.35 and 0.325 where a stub earns 0.1.)"""
    from rtlreward_hdl.stubs import stub_designs

    monkeypatch.setenv("RTLREWARD_CACHE_DIR", str(tmp_path / "cache"))
    task = next(
        t for t in load_tasks("verilog-eval", skip_known_issues=True, limit=60) if t.id.startswith("Prob033")
    )
    with Engine("equiv", cache=False, jobs=1, workspace_root=tmp_path / "ws") as eng:
        RUNS.clear()
        assert eng.score(task, dict(task.reference)).passed
        _, plan, stim, trace = next(r for r in RUNS if r[0] == "gold")
        table = _lookup_table(plan, stim, trace, blocker)
        # the table is right on every cycle of the task's runs
        RUNS.clear()
        got = eng.score(task, {"TopModule.sv": table})
        stub = eng.score(task, dict(stub_designs(task)["zeros"]))
    assert got.total <= stub.total, (got.total, stub.total, got.stages["equivalence"].feedback)
    assert got.stages["equivalence"].metrics["equivalence"] == "refuted"
    first = [(side, st) for side, _, st, _ in RUNS]
    if not blocker:  # the task's runs came first and did not refute it: the proof did, then its own runs
        assert first[0][0] == "gold" and first[1][0] == "gate" and first[0][1] == stim


def test_an_answers_own_runs_are_seeded_from_all_of_its_text(tmp_path, monkeypatch, simulations):
    """Where the answer's own runs decide (here: a mutant whose proof finds a counterexample), their inputs come from
    `answer_seed`, 256 bits of the task and the answer's files: the same answer twice gets the same runs, a comment
    more gets others (a 31-bit seed could be ground to a chosen value by changing a comment)."""
    from rtlreward_equivalence import answer_seed, diffsim

    monkeypatch.setenv("RTLREWARD_CACHE_DIR", str(tmp_path / "cache"))
    task = next(
        t for t in load_tasks("verilog-eval", skip_known_issues=True, limit=60) if t.id.startswith("Prob033")
    )
    ref = next(iter(task.reference.values()))
    wrong = ref.replace("a[7] != s[7]", "a[7] == s[7]")
    assert wrong != ref
    runs = []
    with Engine(FORMAL_FIRST, cache=False, jobs=1, workspace_root=tmp_path / "ws") as eng:
        for text in (wrong, wrong, "// again\n" + wrong):
            RUNS.clear()
            st = eng.score(task, {"TopModule.sv": text}).stages["equivalence"]
            assert st.metrics["formal"] == "cex", st.metrics
            _, plan, stim, _ = [r for r in RUNS if r[0] == "gate"][-1]  # the calibration's run comes first
            runs.append(stim)
            own = diffsim.random_stimulus(plan, answer_seed(task, {"TopModule.sv": text}))
            assert stim.vectors[len(stim) - len(own) :] == own.vectors  # after the counterexample's replay
    assert runs[0] == runs[1] and runs[0].vectors != runs[2].vectors
    assert answer_seed(task, {"TopModule.sv": wrong}).bit_length() > 200
