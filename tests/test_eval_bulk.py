"""Bulk evaluation with the real engine and real tools (format + safety + Icarus compile, a fast profile):
results lines, resume, bad input lines, unknown ids, a kill mid-run, and the eval commands."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest
import typer
from cvdp_load_helpers import VENDORED
from typer.testing import CliRunner

from rtlreward.evaluate import Completion, evaluate, read_completions, read_results, summarize

QUICK_PROFILE = """
name = "quick"
description = "format + safety + compile (Icarus) only"
combiner = "weighted"
stages = ["format", "safety", "compile"]
gates = ["safety"]
verdict = "compile"
partial = []

[weights]
format = 0.1
compile = 1.0
"""

GOOD_LFSR = (
    "```verilog\nmodule lfsr_8bit(input clock, reset, input [7:0] lfsr_seed, output reg [7:0] lfsr_out);\n"
    "always @(posedge clock or negedge reset) if (!reset) lfsr_out <= lfsr_seed; else lfsr_out <= lfsr_out;\n"
    "endmodule\n```"
)
BROKEN = "```verilog\nmodule lfsr_8bit(input clock; endmodule oops\n```"


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    p = tmp_path_factory.mktemp("profile") / "quick.toml"
    p.write_text(QUICK_PROFILE)
    return p


@pytest.fixture(scope="module")
def tasks():
    from cvdp_adapter.tasks import load

    return load(str(VENDORED), interface=False)


@pytest.fixture(scope="module")
def engine(profile):
    from rtlreward.engine import Engine

    e = Engine(str(profile), cache=False, jobs=2)
    yield e
    e.close()


def lines(*objs) -> str:
    return "".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs)


def test_results_lines_samples_and_problems(tmp_path, tasks, engine):
    comp = tmp_path / "c.jsonl"
    comp.write_text(
        lines(
            {"id": "cvdp_copilot_lfsr_0001", "completion": GOOD_LFSR},
            {"id": "cvdp_copilot_lfsr_0001", "completion": BROKEN},
            "{this is not json",
            {"id": "no_such_task", "completion": "x"},
            {
                "id": "cvdp_agentic_fixed_arbiter_0001",
                "files": dict(next(t for t in tasks if t.reference and "arbiter" in t.id).reference),
            },
            {"id": "cvdp_copilot_lfsr_0001", "completion": ""},
            {"id": "cvdp_copilot_lfsr_0001"},
        )
    )
    warnings: list[str] = []
    out = tmp_path / "r.jsonl"
    s = evaluate(tasks, comp, engine, out_path=out, jobs=2, progress=False, warn=warnings.append)
    rows, problems = read_results(out)
    assert not problems
    got = {(r["id"], r["sample"]): r for r in rows}
    assert set(got) == {
        ("cvdp_copilot_lfsr_0001", 0),
        ("cvdp_copilot_lfsr_0001", 1),
        ("cvdp_copilot_lfsr_0001", 2),
        ("cvdp_agentic_fixed_arbiter_0001", 0),
    }
    assert got[("cvdp_copilot_lfsr_0001", 0)]["passed"] is True
    compile_ = got[("cvdp_copilot_lfsr_0001", 0)]["stages"]["compile"]
    assert (compile_["score"], compile_["status"], compile_["diagnostics"]) == (1.0, "passed", [])
    assert got[("cvdp_copilot_lfsr_0001", 1)]["passed"] is False
    assert (
        got[("cvdp_copilot_lfsr_0001", 1)]["stages"]["compile"]["status"] == "failed"
    )  # real iverilog said no
    assert got[("cvdp_copilot_lfsr_0001", 2)]["stages"]["format"]["status"] == "failed"  # empty reply
    assert got[("cvdp_agentic_fixed_arbiter_0001", 0)]["passed"] is True  # files pass through
    assert all(set(r) >= {"id", "sample", "reward", "passed", "stages"} for r in rows)
    assert (s.scored, s.resumed, s.unknown_ids, s.bad_lines, s.results) == (4, 0, 1, 2, 4)
    assert any(w.startswith("line 3: not valid JSON") for w in warnings)
    assert any("line 7" in w and "completion" in w for w in warnings)
    assert any("line 4: id 'no_such_task'" in w for w in warnings)
    assert s.categories["cid003"]["samples"] == 4 and s.categories["cid003"]["passed"] == 2
    assert s.passk["unbiased"][1] == (pytest.approx((1 / 3 + 1) / 2), 2)
    assert s.stages["compile"]["passed"] == 2 and s.stages["compile"]["skipped"] == 1


def test_resume_redoes_nothing_and_finishes_the_rest(tmp_path, tasks, engine):
    comp = tmp_path / "c.jsonl"
    all_lines = [
        {"id": "cvdp_copilot_lfsr_0001", "completion": GOOD_LFSR if i % 2 else BROKEN} for i in range(6)
    ]
    comp.write_text(lines(*all_lines[:3]))
    out = tmp_path / "r.jsonl"
    first = evaluate(tasks, comp, engine, out_path=out, progress=False, warn=lambda m: None)
    assert (first.scored, first.resumed) == (3, 0)
    # a killed writer leaves half a line behind: it is ignored and that pair is scored again
    with out.open("a") as fh:
        fh.write('{"id": "cvdp_copilot_lfsr_0001", "sample": 3, "rew')
    comp.write_text(lines(*all_lines))
    warnings: list[str] = []
    second = evaluate(tasks, comp, engine, out_path=out, progress=False, warn=warnings.append)
    assert (second.scored, second.resumed, second.results) == (3, 3, 6)
    assert any("unreadable result line" in w for w in warnings)
    rows, problems = read_results(out)
    assert sorted(r["sample"] for r in rows) == [0, 1, 2, 3, 4, 5] and len(problems) == 1
    third = evaluate(tasks, comp, engine, out_path=out, progress=False, warn=lambda m: None)
    assert (third.scored, third.resumed, third.results) == (0, 6, 6)
    assert third.pass_rate == pytest.approx(0.5)


def test_kill_mid_run_loses_nothing(tmp_path, profile):
    comp = tmp_path / "c.jsonl"
    comp.write_text(
        lines(*[{"id": "cvdp_copilot_lfsr_0001", "completion": GOOD_LFSR + f"\n// {i}"} for i in range(400)])
    )
    out = tmp_path / "r.jsonl"
    script = textwrap.dedent(f"""
        from rtlreward.engine import Engine
        from rtlreward.evaluate import evaluate
        from cvdp_adapter.tasks import load
        tasks = load({str(VENDORED)!r}, interface=False)
        evaluate(tasks, {str(comp)!r}, Engine({str(profile)!r}, cache=False, jobs=1), out_path={str(out)!r},
                 jobs=1, progress=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not out.exists() or out.read_text().count("\n") < 3):
            if proc.poll() is not None:
                pytest.fail(f"evaluation exited early: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.05)
        proc.kill()
    finally:
        proc.wait()
    rows, problems = read_results(out)
    assert len(rows) >= 3 and len(rows) < 400
    assert len(problems) <= 1  # at most the line being written at the kill
    assert len({r["sample"] for r in rows}) == len(rows)


def test_read_completions_shapes_and_errors(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text(
        lines(
            {"id": "a", "completion": "x"},
            {
                "id": "a",
                "completion": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "y"}],
            },
            {"id": "b", "files": {"rtl/x.sv": "module x; endmodule"}, "sample": 4},
            {"id": "c", "files": {"rtl/x.sv": 3}},
            {"completion": "no id"},
            "[1, 2]",
            "",
            {"id": "d", "completion": "z", "sample": -1},
        )
    )
    comps, problems = read_completions(p)
    assert comps == [
        Completion("a", text="x", line=1),
        Completion("a", text="y", line=2),
        Completion("b", files={"rtl/x.sv": "module x; endmodule"}, sample=4, line=3),
    ]
    assert [pr.line for pr in problems] == [4, 5, 6, 8]
    assert "files" in problems[0].message and "id" in problems[1].message


def test_summary_of_rows_without_running_anything(tasks):
    rows = [
        {
            "id": "cvdp_copilot_lfsr_0001",
            "sample": i,
            "reward": 1.0 if i < 2 else 0.0,
            "passed": i < 2,
            "stages": {"tests": {"score": 1.0 if i < 2 else 0.0, "status": "passed" if i < 2 else "failed"}},
        }
        for i in range(5)
    ] + [{"id": "elsewhere", "sample": 0, "reward": 1, "passed": True, "stages": {}}]
    s = summarize(tasks, rows)
    assert s.results == 5 and s.tasks == 2 and s.tasks_without_results == 1
    assert s.passk["unbiased"][5] == (1.0, 1) and s.passk["unbiased"][10] == (None, 0)
    assert s.passk["benchmark"][5][0] == pytest.approx(1 - 0.6**5)
    assert s.stages["tests"]["pass_rate"] == pytest.approx(0.4)
    json.dumps(s.to_dict())  # the --summary-json form is JSON-able


@pytest.fixture(scope="module")
def app():
    import cvdp_adapter.plugin as plugin
    from rtlreward.evaluate import register_eval_command
    from rtlreward.plugins import make_plugin_manager

    app = typer.Typer()
    make_plugin_manager(extra_plugins={"cvdp": plugin}, load_entrypoints=False).register_commands(app)
    if not any(c.name == "eval" for c in app.registered_commands):
        register_eval_command(app)
    return app


def test_cvdp_eval_command_reference_and_empty(app, profile, tmp_path):
    out = tmp_path / "ref.jsonl"
    summary = tmp_path / "s.json"
    r = CliRunner().invoke(
        app,
        [
            "cvdp",
            "eval",
            "--reference",
            "--profile",
            str(profile),
            "--out",
            str(out),
            "--summary-json",
            str(summary),
        ],
        env={"COLUMNS": "200"},
    )
    assert r.exit_code == 0, r.output
    assert "2 results for 2 tasks" in r.output and "pass@k" in r.output
    assert json.loads(summary.read_text())["pass_rate"] == 1.0
    r = CliRunner().invoke(
        app, ["cvdp", "eval", "--empty", "--profile", str(profile), "--out", str(tmp_path / "e.jsonl")]
    )
    assert r.exit_code == 0 and all(not x["passed"] for x in read_results(tmp_path / "e.jsonl")[0])
    r = CliRunner().invoke(app, ["cvdp", "eval", "--profile", str(profile)])
    assert r.exit_code == 2 and "exactly one of --completions" in r.output


def test_generic_eval_command_resolves_a_path(app, profile, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default results folder is results/ in the working folder
    comp = tmp_path / "c.jsonl"
    comp.write_text(lines({"id": "cvdp_copilot_lfsr_0001", "completion": GOOD_LFSR}))
    r = CliRunner().invoke(
        app,
        [
            "eval",
            str(
                VENDORED / "cvdp_v1.1.0_example_nonagentic_code_generation_no_commercial_with_solutions.jsonl"
            ),
            "--completions",
            str(comp),
            "--profile",
            str(profile),
        ],
        env={"COLUMNS": "200"},
    )
    assert r.exit_code == 0, r.output
    # default --out: results/<completions>.<dataset>.<profile>.jsonl
    name = "c.cvdp_v1.1.0_example_nonagentic_code_generation_no_commercial_with_solutions.quick.jsonl"
    rows, _ = read_results(tmp_path / "results" / name)
    assert [(x["id"], x["passed"]) for x in rows] == [("cvdp_copilot_lfsr_0001", True)]


class _FailsOn:
    """The real engine, except that it breaks on one task id (an infrastructure failure, not a bad answer)."""

    def __init__(self, engine, bad_id):
        self.engine, self.bad_id, self.profile = engine, bad_id, engine.profile

    def score(self, task, candidate):
        if task.id == self.bad_id:
            raise RuntimeError("executor lost")
        return self.engine.score(task, candidate)


def test_engine_failure_is_reported_not_recorded_and_retried(tmp_path, tasks, engine):
    comp = tmp_path / "c.jsonl"
    ref = next(t for t in tasks if "arbiter" in t.id).reference
    comp.write_text(
        lines(
            {"id": "cvdp_copilot_lfsr_0001", "completion": GOOD_LFSR},
            {"id": "cvdp_agentic_fixed_arbiter_0001", "files": ref},
        )
    )
    out = tmp_path / "r.jsonl"
    warnings: list[str] = []
    s = evaluate(
        tasks,
        comp,
        _FailsOn(engine, "cvdp_agentic_fixed_arbiter_0001"),
        out_path=out,
        progress=False,
        warn=warnings.append,
    )
    assert (s.scored, s.errors) == (1, 1) and any("executor lost" in w for w in warnings)
    assert [r["id"] for r in read_results(out)[0]] == ["cvdp_copilot_lfsr_0001"]
    again = evaluate(tasks, comp, engine, out_path=out, progress=False, warn=lambda m: None)
    assert (again.scored, again.resumed, again.errors, again.results) == (1, 1, 0, 2)


def test_cvdp_eval_on_a_commercial_file_says_what_to_do(app):
    from cvdp_load_helpers import shared

    r = CliRunner().invoke(app, ["cvdp", "eval", str(shared("commercial_xcelium")), "--empty"])
    assert r.exit_code == 2 and "need Cadence Xcelium; add --include-commercial" in r.output
