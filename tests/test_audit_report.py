"""The audit's report outside `rtlreward audit` (issue 21): the HTML report's audit section (an audit JSON alone, or
`rtlreward report RUN --audit FILE`), and `rtlreward tasks check --audit PROFILE` recording it in the health report.
Real runs of the commands on the counter example under `equiv` (stubs and names only, no search)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COUNTER = ROOT / "examples" / "counter"


def _run(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "RTLREWARD_CACHE_DIR": str(cache), "RTLREWARD_CONFIG": "", "COLUMNS": "250"}
    return subprocess.run(
        [sys.executable, "-m", "rtlreward", *args], capture_output=True, text=True, env=env, timeout=900
    )


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("audit-report-cache")


@pytest.fixture(scope="module")
def audit_json(tmp_path_factory, cache) -> Path:
    out = tmp_path_factory.mktemp("audit-report") / "audit.equiv.json"
    res = _run(
        "audit", str(COUNTER), "-p", "equiv", "--budget", "0", "--attack", "stub", "--attack", "names",
        "--json", str(out), cache=cache,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return out


def test_an_audit_json_alone_makes_a_page_with_the_section(audit_json, cache, tmp_path):
    # hostile text in the report (a reply is the model's) is escaped on the page
    doc = json.loads(audit_json.read_text())
    doc["tasks"][0]["unearned"]["reply"] = "<script>alert(1)</script>"
    doc["tasks"][0]["unearned"]["files"] = {"rtl/x.sv": "<img src=x onerror=alert(1)>"}
    hostile = tmp_path / "hostile.json"
    hostile.write_text(json.dumps(doc))
    res = _run("report", str(audit_json), str(hostile), "--out", str(tmp_path / "page.html"), cache=cache)
    assert res.returncode == 0, res.stderr
    page = (tmp_path / "page.html").read_text()
    assert 'id="audit"' in page and "Audit: unearned reward" in page
    assert "counter" in page and "stub:zeros" in page and "0.100" in page
    assert "<details><summary>counter: the unearned reply" in page  # the design, collapsed
    assert "<script>" not in page and "<img" not in page and "&lt;img src=x" in page
    # markdown too
    res = _run("report", str(audit_json), "--format", "md", "--out", "-", cache=cache)
    assert res.returncode == 0, res.stderr
    assert (
        "## Audit: unearned reward" in res.stdout
        and "| counter | 0.100 | 0.100 | 1.000 | 0.900 |" in res.stdout
    )


def test_a_run_report_takes_the_audit_as_a_section(audit_json, cache, tmp_path):
    results = tmp_path / "r.jsonl"
    res = _run("eval", str(COUNTER), "--reference", "-p", "equiv", "--out", str(results), cache=cache)
    assert res.returncode == 0, res.stderr
    page_path = tmp_path / "run.html"
    res = _run("report", str(results), "--audit", str(audit_json), "--out", str(page_path), cache=cache)
    assert res.returncode == 0, res.stderr
    page = page_path.read_text()
    assert page.count('<section id="audit"') == 1 and '<a href="#audit">Audit</a></nav>' in page
    assert page.index('id="audit"') > page.index('id="overview"')  # after the run's own sections
    bad = _run("report", str(results), "--audit", str(results), "--out", str(page_path), cache=cache)
    assert bad.returncode != 0 and "not an audit report" in bad.stderr


def test_tasks_check_records_an_audit(cache, tmp_path):
    out = tmp_path / "health.json"
    res = _run(
        "tasks", "check", str(ROOT / "examples"), "--id", "counter", "--seeds", "1", "--mutants", "0",
        "--no-stubs", "--audit", "equiv", "--audit-budget", "0", "--audit-attack", "stub",
        "--audit-attack", "one_tool_view", "--out", str(out), cache=cache,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    (entry,) = doc["tasks"]
    a = entry["audit"]["equiv"]
    assert a["unearned_reward"] == pytest.approx(0.1) and a["stub_reward"] == pytest.approx(0.1)
    assert a["over_stub"] == pytest.approx(0.0) and a["forged_pass"] is False and a["errors"] == 0
    assert doc["audit"]["equiv"]["schema"] == "rtlreward-audit/1"
    assert "audit: unearned/stub" in res.stdout and "equiv 0.10/0.10" in res.stdout


def test_the_docs_plugin_attack_example_runs(tmp_path):
    """docs/audit.md's plugin example, run as a script from the checkout, as the page says."""
    page = (ROOT / "docs" / "audit.md").read_text()
    section = page[page.index("## Adding an attack from a plugin") :]
    code = section[
        section.index("```python\n") + len("```python\n") : section.index("```\n", section.index("```python"))
    ]
    script = tmp_path / "my_attacks.py"
    script.write_text(code)
    env = {**os.environ, "RTLREWARD_CACHE_DIR": str(tmp_path / "c"), "RTLREWARD_CONFIG": ""}
    res = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600
    )
    assert res.returncode == 0, res.stderr
    assert "padding earns 0.1 - the do-nothing stub earns 0.1" in res.stdout
