"""The plugin package of docs/writing-a-plugin.md, pip-installed from the page's own code: `rtlreward plugins`
lists it, its stage runs in a reward through a profile that enables it (its registered profile and its TOML file),
its command runs, allow/deny lists apply to it, and after `pip uninstall` it is gone."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import plugin_helpers as ph
import pytest

from rtlreward import Candidate, Status, Task
from rtlreward.engine import Engine
from rtlreward.plugins import make_plugin_manager

ROOT = Path(__file__).resolve().parents[1]
COUNTER = ROOT / "examples" / "counter"


def cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rtlreward", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


def listed(out: str) -> dict[str, dict]:
    return {p["name"]: p for p in json.loads(out)["plugins"]}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    pkg = ph.write_package(tmp_path_factory.mktemp("thirdparty") / "rtlreward-linebudget")
    assert {"pyproject.toml", f"{ph.MODULE}.py", "linebudget.toml"} <= {p.name for p in pkg.iterdir()}
    res = ph.pip("install", "--no-build-isolation", "--no-deps", "--no-index", "-q", str(pkg))
    if res.returncode != 0:
        pytest.fail(f"pip install of the docs' example plugin failed:\n{res.stdout}\n{res.stderr}")
    importlib.invalidate_caches()
    try:
        yield pkg
    finally:
        ph.pip("uninstall", "-y", "-q", ph.DIST)
        sys.modules.pop(ph.MODULE, None)
        importlib.invalidate_caches()


def test_docs_plugin_is_listed_scores_and_is_gone_after_uninstall(installed, tmp_path):
    res = cli("plugins", "--json")
    assert res.returncode == 0, res.stderr
    mine = listed(res.stdout)[ph.ENTRY]
    assert mine["version"] == "0.1.0" and mine["distribution"] == ph.DIST
    assert mine["hooks"] == [
        "rtlreward_register_commands",
        "rtlreward_register_profiles",
        "rtlreward_register_stages",
    ]
    regs = {(r["kind"], r["name"]): r for r in mine["registers"]}
    assert regs[("stage", "linebudget")] == {
        "kind": "stage",
        "name": "linebudget",
        "version": "1",
        "requires": ["format"],
        "provides": [],
        "needs": ["files"],
    }
    assert ("profile", "shaped-concise") in regs
    assert "linebudget" in cli("plugins").stdout
    assert "shaped-concise" in cli("profiles").stdout

    # In-process: its stage runs in a reward through a profile that enables it (real format stage).
    registry = make_plugin_manager()
    profile = {
        "name": "lb",
        "stages": ["format", "linebudget"],
        "weights": {"format": 0.1, "linebudget": 0.5},
        "partial": ["linebudget"],
        "verdict": "linebudget",
        "stage": {"linebudget": {"options": {"budget": 4}}},
    }
    task = Task(id="lb", expected_files=("rtl/top.sv",), toplevel="top")
    reply = "```verilog\nmodule top(\n  input a,\n  output b\n);\n  assign b = a;\nendmodule\n```"
    with Engine(profile, registry=registry, cache=False) as engine:
        reward = engine.score(task, Candidate(text=reply))
    lb = reward.stages["linebudget"]
    assert reward.stages["format"].status is Status.PASSED
    assert lb.metrics["lines"] == 6 and lb.status is Status.FAILED and "aim for at most 4" in lb.feedback
    assert reward.total == pytest.approx(0.1 + 0.5 * 4 / 6)

    # Through the CLI with its registered profile and with its TOML file (real tools on the counter example).
    if (COUNTER / "task.toml").is_file():
        env = {"RTLREWARD_CACHE_DIR": str(tmp_path / "cache")}
        reply_file = str(COUNTER / "completions" / "correct.txt")
        res = cli("score", str(COUNTER), "-c", reply_file, "--profile", "shaped-concise", "--json", env=env)
        assert res.returncode == 0, res.stderr
        data = json.loads(res.stdout)
        assert data["stages"]["linebudget"]["status"] == "passed"
        assert (
            data["total"] == pytest.approx(1.8) and data["max_total"] == pytest.approx(1.8) and data["passed"]
        )
        tight = tmp_path / "tight.toml"
        tight.write_text(
            f'extends = "{installed / "linebudget.toml"}"\n[stage.linebudget]\noptions = {{ budget = 5 }}\n'
        )
        res = cli("score", str(COUNTER), "-c", reply_file, "--profile", str(tight), "--json", env=env)
        assert res.returncode == 0, res.stderr
        data = json.loads(res.stdout)
        lines = data["stages"]["linebudget"]["metrics"]["lines"]
        assert data["stages"]["linebudget"]["score"] == pytest.approx(5 / lines)
        assert data["stages"]["tests"]["cached"]  # only the linebudget options changed
        res = cli("linebudget", "count", str(COUNTER / "reference" / "counter.sv"))
        assert res.returncode == 0 and int(res.stdout) > 5

    # Allow and deny lists apply to it like to any built-in.
    assert ph.ENTRY not in listed(
        cli("plugins", "--json", env={"RTLREWARD_DISABLE_PLUGINS": ph.ENTRY}).stdout
    )
    only = listed(cli("plugins", "--json", env={"RTLREWARD_PLUGINS": f"{ph.ENTRY},folder"}).stdout)
    assert set(only) == {ph.ENTRY, "folder", "core"}

    res = ph.pip("uninstall", "-y", "-q", ph.DIST)
    assert res.returncode == 0, res.stderr
    importlib.invalidate_caches()
    assert ph.ENTRY not in listed(cli("plugins", "--json").stdout)
    assert "linebudget" not in make_plugin_manager().stages()
    assert cli("linebudget", "count", "x").returncode == 2
