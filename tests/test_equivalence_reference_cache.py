"""The reference's side of the equivalence proof is read, elaborated and x-encoded by Yosys once per task and kept
as RTLIL (`EquivalenceStage._gold_rtlil`): later proofs read that back instead of the reference's text, with the
same outcomes as the full script on VerilogEval references, mutants and stubs."""

from __future__ import annotations

import pytest

import rtlreward_equivalence
from rtlreward.engine import Engine
from rtlreward.integration import load_tasks
from rtlreward_equivalence import warm


def _cases():
    from rtlreward_hdl.mutate import mutants
    from rtlreward_hdl.stubs import stub_designs

    out = []
    for task in load_tasks("verilog-eval", skip_known_issues=True, limit=60)[::4]:
        ref = next(iter(task.reference.values()))
        answers = [ref, *(next(iter(m.files.values())) for m in mutants(dict(task.reference), limit=2))]
        answers.append(next(iter(stub_designs(task)["ones"].values())))
        out += [(task, {"TopModule.sv": a}) for a in answers]
    return out


def _seen(reward):
    st = reward.stages["equivalence"]
    keep = ("equivalence", "formal", "formal_engine", "mismatches", "outputs_differing")
    return reward.total, st.status.value, {k: st.metrics.get(k) for k in keep}


def test_same_outcomes_with_the_reference_read_once(tmp_path, monkeypatch):
    monkeypatch.setenv("RTLREWARD_CACHE_DIR", str(tmp_path / "cache"))
    cases = _cases()
    jobs: list[tuple[str, ...]] = []
    prove = warm.WarmYosys.prove

    def recording(self, files, script, *a, **k):
        jobs.append(tuple(sorted(files)))
        return prove(self, files, script, *a, **k)

    monkeypatch.setattr(warm.WarmYosys, "prove", recording)
    # The proof first, so the mutants and stubs get one too (simulation first, the random runs refute most of them
    # before any proof).
    formal_first = {"extends": "equiv", "stage": {"equivalence": {"options": {"order": "formal-first"}}}}
    with Engine(formal_first, cache=False, jobs=1, workspace_root=tmp_path / "ws") as eng:
        rtlreward_equivalence._GOLD_RTLILS.clear()
        cached = [_seen(eng.score(t, f)) for t, f in cases]
        with_rtlil = sum(rtlreward_equivalence.GOLD_RTLIL in j for j in jobs)
        monkeypatch.setattr(rtlreward_equivalence.EquivalenceStage, "_gold_rtlil", lambda *a: (None, 0.0))
        jobs.clear()
        full = [_seen(eng.score(t, f)) for t, f in cases]
        assert not any(rtlreward_equivalence.GOLD_RTLIL in j for j in jobs)
    differ = [(c[0].id, a, b) for c, a, b in zip(cases, cached, full, strict=True) if a != b]
    assert not differ, differ[:3]
    if (
        jobs
    ):  # a warm Yosys server ran the proofs (none without bubblewrap: the one-shot command reads the RTLIL)
        assert with_rtlil >= len(jobs) * 3 // 4
    assert {c[2]["formal"] for c in cached} >= {"proved", "cex"}


def test_a_reference_that_does_not_read_alone_keeps_the_full_scripts_message(tmp_path, monkeypatch):
    """A reference Yosys cannot read: no RTLIL is kept, and the proof's message is the full script's."""
    from rtlreward.model import Task

    monkeypatch.setenv("RTLREWARD_CACHE_DIR", str(tmp_path / "cache"))
    ref = "module top(input a, output y);\n  sub s(.a(a), .y(y));\nendmodule\n"  # `sub` is defined nowhere
    task = Task(id="no-sub", reference={"top.v": ref}, toplevel="top", expected_files=["top.v"])
    answer = {"top.v": "module top(input a, output y);\n  assign y = a;\nendmodule\n"}
    with Engine("equiv", cache=False, jobs=1, workspace_root=tmp_path / "ws") as eng:
        rtlreward_equivalence._GOLD_RTLILS.clear()
        st = eng.score(task, answer).stages["equivalence"]
    assert [v for v in rtlreward_equivalence._GOLD_RTLILS.values()] == [None]
    assert st.metrics.get("formal") == "error", st.metrics
    assert any("sub" in d.message for d in st.diagnostics), st.diagnostics


@pytest.fixture(autouse=True)
def _fresh():
    rtlreward_equivalence._GOLD_RTLILS.clear()
    yield
    rtlreward_equivalence._GOLD_RTLILS.clear()
