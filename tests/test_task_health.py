"""Task health (`rtlreward tasks check`): references that fail their harness are `broken` with a cause, harnesses
that pass a real bug are found, mutants are single-site and deterministic, and the report drives task selection and
calibrated time limits. Real Icarus and cocotb; the equivalence stage where it is installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rtlreward.health import HealthReport, load_report
from rtlreward.integration import load_tasks
from rtlreward_hdl.mutate import mutants

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "RTLREWARD_CACHE_DIR": str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "rtlreward", "tasks", "check", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )


def test_mutants_change_one_site_each_and_are_deterministic():
    ref = (EXAMPLES / "counter" / "reference" / "counter.sv").read_text()
    first = mutants({"rtl/counter.sv": ref}, limit=8)
    again = mutants({"rtl/counter.sv": ref}, limit=8)
    assert [m.describe() for m in first] == [m.describe() for m in again]
    assert len(first) == 8
    assert {m.operator for m in first} >= {"stuck_output", "stuck_input", "condition", "reset", "binop"}
    for m in first:
        text = m.files["rtl/counter.sv"]
        assert text != ref
        changed = [
            i for i, (a, b) in enumerate(zip(ref.splitlines(), text.splitlines(), strict=True)) if a != b
        ]
        if m.operator.startswith(
            "stuck_"
        ):  # one port, wherever the body reads or drives it; never the header
            assert changed and changed[0] == m.line - 1 and min(changed) > 9, m.describe()
            assert m.before in ref.splitlines()[changed[0]]
        else:
            assert changed == [m.line - 1], m.describe()


def test_mutants_leave_declarations_comments_and_widths_alone():
    design = (
        "module m(input [7:0] a, input rst, output reg [7:0] y); // 1 + 1\n"
        "  localparam W = 8;\n"
        "  /* if (x) */ always @* y = a + 8'd3;\n"
        "endmodule\n"
    )
    ms = mutants({"m.v": design}, limit=50)
    assert ms, "the assignment has mutable sites"
    for m in ms:
        assert m.line == 3, m.describe()  # never the port list, the parameter, or the comment
        assert "/* if (x) */" in m.files["m.v"]


@pytest.fixture()
def health_examples(tmp_path):
    """The bundled counter and arbiter, plus a copy of the counter whose reference ignores `load`: its own
    harness fails it, so the task is broken."""
    root = tmp_path / "tasks"
    for name in ("counter", "fixed_priority_arbiter"):
        shutil.copytree(EXAMPLES / name, root / name)
    broken = root / "counter_broken"
    shutil.copytree(EXAMPLES / "counter", broken)
    toml = (broken / "task.toml").read_text().replace('id = "counter"', 'id = "counter_broken"')
    (broken / "task.toml").write_text(toml)
    ref = broken / "reference" / "counter.sv"
    bad = ref.read_text().replace("if (load)", "if (1'b0)")
    assert bad != ref.read_text()
    ref.write_text(bad)
    return root


def test_tasks_check_reports_broken_references_with_their_cause_and_calibrated_limits(
    health_examples, tmp_path
):
    out = tmp_path / "health.json"
    res = _cli(
        str(health_examples), "--seeds", "2", "--mutants", "3", "--out", str(out), cache=tmp_path / "c"
    )
    assert res.returncode == 0, res.stderr
    assert "counter_broken" in res.stdout and "broken" in res.stdout
    report = load_report(out)
    broken = report.tasks["counter_broken"]
    assert broken["status"] == "broken"
    assert broken["reference_passes"] == "0/2"
    assert "tests failed" in broken["cause"] and broken["time_limits"] == {}
    for name in ("counter", "fixed_priority_arbiter"):
        entry = report.tasks[name]
        assert entry["reference_passes"] == "2/2", entry
        assert entry["status"] in ("ok", "weak", "unchecked"), entry
        assert entry["mutants_tried"] == 3
        # Calibrated: max(floor, factor x the median reference run of each stage).
        for stage, seconds in entry["stage_seconds"].items():
            assert entry["time_limits"][stage] == pytest.approx(max(3.0, 5.0 * seconds), abs=0.02)
        assert "tests" in entry["time_limits"]
    assert report.toolchain and any(k.startswith("tests/") for k in report.toolchain)
    assert all(e["tools"] == report.toolchain for e in report.tasks.values() if "tools" in e)

    # Selecting tasks for training skips the broken one, with its reason.
    tasks = load_tasks(str(health_examples))
    kept, skipped = report.select(tasks)
    assert {t.id for t in kept} == {"counter", "fixed_priority_arbiter"}
    assert [(t.id, why.split(":")[0]) for t, why in skipped] == [("counter_broken", "broken")]
    assert set(report.time_limits()) == {"counter", "fixed_priority_arbiter"}
    calibrated = {t.id: t for t in report.calibrate(tasks)}
    assert calibrated["counter"].metadata["stage_limits"] == report.tasks["counter"]["time_limits"]
    assert "stage_limits" not in calibrated["counter_broken"].metadata

    # A second check of the same tasks and tools is answered from the cache.
    again = _cli(str(health_examples), "--seeds", "2", "--mutants", "3", "--json", cache=tmp_path / "c")
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert all(e.get("cached") for e in doc["tasks"])


def test_a_harness_that_misses_a_bug_is_found(tmp_path):
    """A harness that only checks the reset value passes mutants that break counting: the check names one."""
    root = tmp_path / "weak_counter"
    shutil.copytree(EXAMPLES / "counter", root)
    (root / "test_counter.py").write_text(
        "import cocotb\n"
        "from cocotb.clock import Clock\n"
        "from cocotb.triggers import RisingEdge\n\n"
        "@cocotb.test()\n"
        "async def reset_only(dut):\n"
        "    cocotb.start_soon(Clock(dut.clk, 10, 'ns').start())\n"
        "    dut.rst_n.value = 0\n"
        "    dut.en.value = 0\n"
        "    dut.load.value = 0\n"
        "    dut.d.value = 0\n"
        "    await RisingEdge(dut.clk)\n"
        "    await RisingEdge(dut.clk)\n"
        "    assert int(dut.q.value) == 0\n"
    )
    out = tmp_path / "h.json"
    res = _cli(str(root), "--seeds", "1", "--mutants", "6", "--out", str(out), cache=tmp_path / "c")
    assert res.returncode == 0, res.stderr
    entry = load_report(out).tasks["counter"]
    assert entry["status"] in ("weak", "unchecked"), entry  # unchecked only without an equivalence stage
    assert entry["surviving_mutants"], entry
    assert "rtl/counter.sv:" in entry["surviving_mutants"][0]["mutant"]
    assert entry["harness_strength"] is not None and entry["harness_strength"] < 1.0
    # A do-nothing design passes this harness: the report says so; under `equiv` a stub earns format only.
    assert any(c.startswith("shaped: the zeros stub passes tests") for c in entry["stub_credit"]), entry
    assert entry["stub_rewards"]["shaped"]["zeros"] == pytest.approx(1.6)
    if "equiv" in entry["stub_rewards"]:
        assert max(entry["stub_rewards"]["equiv"].values()) == pytest.approx(0.1)
        assert entry["formal"] == "proves"  # the reference proves against a renamed copy of itself


def test_load_report_refuses_a_file_that_is_not_a_report(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"rows": []}')
    with pytest.raises(ValueError, match="tasks check"):
        load_report(bad)
    with pytest.raises(ValueError, match="cannot read"):
        load_report(tmp_path / "missing.json")
    assert HealthReport("d", {}, {}).select([]) == ([], [])


def test_a_calibrated_limit_cuts_a_hung_candidate_in_seconds(tmp_path):
    """The engine applies a task's calibrated limit as the stage's per-command timeout when it is shorter than
    the profile's: the zero-delay loop ends as a timeout after about the calibrated seconds, not the minute."""
    import attrs

    from rtlreward.engine import Engine

    task = load_tasks(str(EXAMPLES / "fixed_priority_arbiter"))[0]
    calibrated = attrs.evolve(task, metadata={**task.metadata, "stage_limits": {"tests": 2.0}})
    hung = (EXAMPLES / "fixed_priority_arbiter" / "completions" / "forever_loop.txt").read_text()
    with Engine("shaped", cache=False) as engine:
        reward = engine.score(calibrated, hung)
        tests = reward.stages["tests"]
        assert tests.status.value == "timeout", tests
        assert tests.duration < 20.0  # the stage's default is 60 s per command
        timeout, deadline, _, _ = engine._settings("tests", engine.stages["tests"], calibrated)
        assert timeout == 2.0 and deadline == 2.0 * 3 + 30
        # A calibrated limit longer than the profile's never lengthens it.
        longer = attrs.evolve(task, metadata={"stage_limits": {"tests": 1e6}})
        assert engine._settings("tests", engine.stages["tests"], longer)[0] == 60.0


def test_eval_with_a_health_report_skips_broken_tasks_by_name_and_applies_limits(health_examples, tmp_path):
    report = {
        "schema": 1,
        "dataset": "examples",
        "toolchain": {},
        "tasks": [
            {"id": "counter_broken", "status": "broken", "cause": "tests failed: 3/5", "time_limits": {}},
            {"id": "counter", "status": "ok", "cause": "", "time_limits": {"tests": 30.0}},
        ],
    }
    path = tmp_path / "health.json"
    path.write_text(json.dumps(report))
    env = {**os.environ, "RTLREWARD_CACHE_DIR": str(tmp_path / "c")}
    base = [sys.executable, "-m", "rtlreward", "eval", str(health_examples), "--reference"]
    res = subprocess.run(
        [
            *base,
            "--health",
            str(path),
            "--skip-broken",
            "--out",
            str(tmp_path / "r.jsonl"),
            "--summary-json",
            str(tmp_path / "s.json"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr
    assert "skipped counter_broken: broken: tests failed: 3/5" in " ".join(res.stderr.split())
    lines = (tmp_path / "r.jsonl").read_text().splitlines()[1:]  # after the settings header
    rows = [json.loads(line) for line in lines if line.strip()]
    assert {r["id"] for r in rows} == {"counter", "fixed_priority_arbiter"}
    # A file that is not a report is a one-line usage error, not a traceback.
    bad = subprocess.run(
        [*base, "--health", str(tmp_path / "nope.json")], capture_output=True, text=True, env=env, timeout=120
    )
    assert bad.returncode == 2 and "tasks check" in bad.stderr and "Traceback" not in bad.stderr


def test_the_official_lfsr_harness_is_weak_and_the_report_names_the_mutants_it_passes(tmp_path):
    """The official CVDP LFSR harness passes a design whose output is constant 0 and one that ignores its seed;
    the equivalence stage refutes both, so the task is `weak` and the report shows them."""
    from rtlreward.plugins import get_registry

    if "equivalence" not in get_registry().stages():
        pytest.skip("the equivalence stage is not installed")
    data = ROOT / "cvdp_adapter" / "data"
    dataset = next(data.glob("*nonagentic*with_solutions.jsonl"))
    out = tmp_path / "h.json"
    res = _cli(
        str(dataset), "--id", "cvdp_copilot_lfsr_0001", "--seeds", "1", "--out", str(out), cache=tmp_path
    )
    assert res.returncode == 0, res.stderr
    entry = load_report(out).tasks["cvdp_copilot_lfsr_0001"]
    assert entry["status"] == "weak", entry
    survivors = " ".join(s["mutant"] for s in entry["surviving_mutants"])
    assert "stuck_output: `lfsr_out`" in survivors and "stuck_input: `lfsr_seed`" in survivors
    assert all(s["equivalence"] == "refuted" and s["counterexample"] for s in entry["surviving_mutants"])
    assert entry["mutants_killed"] >= 1  # the harness is not blind: it fails the other bugs


@pytest.mark.parametrize("dataset", ["verilog-eval", "rtllm"])
def test_references_that_fail_under_the_installed_icarus_are_broken_with_their_cause(dataset, tmp_path):
    """Every benchmark reference known to fail here is reported `broken` with a cause; a sound one is not."""
    import importlib

    module = {"verilog-eval": "rtlreward_verilog_eval.dataset", "rtllm": "rtlreward_rtllm.dataset"}[dataset]
    known = importlib.import_module(module).KNOWN_REFERENCE_FAILURES
    try:
        tasks = load_tasks(dataset)
    except ValueError:
        pytest.skip(f"{dataset} data not found beside the project")
    ids = sorted(known)
    sound = next(t.id for t in tasks if t.id not in known)
    out = tmp_path / "h.json"
    args = [dataset, "--seeds", "1", "--mutants", "0", "--out", str(out)]
    for i in [*ids, sound]:
        args += ["--id", i]
    res = _cli(*args, cache=tmp_path)
    assert res.returncode == 0, res.stderr
    report = load_report(out)
    for i in ids:
        entry = report.tasks[i]
        assert entry["status"] == "broken", entry
        assert entry["cause"] and entry["cause"] != "not passed", entry
    assert report.tasks[sound]["status"] == "ok", report.tasks[sound]


def test_train_skips_broken_tasks_by_default_and_calibrates_the_rest(health_examples, tmp_path, capsys):
    """The trainers' task list reads the same report: broken tasks are left out (named on stderr) unless
    `keep_broken`, and the kept ones carry their calibrated limits; `train rl --health` passes it through."""
    pytest.importorskip("tinker_cookbook")
    from rtlreward_tinker.env import load_task_list

    path = tmp_path / "health.json"
    path.write_text(
        json.dumps(
            {
                "schema": 1,
                "dataset": "examples",
                "toolchain": {},
                "tasks": [
                    {"id": "counter_broken", "status": "broken", "cause": "tests failed", "time_limits": {}},
                    {"id": "counter", "status": "ok", "cause": "", "time_limits": {"tests": 9.0}},
                ],
            }
        )
    )
    tasks = load_task_list(str(health_examples), health=str(path))
    assert sorted(t.id for t in tasks) == ["counter", "fixed_priority_arbiter"]
    assert "skipped counter_broken: broken: tests failed" in capsys.readouterr().err
    by_id = {t.id: t for t in tasks}
    assert by_id["counter"].metadata["stage_limits"] == {"tests": 9.0}
    kept = load_task_list(str(health_examples), health=str(path), keep_broken=True)
    assert "counter_broken" in {t.id for t in kept}
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtlreward",
            "train",
            "rl",
            str(health_examples),
            "--health",
            str(path),
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RTLREWARD_CACHE_DIR": str(tmp_path)},
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["health"] == str(path)
