"""Prompt styles for corpus tasks and the A/B of two styles (issue 18): `rtlreward sample --style benchmark` and
`--style spec` against the stand-in OpenAI-compatible server (tests/openai_stub.py), both scored by the real
`rtlreward eval` under `equiv` (Yosys/Icarus), compared by `rtlreward corpus ab` with a bootstrap interval. The
stand-in model keeps the exact port names only when the prompt spells them out, on half the tasks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import typer
from corpus_gen import problems, write
from openai_stub import StubOpenAI, last_user
from typer.testing import CliRunner

from rtlreward.integration import load_tasks
from rtlreward.prompts import chat_for
from rtlreward_corpus.ab import compare_runs
from rtlreward_corpus.cli import add_commands


def cli(*args: str):
    res = subprocess.run(
        [sys.executable, "-m", "rtlreward", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OPENAI_API_KEY": ""},
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return res


def test_spec_style_spells_out_the_interface(tmp_path):
    rows = [
        {"id": "cnt", "prompt": "A counter.", "reference": "module c(input clk, input rst_n, input en, "
         "output reg [3:0] q);\n  always @(posedge clk or negedge rst_n)\n    if (!rst_n) q <= 0;\n"
         "    else if (en) q <= q + 1;\nendmodule\n"},
    ]  # fmt: skip
    task = load_tasks(str(write(tmp_path / "c.jsonl", rows)))[0]
    plain = chat_for(task, "benchmark")[-1]["content"]
    spec = chat_for(task, "spec")[-1]["content"]
    assert plain == "A counter." and spec.startswith("A counter.")
    assert "- module `c`" in spec and "- output `q`: [3:0] (4 bits)" in spec and "- input `en`: 1 bit" in spec
    assert "`clk` is the clock" in spec
    assert "`rst_n` is an active-low asynchronous reset" in spec
    assert "q <= q + 1" not in spec  # the interface, never the logic
    with pytest.raises(ValueError, match="unknown prompt style"):
        chat_for(task, "copilot")


def test_ab_of_two_styles_through_sample_and_eval(tmp_path):
    corpus = write(tmp_path / "c.jsonl", [r for r in problems(40, seed=6) if "fsm" not in r["reference"]][:8])
    tasks = load_tasks(str(corpus))
    by_prompt = {t.prompt: t for t in tasks}

    def reply(messages):
        text = last_user(messages)
        t = next(t for p, t in by_prompt.items() if text.startswith(p))
        design = t.reference[t.expected_files[0]]
        out = next(p.name for p in t.interface.ports if p.direction == "output")
        if "Interface (follow it exactly" not in text and tasks.index(t) % 2 == 0:
            design = re.sub(rf"\b{re.escape(out)}\b", out + "_o", design)  # a model that renames an output
        return f"```verilog\n{design}```"

    results = {}
    with StubOpenAI(reply) as stub:
        for style in ("benchmark", "spec"):
            comp = tmp_path / f"{style}.completions.jsonl"
            cli("sample", str(corpus), "--style", style, "--model", stub.model, "--base-url", stub.base_url,
                "--out", str(comp))  # fmt: skip
            results[style] = tmp_path / f"{style}.results.jsonl"
            cli("eval", str(corpus), "-c", str(comp), "-p", "equiv", "-o", str(results[style]), "-j", "2")
        spec_chats = [b["messages"] for b in stub.requests[len(tasks) :]]
    assert all("Interface (follow it exactly" in m[-1]["content"] for m in spec_chats)
    app = typer.Typer()
    add_commands(app)
    res = CliRunner().invoke(app, ["corpus", "ab", str(results["benchmark"]), str(results["spec"]), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["tasks"] == 8
    assert doc["pass_rate"]["a"] == 0.5 and doc["pass_rate"]["b"] == 1.0 and doc["pass_rate"]["diff"] == 0.5
    lo, hi = doc["pass_rate"]["ci95"]
    assert 0 < lo <= 0.5 <= hi <= 1 and doc["pass_rate"]["significant"]
    assert doc["reward"]["diff"] == pytest.approx(0.5 * 0.9, abs=1e-3)  # equiv: 1.0 vs the format's 0.1
    res = CliRunner().invoke(app, ["corpus", "ab", str(results["spec"]), str(results["spec"])])
    assert res.exit_code == 0 and "B-A +0.000 (95% CI +0.000 .. +0.000)" in res.stdout


def test_ab_needs_shared_tasks():
    with pytest.raises(ValueError, match="share no task"):
        compare_runs({"a": (1.0, 1.0, 1)}, {"b": (0.0, 0.0, 1)})
