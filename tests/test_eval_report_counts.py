"""Counts that agree between `rtlreward eval`'s tables and `rtlreward report` (issue 19): a stage's `ran` excludes
the replies it skipped in both; completions outside the selection are called that, not "unknown"; a reply's
later failures that only follow its first one are not listed as causes of their own; a dataset without
difficulties does not ask for `--dataset` when it was given; a task that asks for [BEGIN]/[DONE] is not told of
fences. Real engine and tools; the report through its command."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARBITER = ROOT / "examples" / "fixed_priority_arbiter"
REPLIES = ARBITER / "completions"


def cli(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "RTLREWARD_CACHE_DIR": str(tmp / "cache"), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "rtlreward", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp,
    )


def _row(text: str, first_cell: str) -> list[str]:
    """The cells of the table row (rich box or Markdown) whose first cell is `first_cell`."""
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"[│|]", line) if c.strip()]
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in:\n{text}")


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("counts")
    lines = [
        {"id": "fixed_priority_arbiter", "sample": 0, "completion": (REPLIES / "correct.txt").read_text()},
        {"id": "fixed_priority_arbiter", "sample": 1, "completion": (REPLIES / "prose_only.txt").read_text()},
        {
            "id": "fixed_priority_arbiter",
            "sample": 2,
            "completion": (REPLIES / "syntax_error.txt").read_text(),
        },
        {"id": "counter", "sample": 0, "completion": "module counter; endmodule"},  # not in this selection
    ]
    completions = tmp / "c.jsonl"
    completions.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp / "r.jsonl"
    res = cli("eval", str(ARBITER), "-c", str(completions), "-p", "shaped", "-o", str(out), tmp=tmp)
    assert res.returncode == 0, res.stderr
    page = tmp / "r.md"
    rep = cli("report", str(out), "--format", "md", "-o", str(page), "--dataset", str(ARBITER), tmp=tmp)
    assert rep.returncode == 0, rep.stderr
    return res, page.read_text(), tmp


def test_eval_and_report_count_a_stage_the_same(scored):
    res, page, _ = scored
    eval_safety = _row(res.stdout, "safety")
    funnel = page.split("## ")
    report_safety = _row(next(s for s in funnel if s.lower().startswith("stage funnel")), "safety")
    # the prose reply fails format, so safety is skipped for it: it ran on 2 of the 3 replies
    assert eval_safety[1] == report_safety[1] == "2", (eval_safety, report_safety)
    assert "1 ids outside the selection skipped" in res.stdout and "unknown ids" not in res.stdout
    assert "outside this selection" in res.stderr


def test_consequences_are_not_causes(scored):
    _, page, _ = scored
    causes = next(s for s in page.split("## ") if s.startswith("Top failure causes"))
    table = [ln for ln in causes.splitlines() if ln.startswith("|")]
    listed = [_row(ln, ln.split("|")[1].strip())[2] for ln in table[2:]]  # the stage column
    assert "compile" not in listed, causes  # the syntax error's compile failure follows its lint failure
    assert "only follow an earlier failure" in causes and "compile" in causes.split("only follow")[1]


def test_a_dataset_without_difficulties_does_not_ask_for_dataset(tmp_path):
    out = tmp_path / "ve.jsonl"
    res = cli(
        "eval", "verilog-eval", "--reference", "--filter", "ids=Prob001_zero", "-o", str(out), tmp=tmp_path
    )
    assert res.returncode == 0, res.stderr
    page = tmp_path / "ve.md"
    rep = cli(
        "report", str(out), "--format", "md", "-o", str(page), "--dataset", "verilog-eval", tmp=tmp_path
    )
    assert rep.returncode == 0, rep.stderr
    text = page.read_text()
    assert "No difficulty known: neither the results rows nor the dataset" in text
    assert "pass --dataset" not in text and "pass \\-\\-dataset" not in text


def test_a_begin_done_task_is_told_of_begin_done_not_fences(tmp_path):
    prose = tmp_path / "prose.txt"
    prose.write_text("The output is always zero, so I would tie it low.")
    res = cli(
        "score",
        "verilog-eval",
        "--task",
        "Prob001_zero",
        "-c",
        str(prose),
        "-p",
        "seed",
        "--json",
        tmp=tmp_path,
    )
    assert res.returncode == 1, res.stderr
    fmt = json.loads(res.stdout)["stages"]["format"]
    assert "[BEGIN] and [DONE]" in fmt["feedback"] and "```" not in fmt["feedback"]
    assert "[BEGIN] and [DONE]" in fmt["diagnostics"][0]["message"]
