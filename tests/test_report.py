"""`rtlreward report`: a results file where half the replies renamed their ports (scored by the real `rtlreward
eval` on examples/fixed_priority_arbiter) names those ports as the top failure cause, in HTML and Markdown; the
page renders every section in headless Chromium with no console message; hostile task ids, replies and
diagnostics render as text; structured diagnostics (today's codes, and stable codes with port fields) cluster by
port; a tinker-cookbook metrics.jsonl becomes training curves; two runs show what got better and worse."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from report_helpers import chromium, render

from rtlreward.evaluate import read_results, result_row

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
ARB = "fixed_priority_arbiter"
PORTS = ("clk", "rst_n", "req")


def reply(name: str) -> str:
    return (EXAMPLES / ARB / "completions" / f"{name}.txt").read_text()


def cli(*args: str, timeout: float = 900, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rtlreward", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def report_app():
    """The report command on an app of its own, run in-process (the end-to-end tests above use the installed
    `rtlreward` through its entry point)."""
    import typer

    from rtlreward_report.cli import add_command

    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """rtlreward"""

    add_command(app)
    return app


def report(app, *args: str):
    from typer.testing import CliRunner

    return CliRunner().invoke(app, ["report", *args])


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def section(html: str, sid: str) -> str:
    m = re.search(rf'<section id="{sid}" data-section="{sid}">(.*?)</section>', html, re.S)
    assert m is not None, f"no section {sid}"
    return m.group(1)


def first_row(html_section: str) -> str:
    m = re.search(r"<tbody><tr>(.*?)</tr>", html_section, re.S)
    assert m is not None
    return re.sub(r"<[^>]+>", " ", m.group(1))


def md_section(md: str, title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", md, re.S | re.M)
    assert m is not None, f"no section {title}"
    return m.group(1)


def md_first_row(text: str) -> str:
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return rows[2]  # header, separator, first row


# -- the check: half the replies renamed their ports --------------------------------------------------------
@pytest.fixture(scope="module")
def arbiter_run(tmp_path_factory):
    """`rtlreward eval` (the real command, the default profile: Icarus, Verilator, cocotb) on 6 replies, half of
    them the renamed-ports one."""
    d = tmp_path_factory.mktemp("arbiter")
    comp = write_jsonl(
        d / "completions.jsonl",
        [{"id": ARB, "completion": reply("renamed_ports" if i % 2 else "correct")} for i in range(6)],
    )
    results = d / "results.jsonl"
    # A result cache of its own: every stage really runs, so the rows carry this run's stage times.
    r = cli(
        "eval",
        str(EXAMPLES / ARB),
        "--completions",
        str(comp),
        "--out",
        str(results),
        "--jobs",
        "2",
        env={"RTLREWARD_CACHE_DIR": str(d / "cache")},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    rows, problems = read_results(results)
    assert len(rows) == 6 and not problems
    assert sum(row["passed"] for row in rows) == 3
    return d, comp, results


@pytest.fixture(scope="module")
def arbiter_reports(arbiter_run):
    d, comp, results = arbiter_run
    out = {}
    for fmt in ("html", "md"):
        path = d / f"report.{fmt}"
        r = cli(
            "report",
            str(results),
            "--dataset",
            str(EXAMPLES / ARB),
            "--completions",
            str(comp),
            "--out",
            str(path),
            "--format",
            fmt,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        out[fmt] = path
    return out


def test_renamed_ports_are_the_top_failure_cause(arbiter_reports):
    html = arbiter_reports["html"].read_text()
    top = first_row(section(html, "failures"))
    assert all(p in top for p in PORTS), top
    assert "missing port" in top and "interface" in top
    for old, new in (("clk", "clock"), ("rst_n", "reset_n"), ("req", "request")):
        assert f"{old} → {new}" in top
    # The side-by-side table of the failing task: expected clk, generated clock, and so on.
    iface = section(html, "interfaces")
    assert re.search(r"<code>clk</code>.*?<code>clock</code>.*?renamed", iface, re.S)
    assert re.search(r"<code>grant</code>.*?<code>grant</code>.*?st-ok", iface, re.S)
    # Every example link has a target on the page.
    for target in re.findall(r'href="#(r\d+-s\d+)"', html):
        assert f'id="{target}"' in html

    md = arbiter_reports["md"].read_text()
    row = md_first_row(md_section(md, "Top failure causes"))
    assert all(p.replace("_", "\\_") in row for p in PORTS), row
    assert "missing port" in row


def test_numbers_pass_at_k_funnel_and_groups(arbiter_reports):
    md = arbiter_reports["md"].read_text()
    assert "| pass@1 | 50.0% |" in md
    funnel = md_section(md, "Stage funnel")
    assert re.search(r"^\| interface \| 6 \| 3 \| 50\.0% \| 3 \|", funnel, re.M), funnel
    assert re.search(r"^\| tests \| 6 \| 3 \| 50\.0% \| 3 \|", funnel, re.M), funnel
    # Where the time went: each stage's p50/p95 seconds per reply that ran it, and its share of the run's time.
    rows = {
        cells[0]: cells
        for line in funnel.splitlines()
        if line.startswith("| ") and len(cells := [c.strip() for c in line.strip("|").split("|")]) == 10
    }
    tests = rows["tests"]
    assert 0 < float(tests[7]) <= float(tests[8]), tests
    shares = [float(r[9].rstrip("%")) for name, r in rows.items() if r[9].endswith("%")]
    assert abs(sum(shares) - 100) < 1 and float(tests[9].rstrip("%")) == max(shares), rows
    assert "| arbiter | 1 | 6 | 3 | 50.0% |" in md_section(md, "By category")
    assert "| easy | 1 | 6 | 3 | 50.0% |" in md_section(md, "By difficulty")  # from --dataset: rows lack it


def test_markdown_has_the_html_sections(arbiter_reports):
    html = arbiter_reports["html"].read_text()
    md = arbiter_reports["md"].read_text()
    html_titles = re.findall(r'<section id="\w+" data-section="\w+"><h2>(.*?)</h2>', html)
    md_titles = re.findall(r"^## (.*)$", md, re.M)
    assert html_titles == md_titles
    assert {
        "Overview",
        "Stage funnel",
        "Rewards",
        "Top failure causes",
        "Interfaces of failing tasks",
    } <= set(md_titles)


needs_chromium = pytest.mark.skipif(
    chromium() is None,
    reason="headless Chromium is not installed (Debian package `chromium`, .ci/system-deps)",
)


@needs_chromium
def test_page_renders_every_section_without_console_messages(arbiter_reports, tmp_path):
    html = arbiter_reports["html"].read_text()
    assert "<script" not in html.lower() and "http://" not in html.replace("http://www.w3.org", "")
    seen = render(arbiter_reports["html"], tmp_path)
    assert seen.console == []
    expected = re.findall(r'<section id="(\w+)" data-section', html)
    assert set(expected) >= {
        "overview",
        "funnel",
        "rewards",
        "categories",
        "failures",
        "interfaces",
        "samples",
    }
    assert set(seen.sections) - {"__scripts"} == set(expected)
    for sid in expected:
        s = seen.sections[sid]
        assert s["height"] > 40 and s["text"] > 20, (sid, s)
        assert s["svgs"] == s["drawn"], (sid, s)  # every plot has a box: the SVG parsed and laid out
    for sid, plots in (("funnel", 1), ("rewards", 2), ("categories", 1), ("difficulties", 1)):
        assert seen.sections[sid]["drawn"] >= plots, (sid, seen.sections[sid])
    assert seen.sections["__scripts"] == 0
    assert "clock" in seen.dom and "rst_n" in seen.dom


# -- diagnostics recorded in the rows --------------------------------------------------------------------------------
QUICK = """
name = "iface"
combiner = "weighted"
stages = ["format", "safety", "interface"]
gates = ["safety"]
verdict = "interface"
partial = ["interface"]

[weights]
format = 0.1
interface = 1.0
"""


@pytest.fixture(scope="module")
def scored_with_diagnostics(tmp_path_factory):
    """Rows as `rtlreward eval` will write them once they carry each stage's diagnostics: the real interface
    stage's output, serialised."""
    from rtlreward.engine import Engine
    from rtlreward.model import Candidate
    from rtlreward.plugins import get_registry

    d = tmp_path_factory.mktemp("diag")
    (d / "iface.toml").write_text(QUICK)
    task = next(t for t in get_registry().datasets()["folder"].load(str(EXAMPLES / ARB)))
    names = ["correct", "renamed_ports"] * 3
    with Engine(str(d / "iface.toml"), cache=False) as engine:
        rewards = engine.score_batch(
            [(task, Candidate(text=reply(n), sample=i)) for i, n in enumerate(names)]
        )
    rows = []
    for i, rw in enumerate(rewards):
        row = result_row(task, i, rw)
        for name, st in rw.stages.items():
            row["stages"][name]["diagnostics"] = [x.to_dict() for x in st.diagnostics]
        rows.append(row)
    return d, rows


def test_causes_from_the_stages_recorded_diagnostics(scored_with_diagnostics):
    """Stable codes with the port as a field, as the interface stage records them."""
    from rtlreward_report.analysis import build_report
    from rtlreward_report.runs import load_run

    d, rows = scored_with_diagnostics
    path = write_jsonl(d / "stable.jsonl", rows)
    view = build_report([load_run(path, "stable")]).results[0]  # no dataset, no replies: the rows alone
    top = view.causes[0]
    assert top.stage == "interface" and top.code == "interface.port_missing" and not top.derived
    assert [s.split(" → ")[0] for s in top.subjects] == list(PORTS)
    assert top.first == len(top.samples) == 3
    assert all("clock" not in c.label for c in view.causes[1:])  # a rename counts once, not again as "extra"
    (iv,) = view.interfaces
    assert {(r.expected.name, r.generated.name, r.status) for r in iv.rows if r.status == "renamed"} == {
        ("clk", "clock", "renamed"),
        ("rst_n", "reset_n", "renamed"),
        ("req", "request", "renamed"),
    }


LEGACY = {
    "interface.port_missing": "missing-port",
    "interface.port_extra": "extra-port",
    "interface.width_mismatch": "port-mismatch",
    "interface.direction_mismatch": "port-mismatch",
    "interface.module_missing": "missing-module",
}


def test_causes_from_older_codes_without_fields(scored_with_diagnostics, tmp_path, report_app):
    """Results written before stable codes: `missing-port` with the port only in the message."""
    _, rows = scored_with_diagnostics
    old_rows = []
    for row in rows:
        row = json.loads(json.dumps(row))
        for st in row["stages"].values():
            for x in st.get("diagnostics", []):
                x["code"] = LEGACY.get(x.get("code"), x.get("code"))
                x.pop("fields", None)
        old_rows.append(row)
    assert any(x["code"] == "missing-port" for r in old_rows for x in r["stages"]["interface"]["diagnostics"])
    path = write_jsonl(tmp_path / "old.jsonl", old_rows)
    out = tmp_path / "r.md"
    r = report(report_app, str(path), "--format", "md", "--out", str(out))
    assert r.exit_code == 0, r.stderr
    row = md_first_row(md_section(out.read_text(), "Top failure causes"))
    assert "missing-port" in row and all(p.replace("_", "\\_") in row for p in PORTS), row
    assert "clk → clock" in row


def test_ports_read_from_the_replies_when_rows_have_no_diagnostics(tmp_path, report_app):
    """An older results file (statuses only): with --dataset and --completions the report reads the replies'
    ports with slang and finds a narrower `grant` and a missing module, marked as coming from the replies."""
    narrow = reply("correct").replace("output logic [3:0] grant", "output logic [2:0] grant")
    assert narrow != reply("correct")
    other = reply("correct").replace("module fixed_priority_arbiter", "module arbiter_top")
    comp = write_jsonl(tmp_path / "c.jsonl", [{"id": ARB, "completion": t} for t in (narrow, narrow, other)])
    failed = {"format": {"score": 1.0, "status": "passed"}, "interface": {"score": 0.5, "status": "failed"}}
    rows = write_jsonl(
        tmp_path / "r.jsonl",
        [{"id": ARB, "sample": i, "reward": 0.3, "passed": False, "stages": failed} for i in range(3)],
    )
    out = tmp_path / "r.md"
    r = report(
        report_app,
        str(rows),
        "--dataset",
        str(EXAMPLES / ARB),
        "-c",
        str(comp),
        "--format",
        "md",
        "--out",
        str(out),
    )
    assert r.exit_code == 0, r.stderr
    causes = md_section(out.read_text(), "Top failure causes")
    first = md_first_row(causes)
    assert "port direction or width differs: grant" in first and "interface.width\\_mismatch" in first, causes
    assert "(from the replies)" in first and "| 2 | 2 | 1 |" in first
    assert "top module missing: fixed\\_priority\\_arbiter" in causes
    iface = md_section(out.read_text(), "Interfaces of failing tasks")
    assert "| output grant\\[4\\] | output grant\\[3\\] | mismatch | width 3, expected 4 |" in iface, iface


# -- hostile text --------------------------------------------------------------------------------------------------
HOSTILE_ID = '<script>console.error("pwned-id")</script>'
HOSTILE_REPLY = '</pre></details><script>console.error("pwned-reply")</script><img src=x onerror=alert(1)>'


def hostile_rows() -> list[dict]:
    stages_fail = {
        "format": {"score": 1.0, "status": "passed"},
        "interface": {
            "score": 0.0,
            "status": "failed",
            "diagnostics": [
                {
                    "code": '"><script>console.error("pwned-code")</script>',
                    "message": "<b>bold</b> & co",
                    "severity": "error",
                    "fields": {"port": "<i>p</i>"},
                },
                {
                    "code": "interface.port_missing",
                    "message": "x",
                    "fields": {"port": "<svg onload=alert(1)>"},
                },
            ],
            "feedback": "<script>console.error('pwned-feedback')</script>",
        },
        "tests": {"score": 0.0, "status": "<em>weird</em>"},
    }
    return [
        {
            "id": HOSTILE_ID,
            "sample": 0,
            "reward": 0.1,
            "passed": False,
            "stages": stages_fail,
            "max_total": 1.4,
            "category": "$\\frac$ <img src=x onerror=alert(2)>",
            "difficulty": "[x](javascript:alert(3))",
            "reply": HOSTILE_REPLY,
            "profile": "<script>alert('profile')</script>",
        },
        {
            "id": HOSTILE_ID,
            "sample": 1,
            "reward": 1.4,
            "passed": True,
            "stages": {"format": {"score": 1.0, "status": "passed"}},
            "max_total": 1.4,
            "category": "$\\frac$ <img src=x onerror=alert(2)>",
            "difficulty": "[x](javascript:alert(3))",
            "profile": "<script>alert('profile')</script>",
        },
        {"id": "plain", "sample": 0, "reward": "not a number", "passed": False, "stages": "garbage"},
    ]


def test_hostile_strings_render_as_text(tmp_path, report_app):
    results = write_jsonl(tmp_path / "hostile.jsonl", hostile_rows())
    html_path, md_path = tmp_path / "h.html", tmp_path / "h.md"
    for fmt, out in (("html", html_path), ("md", md_path)):
        r = report(
            report_app,
            str(results),
            "--format",
            fmt,
            "--out",
            str(out),
            "--title",
            "<script>alert(4)</script>",
        )
        assert r.exit_code == 0, r.stderr
    html = html_path.read_text()
    assert "<script" not in html.lower() and "<img" not in html.lower() and "<svg onload" not in html.lower()
    assert "&lt;script&gt;console.error(&quot;pwned-id&quot;)&lt;/script&gt;" in html
    assert "&lt;/pre&gt;&lt;/details&gt;&lt;script&gt;" in html  # the reply, as text
    md = md_path.read_text()
    assert "<script" not in md and "<img" not in md
    assert "\\[x\\]\\(javascript:alert\\(3\\)\\)" in md  # no link can form
    if chromium() is not None:
        seen = render(html_path, tmp_path)
        assert seen.console == []
        assert seen.sections["__scripts"] == 0
        assert '&lt;script&gt;console.error("pwned-id")&lt;/script&gt;' in seen.dom
        for sid, s in seen.sections.items():
            if sid != "__scripts":
                assert s["height"] > 0 and s["svgs"] == s["drawn"], (sid, s)


# -- training runs, two runs, errors -------------------------------------------------------------------------------
def cookbook_rows(steps: int = 4) -> list[dict]:
    """Rows with the keys tinker-cookbook 0.5.8 writes in on-policy distillation over rtlreward's env (the key set
    of a real run of tests/test_tinker_training.py, values made up); 0.6.1 ends with a token-count row without a
    batch index."""
    rows = []
    for i in range(steps):
        row = {
            "step": i,
            "progress/batch": i,
            "progress/done_frac": (i + 1) / steps,
            "optim/lr": 1e-4,
            "env/all/reward/total": 0.2 + 0.3 * i,
            "env/all/reward/max_total": 1.4,
            "env/all/reward/normalized": (0.2 + 0.3 * i) / 1.4,
            "env/all/format_valid": 0.5 + 0.1 * i,
            "env/all/syntax_valid": 0.4 + 0.1 * i,
            "env/all/interface_score": 0.3 + 0.1 * i,
            "env/all/passed": 0.1 * i,
            "env/all/ac_tokens_per_turn": 900 - 50 * i,
            "env/all/ob_tokens_per_turn": 300,
            "env/all/total_ac_tokens": 3600 - 200 * i,
            "env/all/total_episodes": 4,
            "teacher_kl": 0.8 - 0.1 * i,
            "teacher_kl/dataset_0": 0.8 - 0.1 * i,
            "optim/kl_sample_train_v1": 0.01,
            "optim/entropy": 1.2 - 0.05 * i,
            "time/total": 30 + i,
            "time/policy_sample:total": 20.0,
        }
        for stage in ("format", "safety", "interface", "lint", "compile", "tests"):
            row[f"env/all/stage/{stage}/passed"] = 0.5 + 0.1 * i if stage != "tests" else 0.1 * i
            row[f"env/all/stage/{stage}/score"] = 0.6
            row[f"env/all/stage/{stage}/duration"] = 0.3
        rows.append(row)
    rows.append({"total_tokens": 12345, "time/total": 1.0})
    return rows


def test_training_run_curves(tmp_path, report_app):
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "metrics.jsonl", cookbook_rows())
    out = tmp_path / "t.md"
    r = report(report_app, str(run), "--format", "md", "--out", str(out))
    assert r.exit_code == 0, r.stderr
    md = out.read_text()
    training = md_section(md, "Training")
    for group, key, first, last in (
        ("reward", "env/all/reward/total", "0.2", "1.1"),
        ("stage rates", "env/all/stage/interface/passed", "0.5", "0.8"),
        ("stage rates", "env/all/stage/tests/passed", "0", "0.3"),
        ("stage rates", "env/all/passed", "0", "0.3"),
        ("KL", "teacher\\_kl", "0.8", "0.5"),
        ("entropy", "optim/entropy", "1.2", "1.05"),
        ("tokens", "env/all/ac\\_tokens\\_per\\_turn", "900", "750"),
        ("time per step", "time/total", "30", "33"),  # the token-count row (no batch index) is left out
    ):
        assert re.search(rf"^\| {group} \| {re.escape(key)} \| 4 \| {first} \| {last} \|", training, re.M), (
            key,
            training,
        )
    assert "stage/tests/score" not in training and "duration" not in training  # rates, not scores or timers
    assert "Overview" not in md  # no results run: no results sections
    html = tmp_path / "t.html"
    assert report(report_app, str(run / "metrics.jsonl"), "--out", str(html)).exit_code == 0
    assert section(html.read_text(), "training").count("<svg") == 6


def test_two_runs_better_and_worse_per_task(tmp_path, report_app):
    def row(tid, n, passed, reward):
        return {
            "id": tid,
            "sample": n,
            "reward": reward,
            "passed": passed,
            "max_total": 1.4,
            "stages": {"tests": {"score": float(passed), "status": "passed" if passed else "failed"}},
        }

    a = write_jsonl(
        tmp_path / "a.jsonl",
        [
            row("up", 0, False, 0.4),
            row("down", 0, True, 1.4),
            row("same", 0, True, 1.4),
            row("gone", 0, False, 0.0),
            row("partial", 0, False, 0.4),
        ],
    )
    b = write_jsonl(
        tmp_path / "b.jsonl",
        [
            row("up", 0, True, 1.4),
            row("down", 0, False, 0.1),
            row("same", 0, True, 1.4),
            row("new", 0, True, 1.4),
            row("partial", 0, False, 0.7),
        ],
    )
    out = tmp_path / "c.md"
    r = report(report_app, str(a), str(b), "--format", "md", "--out", str(out))
    assert r.exit_code == 0, r.stderr
    cmp_ = md_section(out.read_text(), "Run against run")
    assert re.search(r"### Worse \(1\)\n\n(.*\n){2}\| down \| 1/1 \| 0/1 \|", cmp_), cmp_
    assert re.search(r"### Better \(2\)\n\n(.*\n){2}\| up \| 0/1 \| 1/1 \|", cmp_), cmp_
    assert "| partial | 0/1 | 0/1 | 0.400 | 0.700 |" in cmp_  # same pass rate, more reward
    assert "### Only in a.jsonl (1)" in cmp_ and "### Only in b.jsonl (1)" in cmp_
    html = tmp_path / "c.html"
    assert report(report_app, str(a), str(b), "--out", str(html)).exit_code == 0
    assert "<svg" in section(html.read_text(), "compare")


def test_header_line_settings_and_enriched_rows(tmp_path, report_app):
    """A results file that opens with a settings header and carries metrics, feedback and the reply per row."""
    header = {
        "rtlreward": "results",
        "format": 2,
        "settings": {"profile": "shaped", "executor": "docker", "tool_versions": {"iverilog": "12.0"}},
    }
    row = {
        "id": "t",
        "sample": 0,
        "reward": 0.1,
        "passed": False,
        "max_total": 1.6,
        "category": "c",
        "difficulty": "hard",
        "metrics": {"reward/total": 0.1},
        "feedback": "Fix the ports.",
        "reply": "module t(); endmodule",
        "stages": {
            "tests": {
                "status": "failed",
                "score": 0.0,
                "metrics": {"tests_total": 3},
                "diagnostics": [
                    {
                        "code": "tests.failed",
                        "severity": "error",
                        "message": "2 of 3",
                        "file": None,
                        "line": None,
                        "fields": {"failed": 2},
                    }
                ],
                "feedback": "2 of 3 tests failed",
            }
        },
    }
    path = write_jsonl(tmp_path / "r.jsonl", [header, row])
    out = tmp_path / "r.md"
    assert report(report_app, str(path), "--format", "md", "--out", str(out)).exit_code == 0
    md = out.read_text()
    assert "unreadable" not in md  # the header is not a bad row
    settings = md_section(md, "Runs and settings")
    assert "| executor | docker |" in settings and "iverilog" in settings
    assert "| hard | 1 | 1 | 0 |" in md_section(md, "By difficulty")
    assert "tests.failed" in md_first_row(md_section(md, "Top failure causes"))
    html = tmp_path / "r.html"
    assert report(report_app, str(path), "--out", str(html)).exit_code == 0
    page = html.read_text()
    assert page.count("Fix the ports.") == 1 and "module t(); endmodule" in page


def test_user_errors_say_what_to_do(tmp_path, report_app):
    r = report(report_app, str(tmp_path / "nope.jsonl"))
    assert r.exit_code == 2 and "no such file" in r.stderr
    junk = tmp_path / "junk.jsonl"
    junk.write_text('{"a": 1}\nnot json\n')
    r = report(report_app, str(junk))
    assert r.exit_code == 2 and "neither result rows" in r.stderr
    r = report(report_app, str(tmp_path))
    assert r.exit_code == 2 and "without metrics.jsonl" in r.stderr
    ok = write_jsonl(tmp_path / "ok.jsonl", [{"id": "t", "sample": 0, "passed": True, "reward": 1}])
    r = report(report_app, str(ok), "--format", "pdf")
    assert r.exit_code == 2 and "use html or md" in r.stderr
    r = report(report_app, str(ok))  # default: beside the run
    assert r.exit_code == 0 and (tmp_path / "ok.report.html").is_file()
