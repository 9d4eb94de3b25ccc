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


# -- the comparison of two runs of different sizes with long file names -------------------------------------------
LONG_A = "qwen2.5-coder-7b-instruct-grpo-step-0400.verilog-eval.shaped.jsonl"
LONG_B = "qwen2.5-coder-7b-instruct-grpo-step-1200-with-longer-name.verilog-eval.shaped.jsonl"


def _results_file(path: Path, n: int, passing: int) -> Path:
    """n rows over 12 tasks, the first `passing` passing every stage, the rest failing at lint."""
    rows = []
    for i in range(n):
        ok = i < passing
        stages = {
            "format": {"status": "passed", "score": 1.0, "seconds": 0.01},
            "lint": {"status": "passed" if ok else "failed", "score": float(ok), "seconds": 0.2},
            "tests": {"status": "passed" if ok else "skipped", "score": float(ok), "seconds": 0.5 * ok},
        }
        row = {"id": f"Prob{i % 12:03d}", "sample": i // 12, "reward": 1.4 if ok else 0.1, "passed": ok}
        rows.append({**row, "max_total": 1.4, "profile": "seed", "stages": stages})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_two_runs_of_12_and_60_replies_compare_as_shares_with_legends_that_fit():
    from rtlreward_report.plots import Plotter

    class Figures(Plotter):
        """The real plots, keeping each figure (drawn) beside its SVG."""

        def __init__(self) -> None:
            super().__init__()
            self.figures = []

        def _svg(self, fig, alt):
            fig.canvas.draw()
            self.figures.append(fig)
            return super()._svg(fig, alt)

    plots = Figures()
    stages = ["format", "lint", "tests"]
    # 10 of 12 and 50 of 60 passed: the same share, which must draw as the same bar
    plots.funnel(stages, [(LONG_A, [12, 10, 10], [12, 10, 10], 12), (LONG_B, [60, 50, 50], [60, 50, 50], 60)])
    plots.histogram([(LONG_A, [0.1] * 2 + [1.4] * 10), (LONG_B, [0.1] * 10 + [1.4] * 50)], 1.4, "reward")
    funnel, hist = plots.figures
    ax = funnel.axes[0]
    dark = sorted({round(p.get_width(), 6) for p in ax.patches if p.get_height() < 0.3})
    assert dark == [pytest.approx(100 * 10 / 12), 100.0], dark  # shares, not 10 against 50
    hist_heights = sorted({round(p.get_height(), 6) for p in hist.axes[0].patches if p.get_height()})
    assert hist_heights == [pytest.approx(100 * 2 / 12), pytest.approx(100 * 10 / 12)]
    for fig in (funnel, hist):
        (legend,) = fig.legends
        texts = [t.get_text() for t in legend.get_texts()]
        assert texts[0].endswith("(12 replies)") and texts[1].endswith("(60 replies)"), texts
        assert "step-0400" in texts[0] and "longer-name" in texts[1]  # what tells them apart shows
        assert not any("verilog-eval.shaped.jsonl" in t for t in texts)  # what they share does not
        box, page = legend.get_window_extent(), fig.bbox
        assert box.x0 >= page.x0 - 1 and box.x1 <= page.x1 + 1 and box.y1 <= page.y1 + 1, (box, page)


def test_the_comparison_page_renders_in_chromium(tmp_path):
    from report_helpers import chromium, render

    if chromium() is None:
        pytest.skip("headless Chromium (Debian package chromium) is not installed")
    a = _results_file(tmp_path / LONG_A, 12, 10)
    b = _results_file(tmp_path / LONG_B, 60, 50)
    page = tmp_path / "compare.html"
    res = cli("report", str(a), str(b), "-o", str(page), tmp=tmp_path)
    assert res.returncode == 0, res.stderr
    seen = render(page, tmp_path)
    assert not seen.console, seen.console
    for section in ("funnel", "rewards", "compare"):
        got = seen.sections[section]
        assert got["height"] > 50 and got["drawn"] == got["svgs"] >= 1, (section, got)
    assert "compared as shares of each run" in seen.dom


def test_a_finding_without_a_line_is_shown_as_file_colon_message(scored):
    """The prose reply's `format.missing_file` names the file but no line: `file: message`, never `file::`."""
    _, _, tmp = scored
    page = tmp / "r.html"
    res = cli("report", str(tmp / "r.jsonl"), "-o", str(page), tmp=tmp)
    assert res.returncode == 0, res.stderr
    html = page.read_text()
    assert "fixed_priority_arbiter.sv: no ```verilog block" in html.replace("&#x27;", "'")
    assert ".sv::" not in html
