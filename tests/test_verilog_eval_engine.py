"""VerilogEval through the whole engine (`shaped` profile: format, safety, interface, lint, compile, tests) and
through `rtlreward eval verilog-eval`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from verilog_eval_helpers import VE_DATA, needs_verilog_eval

from rtlreward.model import Candidate
from rtlreward_verilog_eval.dataset import VerilogEvalDataset

pytestmark = needs_verilog_eval
IDS = "Prob001_zero,Prob035_count1to10,Prob050_kmap1"


@pytest.fixture(scope="module")
def tasks():
    return VerilogEvalDataset().load(VE_DATA, ids=IDS)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from rtlreward.engine import Engine

    eng = Engine(profile="shaped", cache=False, workspace_root=tmp_path_factory.mktemp("ve-engine"))
    yield eng
    eng.close()


def test_references_in_the_benchmarks_answer_format_get_full_reward(engine, tasks):
    """The official prompt asks for [BEGIN] ... [DONE]; the format stage finds the module between them."""
    for t in tasks:
        reply = f"[BEGIN]\n{t.reference['TopModule.sv']}\n[DONE]\n"
        r = engine.score(t, Candidate(text=reply))
        assert r.passed, (t.id, {k: (v.status, v.diagnostics) for k, v in r.stages.items()})
        assert r.total == pytest.approx(r.max_total) == pytest.approx(1.6)
        assert r.metrics["tests_passed"] == r.metrics["tests_total"] > 0
        assert r.stages["interface"].score == 1.0


def test_wrong_and_empty_replies(engine, tasks):
    t = next(x for x in tasks if x.id == "Prob035_count1to10")
    wrong = "```verilog\n" + t.reference["TopModule.sv"].replace("q == 10", "q == 11") + "```\n"
    r = engine.score(t, Candidate(text=wrong))
    assert not r.passed
    tests = r.stages["tests"]
    assert 0.0 < tests.score < 1.0
    # Everything but the tests passed: 0.1 format + 0.3 syntax + 0.2 interface + partial tests.
    assert r.total == pytest.approx(0.6 + tests.score)
    assert "Output 'q'" in r.feedback()
    empty = engine.score(t, Candidate(text=""))
    assert not empty.passed and empty.total == 0.0


def test_eval_command_scores_the_references(tmp_path):
    out = tmp_path / "ref.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtlreward",
            "eval",
            "verilog-eval",
            "--source",
            str(VE_DATA),
            "--reference",
            "--filter",
            f"ids={IDS}",
            "--out",
            str(out),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RTLREWARD_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()[1:]]  # after the settings header
    assert sorted(r["id"] for r in rows) == sorted(IDS.split(","))
    assert all(r["passed"] and r["reward"] == pytest.approx(1.6) for r in rows)
