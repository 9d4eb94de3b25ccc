"""Per-sample logs and a results file that knows its settings, with the real engine on the bundled examples
(static stages only: no simulation, so fast): every row carries each stage's status, score, metrics and
diagnostics with stable codes and fields, the feedback and (--keep-replies) the reply; the header records the
run's settings and resume refuses (or --rescore redoes) results of other settings; the default results file is
named after the completions, the dataset and the profile, under a configurable folder; bad completions files
and folders are one-line errors; exit codes CI can trust."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rtlreward.cli import app
from rtlreward.evaluate import read_results
from rtlreward.evaluate.results import read_header
from rtlreward.evaluate.settings import SettingsMismatch, check_resume, differences

ROOT = Path(__file__).resolve().parents[1]
ARBITER = ROOT / "examples" / "fixed_priority_arbiter"
TASK_ID = "fixed_priority_arbiter"

STATIC = """
name = "static"
description = "format, safety, interface, lint, compile: no simulation"
combiner = "weighted"
stages = ["format", "safety", "interface", "lint", "compile"]
gates = ["safety"]
verdict = "compile"
partial = ["interface"]

[weights]
format = 0.1
interface = 0.2
compile = 1.0
"""


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A clean working folder, no project config, a private cache; two profiles and a completions file."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("RTLREWARD_CONFIG", "")
    monkeypatch.setenv("RTLREWARD_CACHE_DIR", str(tmp_path / "cache"))
    (work / "static.toml").write_text(STATIC)
    (work / "static2.toml").write_text(
        STATIC.replace('name = "static"', 'name = "static2"').replace("0.2", "0.3")
    )
    replies = [(ARBITER / "completions" / f"{n}.txt").read_text() for n in ("correct", "renamed_ports")]
    (work / "replies.jsonl").write_text(
        "".join(json.dumps({"id": TASK_ID, "completion": r}) + "\n" for r in replies)
    )
    return work


def run(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def eval_(*extra: str):
    return run("eval", str(ARBITER), "-c", "replies.jsonl", "-p", "static.toml", *extra)


def test_rows_carry_each_stage_in_full_with_stable_codes(env):
    r = eval_("-o", "r.jsonl")
    assert r.exit_code == 0, r.output
    rows, problems = read_results("r.jsonl")
    assert not problems and sorted(x["sample"] for x in rows) == [0, 1]
    good, renamed = sorted(rows, key=lambda x: x["sample"])
    assert good["passed"] and good["reward"] == pytest.approx(1.3)
    iface = renamed["stages"]["interface"]
    assert (iface["status"], iface["score"]) == ("failed", 0.25)
    assert iface["metrics"]["ports_missing"] == 3 and iface["metrics"]["ports_extra"] == 3
    missing = {d["fields"]["port"]: d for d in iface["diagnostics"] if d["code"] == "interface.port_missing"}
    assert set(missing) == {"clk", "rst_n", "req"}
    assert missing["req"]["fields"] == {"port": "req", "direction": "input", "width": 4, "near": "request"}
    assert missing["req"]["file"] and missing["req"]["line"] == 1 and missing["req"]["severity"] == "error"
    extra = {d["fields"]["port"] for d in iface["diagnostics"] if d["code"] == "interface.port_extra"}
    assert extra == {"clock", "reset_n", "request"}
    assert "missing port input clk" in iface["feedback"] and renamed["feedback"].startswith("[interface]")
    for row in rows:
        for st in row["stages"].values():
            assert set(st) >= {"status", "score", "metrics", "diagnostics", "feedback"}
            assert all("." in d["code"] for d in st["diagnostics"])  # every code has a namespace
    assert "reply" not in good  # only with --keep-replies


def test_keep_replies_writes_the_reply(env):
    assert eval_("-o", "r.jsonl", "--keep-replies").exit_code == 0
    rows, _ = read_results("r.jsonl")
    rows.sort(key=lambda x: x["sample"])
    assert rows[0]["reply"] == (ARBITER / "completions" / "correct.txt").read_text()


def test_header_records_the_settings(env):
    assert eval_("-o", "r.jsonl").exit_code == 0
    first = json.loads(Path("r.jsonl").read_text().splitlines()[0])
    assert first["rtlreward"] == "results" and first["schema"] == 2
    s = read_header("r.jsonl")
    assert s["profile"] == "static" and len(s["profile_hash"]) == 16
    assert s["executor"]["executor"] == "local" and s["dataset"] == str(ARBITER)
    assert s["stages"]["interface"] == "2" and "pyslang" in s["tool_versions"]["interface"]
    assert s["completions"] == "replies.jsonl" and s["rtlreward"]


def test_resume_under_another_profile_is_refused_then_rescored(env):
    assert eval_("-o", "r.jsonl").exit_code == 0
    r = run("eval", str(ARBITER), "-c", "replies.jsonl", "-p", "static2.toml", "-o", "r.jsonl")
    assert r.exit_code == 2, r.output
    assert "other settings" in r.output and "profile: 'static' -> 'static2'" in r.output
    assert "--rescore" in r.output and "Traceback" not in r.output
    assert [x["profile"] for x in read_results("r.jsonl")[0]] == ["static", "static"]  # untouched
    r = run("eval", str(ARBITER), "-c", "replies.jsonl", "-p", "static2.toml", "-o", "r.jsonl", "--rescore")
    assert r.exit_code == 0, r.output
    assert [x["profile"] for x in read_results("r.jsonl")[0]] == ["static2", "static2"]
    assert read_header("r.jsonl")["profile"] == "static2"
    assert [x["profile"] for x in read_results("r.jsonl.prev")[0]] == ["static", "static"]
    r = eval_("-o", "r.jsonl")  # a same-settings rerun resumes silently: 2 already done
    assert r.exit_code == 2  # r.jsonl is now static2's


def test_same_settings_resume(env):
    assert eval_("-o", "r.jsonl").exit_code == 0
    r = eval_("-o", "r.jsonl")
    assert r.exit_code == 0 and "0 scored now; 2 already done" in r.output


def test_an_executor_or_stage_version_difference_is_named():
    old = {
        "profile": "shaped",
        "executor": {"executor": "local", "isolation": "bubblewrap"},
        "stages": {"tests": "2"},
    }
    new = {
        "profile": "shaped",
        "executor": {"executor": "docker", "isolation": "docker"},
        "stages": {"tests": "3"},
    }
    diffs = differences(old, new)
    assert "executor.executor: 'local' -> 'docker'" in diffs and "stages.tests: '2' -> '3'" in diffs
    with pytest.raises(SettingsMismatch, match=re.escape("executor.executor: 'local' -> 'docker'")):
        check_resume(Path("r.jsonl"), old, [{"id": "a", "sample": 0, "passed": True}], new)
    assert differences(old, {**old, "jobs": 8, "started": "later"}) == []  # not scoring settings


def test_a_file_without_header_resumes_on_its_profile_only():
    rows = [{"id": "a", "sample": 0, "passed": True, "profile": "shaped"}]
    assert "older rtlreward" in check_resume(Path("r.jsonl"), None, rows, {"profile": "shaped"})
    with pytest.raises(SettingsMismatch, match="profile shaped"):
        check_resume(Path("r.jsonl"), None, rows, {"profile": "seed"})


def test_default_results_file_names_dataset_and_profile(env):
    r = eval_()
    assert r.exit_code == 0, r.output
    out = Path("results") / "replies.fixed_priority_arbiter.static.jsonl"
    assert len(read_results(out)[0]) == 2
    r = run("eval", str(ARBITER), "--reference", "-p", "static2.toml")
    assert r.exit_code == 0 and (Path("results") / "reference.fixed_priority_arbiter.static2.jsonl").is_file()


def test_output_folder_from_the_project_config_and_the_flag(env, monkeypatch):
    monkeypatch.delenv("RTLREWARD_CONFIG")
    Path("rtlreward.toml").write_text('output_dir = "runs/eval"\nprofile = "static.toml"\n')
    assert run("eval", str(ARBITER), "-c", "replies.jsonl").exit_code == 0
    assert (Path("runs/eval") / "replies.fixed_priority_arbiter.static.jsonl").is_file()
    assert run("eval", str(ARBITER), "-c", "replies.jsonl", "--out-dir", "elsewhere").exit_code == 0
    assert (Path("elsewhere") / "replies.fixed_priority_arbiter.static.jsonl").is_file()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b"\n\n  \n", "is empty"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\xff\xfe\x00", "binary"),
        (b"not json\nnor this\n", "no usable completion"),
        (
            b'{"id": "Prob001_zero", "completion": "x"}\n{"id": "Prob002", "completion": "y"}\n',
            "none of the 2",
        ),
    ],
)
def test_unusable_completions_files_exit_2_with_one_line(env, content, message):
    Path("bad.jsonl").write_bytes(content)
    r = run("eval", str(ARBITER), "-c", "bad.jsonl", "-p", "static.toml", "-o", "r.jsonl")
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], r.output
    assert "Traceback" not in r.output and "Results by category" not in r.output


def test_folders_where_files_belong_are_one_line_errors(env):
    Path("adir").mkdir()
    r = run("eval", str(ARBITER), "-c", "adir", "-p", "static.toml")
    assert r.exit_code == 2 and "adir is a folder" in r.output and "Traceback" not in r.output
    r = run("eval", str(ARBITER), "-c", "replies.jsonl", "-p", "static.toml", "-o", "adir")
    assert r.exit_code == 2 and "adir is a folder" in r.output and "Traceback" not in r.output


def test_fail_under_gates_ci(env):
    r = run(
        "eval", str(ARBITER), "--reference", "-p", "static.toml", "-o", "ref.jsonl", "--fail-under", "0.9"
    )
    assert r.exit_code == 0, r.output
    r = run("eval", str(ARBITER), "--empty", "-p", "static.toml", "-o", "e.jsonl", "--fail-under", "0.5")
    assert r.exit_code == 1 and "pass rate 0.000 is below --fail-under 0.5" in r.output
    r = run(
        "eval",
        str(ARBITER),
        "--reference",
        "-p",
        "static.toml",
        "-o",
        "ref.jsonl",
        "--fail-under-reward",
        "2",
    )
    assert r.exit_code == 1 and "mean reward 1.300 is below --fail-under-reward 2" in r.output


def test_nothing_scored_or_engine_errors_exit_1():
    from rtlreward.evaluate.command import exit_failures
    from rtlreward.evaluate.summary import summarize

    empty = summarize([], [])
    assert any("nothing was scored" in x for x in exit_failures(empty))
    import attrs

    assert any("engine error" in x for x in exit_failures(attrs.evolve(empty, results=3, errors=1)))
    assert exit_failures(attrs.evolve(empty, results=3, pass_rate=1.0, mean_reward=1.0)) == []


def test_warnings_print_square_brackets_as_written(capsys):
    from rtlreward.evaluate.runner import warn_stderr

    warn_stderr("line 3: key [metadata] is not a task field")
    assert "[metadata]" in capsys.readouterr().err


def test_lint_safety_and_format_codes_in_rows(env):
    """Verilator's own code under `lint.`, a refused construct under `safety.` with the construct as a field, a
    reply with no code under `format.`: one namespace per stage, the tool's id kept as `fields.tool_code`."""
    (task_file,) = [p for p in (ARBITER / "reference").iterdir()]
    widened = task_file.read_text().replace("endmodule", "  wire [3:0] unused_w = 8'hff;\nendmodule")
    replies = [
        f"```verilog\n{widened}```",
        (ARBITER / "completions" / "system_call.txt").read_text(),
        (ARBITER / "completions" / "prose_only.txt").read_text(),
    ]
    Path("more.jsonl").write_text(
        "".join(json.dumps({"id": TASK_ID, "completion": r}) + "\n" for r in replies)
    )
    r = run("eval", str(ARBITER), "-c", "more.jsonl", "-p", "static.toml", "-o", "m.jsonl")
    assert r.exit_code == 0, r.output
    rows = {x["sample"]: x for x in read_results("m.jsonl")[0]}
    lint = rows[0]["stages"]["lint"]
    assert (lint["status"], lint["score"]) == ("passed", 0.9)  # a warning: passed, with a penalty
    assert [d["code"] for d in lint["diagnostics"]] == ["lint.WIDTHTRUNC"]
    (unsafe,) = rows[1]["stages"]["safety"]["diagnostics"]
    assert unsafe["code"] == "safety.unsafe_system" and unsafe["fields"]["construct"] == "$system"
    assert unsafe["fields"]["tool_code"] == "unsafe-system"
    assert [d["code"] for d in rows[2]["stages"]["format"]["diagnostics"]] == ["format.missing_file"]


def test_verilog_eval_mismatch_has_one_spelling_and_counts_as_fields(tmp_path):
    from verilog_eval_helpers import VE_DATA, run_harness

    if not (VE_DATA / "dataset_spec-to-rtl").is_dir():
        pytest.skip("VerilogEval data not at ../shared/data/verilog-eval")
    from rtlreward_verilog_eval.dataset import VerilogEvalDataset

    task = next(t for t in VerilogEvalDataset().load(str(VE_DATA)) if t.id.startswith("Prob001"))
    wrong = "module TopModule(output zero); assign zero = 1; endmodule\n"
    r = run_harness(task, {"TopModule.sv": wrong}, tmp_path)
    head, *outputs = r.diagnostics
    assert head.code == "verilog_eval.mismatch" and head.fields["mismatches"] == head.fields["samples"] > 0
    assert outputs and all(d.code == "verilog_eval.output_mismatch" for d in outputs)
    assert outputs[0].fields["signal"] == "zero" and outputs[0].fields["mismatches"] > 0


@pytest.mark.docker
def test_resume_with_another_executor_is_refused(env):
    """`cvdp eval` then the same with `-x docker` used to say "2 already done" and reuse the local verdicts."""
    try:
        import docker

        docker.from_env().ping()
        from cvdp_adapter.runner_docker import image_available

        if not image_available():
            pytest.skip("no rtlreward sim image: run `rtlreward sandbox build-image`")
    except Exception as exc:
        pytest.skip(f"no Docker engine: {exc}")
    assert run("eval", str(ARBITER), "--empty", "-p", "static.toml", "-o", "e.jsonl").exit_code == 0
    r = run("eval", str(ARBITER), "--empty", "-p", "static.toml", "-o", "e.jsonl", "-x", "docker")
    assert r.exit_code == 2, r.output
    assert "executor.executor: 'local' -> 'docker'" in r.output and "already done" not in r.output


def test_the_same_dataset_by_another_path_resumes(env):
    import os

    assert eval_("-o", "r.jsonl").exit_code == 0
    rel = os.path.relpath(ARBITER, Path.cwd())
    r = run("eval", rel, "-c", "replies.jsonl", "-p", "static.toml", "-o", "r.jsonl")
    assert r.exit_code == 0 and "2 already done" in r.output, r.output
    assert read_header("r.jsonl")["dataset"] == str(ARBITER)


def test_a_row_of_a_changed_task_is_scored_again(env):
    """Rows carry their task's hash: a task whose checks changed (here its files) is scored again on resume, the
    others are kept; the summary takes the new rows."""
    import attrs

    from rtlreward.engine import Engine
    from rtlreward.evaluate import evaluate
    from rtlreward.integration import load_tasks

    (task,) = load_tasks(str(ARBITER))
    warnings: list[str] = []
    with Engine("static.toml", cache=False) as engine:
        first = evaluate(
            [task], "replies.jsonl", engine, out_path="r.jsonl", progress=False, warn=warnings.append
        )
        assert first.scored == 2
        again = evaluate(
            [task], "replies.jsonl", engine, out_path="r.jsonl", progress=False, warn=warnings.append
        )
        assert (again.scored, again.resumed) == (0, 2)
        changed = attrs.evolve(task, context={**task.context, "docs/note.md": "a new file of the task"})
        third = evaluate(
            [changed], "replies.jsonl", engine, out_path="r.jsonl", progress=False, warn=warnings.append
        )
    assert (third.scored, third.resumed, third.results) == (2, 0, 2)
    assert any("another version of their task" in w for w in warnings)
    rows, _ = read_results("r.jsonl")
    assert len(rows) == 4 and rows[0]["task_hash"] != rows[-1]["task_hash"]
