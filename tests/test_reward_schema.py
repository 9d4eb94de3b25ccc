"""One reward schema (issue 19): `score --json`, the HTTP server's answers and the rows of `rtlreward eval` carry
the same names (`id`, `reward`, `feedback`, per-stage `seconds`, stable diagnostic codes), the server and
`score --json` keep the deprecated `task_id`/`total`/`duration`; `score` exits 1 on a FAIL verdict and prints
nothing but errors under `-q`. Real engine, real tools (Icarus, Verilator, pyslang, cocotb)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import server_helpers as sh
from typer.testing import CliRunner

from rtlreward.cli import app
from rtlreward.model import Reward

ROOT = Path(__file__).resolve().parents[1]
ARBITER = ROOT / "examples" / "fixed_priority_arbiter"
RENAMED = ARBITER / "completions" / "renamed_ports.txt"
CORRECT = ARBITER / "completions" / "correct.txt"
SCHEMA_KEYS = {"id", "sample", "reward", "passed", "max_total", "profile", "stages", "metrics", "diagnostics"}
STAGE_KEYS = {"status", "score", "seconds", "cached", "metrics", "diagnostics", "feedback"}


@pytest.fixture
def run(monkeypatch, tmp_path):
    monkeypatch.setenv("RTLREWARD_CACHE_DIR", str(tmp_path / "cache"))
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, list(args), catch_exceptions=False)

    return invoke


def _codes(record: dict) -> dict[str, list[str]]:
    return {name: [d["code"] for d in st["diagnostics"]] for name, st in record["stages"].items()}


def test_score_json_eval_row_and_server_share_one_schema(run, tmp_path):
    res = run("score", str(ARBITER), "-c", str(RENAMED), "-p", "seed", "--json", "--feedback")
    assert res.exit_code == 1, res.output  # the verdict is FAIL
    scored = json.loads(res.stdout)
    assert SCHEMA_KEYS | {"feedback"} <= set(scored)
    assert scored["id"] == scored["task_id"] == "fixed_priority_arbiter"
    assert scored["reward"] == scored["total"] == pytest.approx(0.4)
    # --json --feedback: the feedback a multi-turn trainer sends back is in the JSON, not dropped
    assert "[interface]" in scored["feedback"] or "[tests]" in scored["feedback"]
    for st in scored["stages"].values():
        assert set(st) >= STAGE_KEYS and st["duration"] == st["seconds"] and st["seconds"] >= 0
    assert scored["stages"]["lint"]["seconds"] > 0  # Verilator ran

    completions = tmp_path / "c.jsonl"
    completions.write_text(
        json.dumps({"id": "fixed_priority_arbiter", "completion": RENAMED.read_text()}) + "\n"
    )
    out = tmp_path / "r.jsonl"
    res = run("eval", str(ARBITER), "-c", str(completions), "-p", "seed", "-o", str(out))
    assert res.exit_code == 0, res.output
    row = json.loads(out.read_text().splitlines()[1])
    assert SCHEMA_KEYS | {"feedback"} <= set(row) and "tests" not in row  # the core names no stage's metric
    assert row["reward"] == pytest.approx(scored["reward"]) and row["feedback"] == scored["feedback"]
    assert _codes(row) == _codes(scored)  # stable codes in both, not the stages' own ids in one of them
    assert all(set(st) == STAGE_KEYS for st in row["stages"].values())

    from rtlreward.engine import Engine
    from rtlreward.integration import load_tasks

    tasks = load_tasks(str(ARBITER))
    engine = Engine(profile="seed")
    try:
        with sh.running(engine, tasks) as url:
            status, _, body = sh.request(
                url + "/score", {"task_id": tasks[0].id, "completion": RENAMED.read_text()}
            )
    finally:
        engine.close()
    assert status == 200, body
    assert set(scored) == set(body) and body["feedback"] == scored["feedback"]
    assert _codes(body) == _codes(scored) and body["total"] == body["reward"] == pytest.approx(0.4)
    assert {k: set(v) for k, v in body["stages"].items()} == {k: set(v) for k, v in scored["stages"].items()}
    # both spellings read back
    assert Reward.from_dict(row).total == Reward.from_dict(body).total == pytest.approx(0.4)
    assert Reward.from_dict(row).stages["lint"].duration == row["stages"]["lint"]["seconds"]


def test_score_exit_codes_and_quiet(run):
    res = run("score", str(ARBITER), "-c", str(CORRECT), "-p", "seed")
    assert res.exit_code == 0 and "PASS" in res.stdout
    res = run("-q", "score", str(ARBITER), "-c", str(CORRECT), "-p", "seed")
    assert res.exit_code == 0 and res.stdout == "", res.stdout  # errors only: no table
    res = run("-q", "score", str(ARBITER), "-c", str(RENAMED), "-p", "seed")
    assert res.exit_code == 1 and res.stdout == "", res.stdout
    res = run("score", str(ARBITER), "-c", str(RENAMED), "-p", "seed")
    assert res.exit_code == 1 and "FAIL" in res.stdout


def test_gate_wording_names_the_stage_that_failed(run, tmp_path):
    prose = tmp_path / "prose.txt"
    prose.write_text("I would use a priority encoder here, but I will not write the code.")
    res = run("score", str(ARBITER), "-c", str(prose), "-p", "shaped")
    assert res.exit_code == 1, res.output
    assert "gate safety skipped: format failed" in res.stdout and "a gate failed" not in res.stdout


def test_the_model_and_sampler_travel_from_completions_to_header_and_report(run, tmp_path):
    """Two runs of different models must be told apart without a --title: `rtlreward sample` writes `model` and
    `sampler` on every completions line; eval copies them into the results header and the report shows them."""
    sampler = {"backend": "openai", "model": "acme/coder-7b", "temperature": 0.8, "max_tokens": 2048}
    line = {"id": "fixed_priority_arbiter", "sample": 0, "completion": CORRECT.read_text()}
    completions = tmp_path / "acme.jsonl"
    completions.write_text(json.dumps({**line, "model": "acme/coder-7b", "sampler": sampler}) + "\n")
    out = tmp_path / "acme.results.jsonl"
    res = run("eval", str(ARBITER), "-c", str(completions), "-p", "seed", "-o", str(out))
    assert res.exit_code == 0, res.output
    header = json.loads(out.read_text().splitlines()[0])["settings"]
    assert header["model"] == "acme/coder-7b" and header["sampler"] == sampler

    page, html = tmp_path / "report.md", tmp_path / "report.html"
    for args in (["--format", "md", "-o", str(page)], ["-o", str(html)]):
        res = subprocess.run(
            [sys.executable, "-m", "rtlreward", "report", str(out), *args], capture_output=True, text=True
        )
        assert res.returncode == 0, res.stderr
    assert "acme/coder-7b, temperature 0.8, max tokens 2048" in page.read_text().split("\n## ")[0]  # runs line
    assert "acme/coder-7b, temperature 0.8" in html.read_text()
