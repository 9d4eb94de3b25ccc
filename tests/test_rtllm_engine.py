"""RTLLM through the whole engine (`shaped` profile) and through `rtlreward eval <path> --completions F`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from verilog_eval_helpers import RTLLM_DATA, needs_rtllm

from rtlreward.model import Candidate
from rtlreward_rtllm.dataset import RtllmDataset

pytestmark = needs_rtllm
IDS = "adder_8bit,calendar,fixed_point_substractor"


@pytest.fixture(scope="module")
def tasks():
    return RtllmDataset().load(RTLLM_DATA, ids=IDS)


def test_references_get_full_reward(tasks, tmp_path):
    from rtlreward.engine import Engine

    eng = Engine(profile="shaped", cache=False, workspace_root=tmp_path)
    try:
        for t in tasks:
            reply = f"Here is the design:\n```verilog\n{t.reference[t.expected_files[0]]}\n```\n"
            r = eng.score(t, Candidate(text=reply))
            assert r.passed, (t.id, {k: (v.status, v.diagnostics) for k, v in r.stages.items()})
            assert r.total == pytest.approx(r.max_total) == pytest.approx(1.6)
        adder = next(t for t in tasks if t.id == "adder_8bit")
        wrong = (
            "```verilog\nmodule adder_8bit(input [7:0] a, b, input cin, output [7:0] sum, output cout);\n"
            "  assign {cout, sum} = a + b;\nendmodule\n```\n"
        )
        r = eng.score(adder, Candidate(text=wrong))
        assert not r.passed and 0.0 < r.stages["tests"].score < 1.0
    finally:
        eng.close()


def test_eval_command_with_a_path_and_completions(tmp_path):
    comp = tmp_path / "c.jsonl"
    with comp.open("w") as f:
        for t in RtllmDataset().load(RTLLM_DATA, ids="adder_8bit,accu"):
            code = t.reference[t.expected_files[0]]
            f.write(json.dumps({"id": t.id, "completion": f"```verilog\n{code}\n```"}) + "\n")
            f.write(json.dumps({"id": t.id, "completion": "I cannot do that."}) + "\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtlreward",
            "eval",
            str(RTLLM_DATA),
            "--completions",
            str(comp),
            "--filter",
            "ids=adder_8bit,accu",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RTLREWARD_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = tmp_path / "results" / "c.rtllm.shaped.jsonl"  # results/<completions>.<dataset>.<profile>.jsonl
    rows = [json.loads(line) for line in out.read_text().splitlines()[1:]]  # after the settings header
    by = {(r["id"], r["sample"]): r for r in rows}
    assert by[("adder_8bit", 0)]["passed"] and by[("accu", 0)]["passed"]
    assert not by[("adder_8bit", 1)]["passed"] and by[("accu", 1)]["reward"] == 0.0
