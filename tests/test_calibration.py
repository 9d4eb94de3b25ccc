"""Calibrated limits by default (rtlreward.calibration): a task's reference, timed once through the engine's own
stages, sets each stage's per-command limit, so an answer that never ends costs seconds, not the profile's
minute. Real Icarus on VerilogEval problems, the real engine and local executor."""

from __future__ import annotations

import json
import threading

import attrs
import pytest
from verilog_eval_helpers import VE_DATA, needs_verilog_eval, run_harness

from rtlreward import hookimpl
from rtlreward.calibration import FACTOR, FLOOR, Calibrator, cpu_limit, limits_from
from rtlreward.engine import Engine
from rtlreward.health import STAGE_LIMITS
from rtlreward.model import Reward, StageResult, Status
from rtlreward.plugins import make_plugin_manager
from rtlreward_verilog_eval.dataset import VerilogEvalDataset

pytestmark = needs_verilog_eval

LOOP = """
module TopModule (
  input clk,
  input reset,
  output reg [3:0] q
);
  logic spin;
  initial begin
    spin = 1'b0;
    forever spin = ~spin;  // no delay: simulation time never advances
  end
  always @(posedge clk) if (reset) q <= 4'd1; else if (q == 4'd10) q <= 4'd1; else q <= q + 4'd1;
endmodule
"""


class Seen:
    """Records every stage result the engine reports to plugins."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stages: list[tuple[str, str]] = []

    @hookimpl
    def rtlreward_stage_finished(self, task, candidate, result):
        with self.lock:
            self.stages.append((task.id, result.name))


@pytest.fixture(scope="module")
def counter():
    return VerilogEvalDataset().load(VE_DATA, ids="Prob035_count1to10")[0]


@pytest.fixture()
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RTLREWARD_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "calibration"


def _entries(cache_dir):
    return [json.loads(p.read_text()) for p in cache_dir.rglob("*.json")]


def test_a_zero_delay_loop_is_cut_at_the_limit_the_reference_calibrated(counter, cache_dir, tmp_path):
    seen = Seen()
    reg = make_plugin_manager(extra_plugins={"seen": seen})
    with Engine("strict", cache=False, jobs=1, registry=reg, workspace_root=tmp_path / "ws") as eng:
        reward = eng.score(counter, {"TopModule.sv": LOOP})
    tests = reward.stages["tests"]
    assert tests.status is Status.TIMEOUT, tests
    (entry,) = _entries(cache_dir)
    assert entry["reference_passed"] is True
    limit = entry["limits"]["tests"]
    # 10x the reference's own time in the stage, at least 2 s; far below VerilogEval's 30 s simulation limit.
    assert limit == round(max(FLOOR, FACTOR * entry["durations"]["tests"]), 2) and limit < 30
    note = next(d for d in tests.diagnostics if d.code == "calibrated-limit")
    assert f"{limit:g} s per command ({cpu_limit(limit):g} s of CPU for a simulation)" in note.message
    assert tests.duration < 30  # the profile's limit would have waited out VerilogEval's 30 s
    # The reference timed for the limits is no candidate: plugins saw one candidate's stages, once each.
    assert sorted(name for _, name in seen.stages) == ["compile", "format", "safety", "tests"]


def test_a_calibrated_simulation_is_cut_at_its_cpu_time_long_before_its_wall_clock(counter, tmp_path):
    """Under a calibrated limit the engine also gives the simulation a CPU-time limit (`cpu_limit`, half the wall
    clock's): a loop that never advances time burns nothing but CPU, so it ends there, while the wall clock keeps
    its margin for a loaded machine. Here the wall clock allows 30 s."""
    hung = run_harness(counter, {"TopModule.sv": LOOP}, tmp_path / "loop", timeout=30.0, cpu_timeout=1.0)
    assert hung.status is Status.TIMEOUT, hung
    (said,) = [d for d in hung.diagnostics if d.code == "timeout"]
    assert "within 1 s of CPU time" in said.message
    assert hung.duration < 15  # the wall clock's 30 s never came
    # The reference itself runs to its verdict under the same limits.
    ok = run_harness(counter, dict(counter.reference), tmp_path / "ref", timeout=30.0, cpu_timeout=1.0)
    assert ok.passed, ok


def test_the_measurement_is_made_once_per_task_and_kept_on_disk(counter, cache_dir, tmp_path):
    with Engine("strict", cache=False, jobs=2, workspace_root=tmp_path / "ws") as eng:
        calls = []
        measure = eng._measure_reference
        eng._measure_reference = lambda *a: calls.append(a) or measure(*a)
        ref = counter.reference["TopModule.sv"]
        replies = [{"TopModule.sv": ref.replace("endmodule", f"// {i}\nendmodule")} for i in range(4)]
        rewards = eng.score_batch([(counter, r) for r in replies])
    assert all(r.passed for r in rewards) and len(calls) == 1
    assert len(_entries(cache_dir)) == 1
    with Engine("strict", cache=False, jobs=1, workspace_root=tmp_path / "ws") as again:
        again._measure_reference = lambda *a: pytest.fail("measured again despite the entry on disk")
        assert again.score(counter, replies[0]).passed


def test_scoring_the_reference_itself_is_the_measurement(counter, cache_dir, tmp_path):
    with Engine("strict", cache=False, jobs=1, workspace_root=tmp_path / "ws") as eng:
        eng._measure_reference = lambda *a: pytest.fail("the reference was run twice")
        assert eng.score(counter, dict(counter.reference)).passed
    (entry,) = _entries(cache_dir)
    assert set(entry["limits"]) == {"format", "safety", "compile", "tests"}


def test_a_health_report_wins_and_calibrate_false_keeps_the_profile(counter, cache_dir, tmp_path):
    reported = attrs.evolve(counter, metadata={**counter.metadata, STAGE_LIMITS: {"tests": 7.5}})
    with Engine("strict", cache=False, jobs=1, workspace_root=tmp_path / "ws") as eng:
        eng._measure_reference = lambda *a: pytest.fail("measured despite the health report")
        assert eng._settings("tests", eng.stages["tests"], reported, eng._limits(reported, "fp"))[0] == 7.5
    with Engine("strict", cache=False, jobs=1, calibrate=False, workspace_root=tmp_path / "ws") as off:
        assert off.calibrator is None and off._limits(counter, counter.fingerprint()) == {}
        assert off.score(counter, dict(counter.reference)).passed
    assert _entries(cache_dir) == []


def test_a_reference_that_fails_calibrates_nothing(counter, cache_dir, tmp_path):
    broken = attrs.evolve(
        counter, reference={"TopModule.sv": counter.reference["TopModule.sv"].replace("10", "9")}
    )
    with Engine("strict", cache=False, jobs=1, workspace_root=tmp_path / "ws") as eng:
        assert eng._limits(broken, broken.fingerprint()) == {}
        # remembered in this process ...
        eng._measure_reference = lambda *a: pytest.fail("measured twice in one process")
        assert eng._limits(broken, broken.fingerprint()) == {}
    # ... not on disk: a failure may be the machine's or a bug's, and the next process measures again
    assert _entries(cache_dir) == []
    with Engine("strict", cache=False, jobs=1, workspace_root=tmp_path / "ws") as again:
        calls = []
        measure = again._measure_reference
        again._measure_reference = lambda *a: calls.append(a) or measure(*a)
        assert again._limits(broken, broken.fingerprint()) == {} and len(calls) == 1


def test_limits_from_leaves_out_cached_failed_and_self_budgeted_stages():
    class Own:
        calibrate = False

    class Plain:
        pass

    def res(name, status=Status.PASSED, duration=0.5, cached=False):
        return StageResult(name=name, status=status, score=1.0, duration=duration, cached=cached)

    reward = Reward(
        total=1.0,
        profile="p",
        passed=True,
        max_total=1.0,
        stages={
            "tests": res("tests", duration=0.5),
            "lint": res("lint", duration=0.01),
            "equivalence": res("equivalence"),
            "compile": res("compile", cached=True),
            "interface": res("interface", status=Status.FAILED),
        },
    )
    stages = {n: Plain() for n in ("tests", "lint", "compile", "interface")} | {"equivalence": Own()}
    assert limits_from(reward, stages) == {"tests": 5.0, "lint": FLOOR}
    assert limits_from(attrs.evolve(reward, passed=False), stages) == {}
    cal = Calibrator(stages, directory=None)
    assert cal.key("a", {"x": 1}) != cal.key("b", {"x": 1}) != cal.key("a", {"x": 2})


def test_the_measurement_runs_every_stage_even_when_the_result_cache_holds_the_reference(
    counter, cache_dir, tmp_path
):
    db = tmp_path / "results.sqlite"
    with Engine("strict", cache=db, jobs=1, calibrate=False, workspace_root=tmp_path / "ws") as warm:
        assert warm.score(counter, dict(counter.reference)).passed  # the reference's results now in the cache
    with Engine("strict", cache=db, jobs=1, workspace_root=tmp_path / "ws") as eng:
        variant = {"TopModule.sv": "// another\n" + counter.reference["TopModule.sv"]}
        assert eng.score(counter, variant).passed
    (entry,) = _entries(cache_dir)
    # Cached durations are another run's: the measurement ran each stage itself, so each one is calibrated.
    assert set(entry["limits"]) == {"format", "safety", "compile", "tests"}, entry


def test_a_calibrated_limit_does_not_split_the_result_cache(counter, cache_dir, tmp_path):
    db = tmp_path / "results.sqlite"
    variant = {"TopModule.sv": "// cached\n" + counter.reference["TopModule.sv"]}
    with Engine("strict", cache=db, jobs=1, workspace_root=tmp_path / "ws") as calibrated:
        assert calibrated.score(counter, variant).passed
    assert _entries(cache_dir)[0]["limits"]["tests"] < 30  # it ran under a calibrated limit
    # The same answer under the profile's own limits is served from the cache: the limit only cuts runs short.
    with Engine("strict", cache=db, jobs=1, calibrate=False, workspace_root=tmp_path / "ws") as plain:
        again = plain.score(counter, variant)
    assert again.passed and all(r.cached for r in again.stages.values()), again.stages
