"""Engine: gating, concurrency, error isolation, deadlines, workspaces, files, seeds, observers, metrics."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import attrs
import engine_helpers as h
import pytest

from rtlreward import Candidate, Reward, Stage, Status, hookimpl
from rtlreward.engine import Engine, EngineError, derive_seed


@pytest.fixture
def engine():
    with Engine("shaped", registry=h.registry(), cache=False) as e:
        yield e


def statuses(reward: Reward) -> dict[str, str]:
    return {n: r.status.value for n, r in reward.stages.items()}


def test_good_candidate_gets_the_full_shaped_reward(engine):
    r = engine.score(h.task(), h.cand("module top; endmodule"))
    assert set(statuses(r).values()) == {"passed"}
    assert r.total == pytest.approx(1.6) and r.max_total == pytest.approx(1.6) and r.passed
    assert list(r.stages) == ["format", "safety", "interface", "lint", "compile", "tests"]
    assert r.files == {"rtl/top.sv": "module top; endmodule"}


def test_stage_whose_requirement_failed_is_skipped_and_not_run(engine):
    h.RUNS.clear()
    r = engine.score(h.task(), h.cand("module top; $system(1); endmodule"))
    assert statuses(r) == {
        "format": "passed",
        "safety": "failed",
        "interface": "skipped",
        "lint": "skipped",
        "compile": "skipped",
        "tests": "skipped",
    }
    assert all(r.stages[s].score == 0 for s in ("interface", "lint", "compile", "tests"))
    assert h.RUNS["lint"] == 0 and h.RUNS["tests"] == 0
    assert r.total == 0 and not r.passed  # the safety gate zeroes the format credit too
    assert "safety" in r.stages["tests"].feedback or "compile" in r.stages["tests"].feedback


def test_failed_format_skips_everything_after_it(engine):
    r = engine.score(h.task(), h.cand("BAD reply"))
    assert statuses(r)["format"] == "failed"
    assert {statuses(r)[s] for s in ("safety", "interface", "lint", "compile", "tests")} == {"skipped"}
    assert r.total == 0 and r.files == {}


def test_a_stage_that_raises_is_an_error_and_the_other_results_stand(engine):
    r = engine.score(h.task(), h.cand("module top; endmodule COMPILE_RAISE"))
    comp = r.stages["compile"]
    assert comp.status is Status.ERROR and comp.score == 0
    assert "RuntimeError: compile blew up" in comp.diagnostics[0].message
    assert statuses(r)["lint"] == "passed" and statuses(r)["interface"] == "passed"
    assert statuses(r)["tests"] == "skipped"
    # format 0.1 + interface 0.2; syntax needs compile to pass
    assert r.total == pytest.approx(0.3) and not r.passed


class _Barrier(Stage):
    """Three of these must be inside `run` at once to get past the barrier: proof they ran concurrently."""

    requires = ("format",)
    barrier: threading.Barrier

    def run(self, ctx):
        self.barrier.wait(timeout=10)
        return self.result(Status.PASSED, 1.0)


def test_independent_stages_run_concurrently():
    barrier = threading.Barrier(3)
    stages = []
    for n in ("a", "b", "c"):
        cls = type(f"S{n}", (_Barrier,), {"name": n, "barrier": barrier})
        stages.append(cls())

    class Plugin:
        @hookimpl
        def rtlreward_register_stages(self, register):
            for s in stages:
                register(s)

    reg = h.registry({"barrier": Plugin()})
    prof = {
        "name": "conc",
        "stages": ["format", "a", "b", "c"],
        "weights": {"a": 1, "b": 1, "c": 1},
        "verdict": "",
    }
    with Engine(prof, registry=reg, cache=False) as e:
        r = e.score(h.task(), h.cand("x"))
    # Run one after another, the first would wait at the barrier until its 10 s timeout and raise.
    assert statuses(r) == {"format": "passed", "a": "passed", "b": "passed", "c": "passed"}
    assert r.total == 3


def test_a_stuck_stage_ends_as_timeout_at_its_deadline_and_the_rest_is_kept():
    release = threading.Event()

    class Stuck(Stage):
        name = "stuck"
        requires = ("format",)

        def run(self, ctx):
            release.wait(30)
            return self.result(Status.PASSED, 1.0)

    class Plugin:
        @hookimpl
        def rtlreward_register_stages(self, register):
            register(Stuck())

    prof = {
        "name": "stuck",
        "stages": ["format", "safety", "lint", "stuck"],
        "weights": {"lint": 1, "stuck": 1},
        "verdict": "",
        "stage": {"stuck": {"timeout": 0.1, "deadline": 0.3}},
    }
    try:
        with Engine(prof, registry=h.registry({"stuck": Plugin()}), cache=False) as e:
            r = e.score(h.task(), h.cand("module top; endmodule"))
    finally:
        release.set()
    assert r.stages["stuck"].status is Status.TIMEOUT
    assert r.stages["stuck"].diagnostics[0].code == "engine-deadline"
    assert r.stages["lint"].status is Status.PASSED and r.total == 1


def test_profile_stage_settings_reach_the_context():
    prof = {"extends": "shaped", "stage": {"lint": {"timeout": 7, "options": {"level": "pedantic"}}}}
    with Engine(prof, registry=h.registry(), cache=False) as e:
        r = e.score(h.task(), h.cand("module top; endmodule"))
    assert r.stages["lint"].metrics["timeout"] == 7
    assert r.stages["lint"].metrics["options"] == {"level": "pedantic"}
    assert r.stages["compile"].metrics["options"] == {}


def test_seed_is_derived_from_task_and_files(engine):
    t = h.task()
    a1 = engine.score(t, h.cand("module top; endmodule"))
    a2 = engine.score(t, h.cand("module top; endmodule", sample=3))
    b = engine.score(t, h.cand("module top; endmodule // other"))
    other_task = engine.score(h.task("t2"), h.cand("module top; endmodule"))
    reworded = engine.score(attrs.evolve(t, prompt="said differently"), h.cand("module top; endmodule"))
    seed = a1.stages["lint"].metrics["seed"]
    assert seed == a2.stages["lint"].metrics["seed"] == derive_seed(t.stimulus_fingerprint(), a1.files)
    assert seed != b.stages["lint"].metrics["seed"]
    assert seed != other_task.stages["lint"].metrics["seed"]
    assert seed == reworded.stages["lint"].metrics["seed"]  # same checks, same answer: same stimulus
    assert 0 <= seed < 2**31


def test_workspace_is_private_and_removed(monkeypatch, tmp_path):
    seen: list[Path] = []

    class Peek(Stage):
        name = "peek"
        requires = ("format",)

        def run(self, ctx):
            (ctx.stage_dir("peek") / "x.txt").write_text("hi")
            seen.append(ctx.workspace)
            return self.result(Status.PASSED, 1.0)

    class Plugin:
        @hookimpl
        def rtlreward_register_stages(self, register):
            register(Peek())

    prof = {"name": "p", "stages": ["format", "peek"], "weights": {"peek": 1}, "verdict": "peek"}
    with Engine(prof, registry=h.registry({"peek": Plugin()}), cache=False, workspace_root=tmp_path) as e:
        e.score(h.task(), h.cand("a"))
        e.score(h.task(), h.cand("b"))
        assert len(set(seen)) == 2 and not any(p.exists() for p in seen)
        monkeypatch.setenv("RTLREWARD_KEEP_WORKSPACE", "1")
        e.score(h.task(), h.cand("c"))
    assert (seen[-1] / "peek" / "x.txt").read_text() == "hi"


def test_candidate_files_pass_through_format(engine):
    r = engine.score(h.task(), Candidate(files={"rtl/top.sv": "module top; endmodule"}))
    assert r.passed and r.files == {"rtl/top.sv": "module top; endmodule"}


def test_observers_see_every_stage_and_reward():
    rec = h.Recorder()
    with Engine("shaped", registry=h.registry({"rec": rec}), cache=False) as e:
        r = e.score(h.task(), h.cand("BAD"))
    assert sorted(n for _, n in rec.stages) == sorted(r.stages)
    assert rec.rewards == [r]


def test_a_raising_observer_does_not_cost_the_reward():
    class Broken:
        @hookimpl
        def rtlreward_reward_computed(self, task, candidate, reward):
            raise RuntimeError("observer bug")

    with (
        Engine("shaped", registry=h.registry({"broken": Broken()}), cache=False) as e,
        pytest.warns(UserWarning, match="observer"),
    ):
        r = e.score(h.task(), h.cand("module top; endmodule"))
    assert r.total == pytest.approx(1.6)


def test_metrics_have_the_flat_keys(engine):
    r = engine.score(h.task(), h.cand("module top; endmodule TESTS_HALF LINT_FAIL"))
    m = r.metrics
    assert m["format_valid"] == 1 and m["syntax_valid"] == 0 and m["interface_score"] == 1.0
    assert m["tests_passed"] == 2 and m["tests_total"] == 4
    assert m["reward/total"] == pytest.approx(0.1 + 0.2 + 0.5) == r.total
    assert m["reward/passed"] == 0 and m["reward/max"] == pytest.approx(1.6)
    assert m["stage/tests/score"] == 0.5 and m["stage/tests/status"] == "failed"
    assert m["stage/lint/passed"] == 0 and "stage/compile/duration" in m


def test_reward_json_round_trip(engine):
    r = engine.score(h.task(), h.cand("module top; endmodule TESTS_HALF"))
    back = Reward.from_dict(json.loads(r.to_json()))
    assert back.to_dict() == r.to_dict()
    assert back.total == r.total and back.stages["tests"].status is Status.FAILED


def test_ascore_matches_score(engine):
    async def go():
        return await asyncio.gather(
            *(engine.ascore(h.task(), h.cand(f"module top; endmodule // {i}")) for i in range(4))
        )

    rewards = asyncio.run(go())
    assert [r.total for r in rewards] == [pytest.approx(1.6)] * 4


def test_unknown_stage_in_profile_is_a_clear_error():
    prof = {"name": "x", "stages": ["format", "nonexistent"], "verdict": ""}
    with pytest.raises(EngineError, match=r"nonexistent.*no loaded plugin registers"):
        Engine(prof, registry=h.registry(), cache=False)


def test_unknown_executor_and_combiner_are_clear_errors():
    with pytest.raises(EngineError, match="unknown executor 'nope'"):
        Engine("shaped", executor="nope", registry=h.registry(), cache=False)
    with pytest.raises(EngineError, match="combiner 'fancy'"):
        Engine({"extends": "shaped", "combiner": "fancy"}, registry=h.registry(), cache=False)


def test_requirement_cycle_is_reported():
    class A(Stage):
        name = "ca"
        requires = ("cb",)

    class B(Stage):
        name = "cb"
        requires = ("ca",)

    class Plugin:
        @hookimpl
        def rtlreward_register_stages(self, register):
            register(A())
            register(B())

    with pytest.raises(EngineError, match="cycle"):
        Engine(
            {"name": "c", "stages": ["ca", "cb"], "verdict": ""},
            registry=h.registry({"c": Plugin()}),
            cache=False,
        )


def test_profile_can_replace_a_stages_requirements():
    text = "module top; endmodule COMPILE_FAIL"
    with Engine("shaped", registry=h.registry(), cache=False) as e:
        gated = e.score(h.task(), h.cand(text))
    prof = {"extends": "shaped", "stage": {"tests": {"requires": []}}}
    with Engine(prof, registry=h.registry(), cache=False) as e:
        assert e.requirements("tests") == ()
        ungated = e.score(h.task(), h.cand(text))
    assert gated.stages["tests"].status is Status.SKIPPED
    assert ungated.stages["tests"].status is Status.PASSED
    assert list(ungated.stages) == ["format", "safety", "interface", "lint", "compile", "tests"]
