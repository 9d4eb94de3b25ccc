"""The `rtlreward` CLI: score (table and JSON), plugins, profiles, demo, command groups, exit codes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from rtlreward.cli import app, command_group
from rtlreward.model import Reward

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
COUNTER = EXAMPLES / "counter"

needs_examples = pytest.mark.skipif(not (COUNTER / "task.toml").is_file(), reason="examples/ not present")


@pytest.fixture
def run(monkeypatch, tmp_path):
    monkeypatch.setenv("RTLREWARD_CACHE_DIR", str(tmp_path / "cache"))
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None):
        return runner.invoke(app, list(args), input=input, catch_exceptions=False)

    return invoke


@needs_examples
def test_score_json_is_a_reward(run):
    res = run("score", str(COUNTER), "--completion", str(COUNTER / "completions" / "correct.txt"), "--json")
    assert res.exit_code == 0, res.output
    reward = Reward.from_dict(json.loads(res.stdout))
    assert reward.passed and reward.total == pytest.approx(1.6) and reward.profile == "shaped"
    assert list(reward.stages) == ["format", "safety", "interface", "lint", "compile", "tests"]
    assert (
        reward.metrics["tests_total"] > 0 and reward.metrics["tests_passed"] == reward.metrics["tests_total"]
    )


@needs_examples
def test_score_table_with_a_failing_reply_and_profile(run):
    bad = COUNTER / "completions" / "en_ignores_load.txt"
    res = run("score", str(COUNTER), "-c", str(bad), "--profile", "seed", "--no-cache")
    assert res.exit_code == 1, res.output  # a FAIL verdict exits 1
    assert "tests" in res.stdout and "failed" in res.stdout
    assert "reward 0.400 / 1.400" in res.stdout and "FAIL" in res.stdout


@needs_examples
def test_score_reads_the_reply_from_stdin(run):
    text = (COUNTER / "completions" / "correct.txt").read_text()
    res = run("score", str(COUNTER), "-c", "-", "--profile", "strict", "--json", input=text)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["total"] == 1.0


@needs_examples
def test_score_the_reference(run):
    res = run("score", str(COUNTER), "--reference", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["passed"] and data["total"] == pytest.approx(1.6)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["score", str(COUNTER)], "give the reply with --completion"),
        (["score", str(COUNTER), "--reference", "-c", "x.txt"], "not both"),
        (["score", "/nonexistent/task", "-c", "/etc/hostname"], "does not exist"),
        (["score", str(COUNTER), "-c", "/nonexistent/reply.txt"], "cannot read completion"),
        (["score", str(COUNTER), "-c", str(COUNTER / "spec.md"), "-p", "nope"], "unknown profile 'nope'"),
        (["score", str(EXAMPLES), "-c", str(COUNTER / "spec.md")], "pick one with --task"),
        (["score", str(COUNTER), "-c", str(COUNTER / "spec.md"), "-x", "teleport"], "unknown executor"),
        (["profiles", "nope"], "unknown profile"),
    ],
)
@needs_examples
def test_bad_input_exits_2_with_one_line(run, args, message):
    res = run(*args)
    assert res.exit_code == 2
    assert message in res.output
    assert "Traceback" not in res.output
    assert len([ln for ln in res.output.splitlines() if ln.strip()]) == 1


def test_plugins_json_lists_what_each_plugin_registers(run):
    res = run("plugins", "--json")
    assert res.exit_code == 0
    plugins = {p["name"]: p for p in json.loads(res.stdout)["plugins"]}
    comb = plugins["core"]
    assert {(r["kind"], r["name"]) for r in comb["registers"]} >= {
        ("combiner", "weighted"),
        ("profile", "seed"),
    }
    assert ("dataset", "folder") in {(r["kind"], r["name"]) for r in plugins["folder"]["registers"]}
    assert "rtlreward_register_combiners" in comb["hooks"]
    table = run("plugins").stdout
    assert "combiner weighted" in table and "executor local" in table


def test_profiles_list_and_show(run):
    res = run("profiles")
    assert res.exit_code == 0 and "shaped" in res.stdout and "(default)" in res.stdout
    res = run("profiles", "seed", "--json")
    assert json.loads(res.stdout)["weights"] == {"format": 0.1, "syntax": 0.3, "tests": 1.0}
    res = run("profiles", "shaped")
    assert "lint AND compile" in res.stdout and "max weighted total: 1.6" in res.stdout


def test_command_group_is_shared_between_plugins():
    parent = typer.Typer()
    g1 = command_group(parent, "train")
    g2 = command_group(parent, "train")
    assert g1 is g2

    @g1.command("alpha")
    def alpha() -> None:
        print("alpha ran")

    @g2.command("beta")
    def beta() -> None:
        print("beta ran")

    runner = CliRunner()
    assert runner.invoke(parent, ["train", "alpha"]).stdout.strip() == "alpha ran"
    assert runner.invoke(parent, ["train", "beta"]).stdout.strip() == "beta ran"


def test_each_new_app_gets_its_own_group():
    # A freed app's id is soon reused by the next one (CI's flake: a test's fresh app got the group of the
    # previous test's app, so it had no commands at all). Each app must get a group of its own.
    import gc

    for i in range(30):
        parent = typer.Typer()

        @command_group(parent, "corpus").command("hello")
        def hello() -> None:
            print("hello ran")

        res = CliRunner().invoke(parent, ["corpus", "hello"])
        assert res.exit_code == 0 and res.stdout.strip() == "hello ran", (i, res.output)
        del parent, hello, res
        gc.collect()


@needs_examples
def test_demo_scores_every_example_reply(run, tmp_path):
    # A copy of the examples without the zero-delay loop, whose wall-clock timeout would only measure the limit
    # (tests/test_hostile_replies.py covers it).
    examples = tmp_path / "examples"
    shutil.copytree(EXAMPLES, examples, ignore=shutil.ignore_patterns("forever_loop.txt", "__pycache__"))
    res = run("demo", "--examples", str(examples), "--json", "--timeout", "60")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    by = {(r["task"], r["completion"]): r for r in rows}
    n = sum(len(list((d / "completions").glob("*.txt"))) for d in examples.iterdir() if d.is_dir())
    cvdp = {k: r for k, r in by.items() if k[0].startswith("cvdp_")}
    assert len(rows) == n + len(cvdp) and n > 0
    # The two official CVDP examples ride along: their references pass, empty answers fail.
    assert {c for _, c in cvdp} == {"reference", "empty"} and len(cvdp) == 4
    for (_, comp), r in cvdp.items():
        assert r["passed"] is (comp == "reference")
    for (_, comp), r in by.items():
        if comp.startswith("correct"):
            assert r["passed"] and r["total"] == pytest.approx(r["max_total"])
    assert any(not r["passed"] for r in rows)
    arb = "fixed_priority_arbiter"
    if (arb, "system_call") in by:
        assert by[(arb, "system_call")]["stages"]["safety"]["status"] == "failed"
        assert by[(arb, "system_call")]["total"] == 0
    # The second run comes from the cache and prints the table.
    res = run("demo", "--examples", str(examples), "--timeout", "60")
    assert res.exit_code == 0 and "correct" in res.stdout and "PASS" in res.stdout
    assert res.stdout.count("PASS") == sum(r["passed"] for r in rows)


def test_demo_without_examples_is_a_usage_error(run, tmp_path):
    res = run("demo", "--examples", str(tmp_path))
    assert res.exit_code == 2 and "no task.toml" in res.output


def test_cache_info_and_clear(run, tmp_path):
    from rtlreward.cache import ResultCache
    from rtlreward.model import StageResult, Status

    ResultCache(tmp_path / "cache" / "cache.sqlite").put("k", StageResult(name="lint", status=Status.PASSED))
    info = json.loads(run("cache", "info", "--json").stdout)
    assert info["entries"] == 1 and info["by_stage"] == {"lint": 1}
    assert "removed 1 cached results" in run("cache", "clear").stdout
    assert json.loads(run("cache", "info", "--json").stdout)["entries"] == 0
