"""A harness that cannot start is the environment's fault: the `tests` stage ends as `error` (never the
candidate's score, never cached), whatever runner the task uses. The environment is really broken here: the
local executor's PATH is a folder that lacks the tool (real Icarus, real cocotb, no fakes)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from verilog_eval_helpers import VE_DATA, needs_verilog_eval, run_harness

import rtlreward.sandbox.local as local_sandbox
from rtlreward.cache import ResultCache
from rtlreward.engine import Engine
from rtlreward.model import Candidate, Status

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _plain_executor() -> local_sandbox.LocalExecutor:
    """Without bubblewrap: the PATH folder made here lies under this test's /tmp, which bubblewrap's private /tmp
    would hide (then every tool would be missing, not just the one a test removes)."""
    return local_sandbox.LocalExecutor(use_bwrap=False)


def _path_without(tmp_path: Path, *missing: str) -> str:
    """A PATH folder holding every program of /usr/bin and /bin except `missing`."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for base in ("/usr/local/bin", "/usr/bin", "/bin"):
        for entry in os.scandir(base):
            if entry.name not in missing and not (folder / entry.name).exists():
                (folder / entry.name).symlink_to(entry.path)
    return str(folder)


@needs_verilog_eval
def test_verilog_eval_without_vvp_is_an_error_not_a_failure(tmp_path, monkeypatch):
    from rtlreward_verilog_eval.dataset import VerilogEvalDataset

    task = next(t for t in VerilogEvalDataset().load(str(VE_DATA)) if t.id.startswith("Prob001"))
    monkeypatch.setattr(local_sandbox, "BASE_PATH", _path_without(tmp_path, "vvp"))
    r = run_harness(task, dict(task.reference), tmp_path / "ws", ex=_plain_executor())
    assert r.status is Status.ERROR and r.score == 0.0, r
    assert r.diagnostics[0].code == "tool-missing" and "vvp" in r.diagnostics[0].message


@needs_verilog_eval
def test_an_error_of_the_environment_is_not_cached(tmp_path, monkeypatch):
    from rtlreward_verilog_eval.dataset import VerilogEvalDataset

    task = next(t for t in VerilogEvalDataset().load(str(VE_DATA)) if t.id.startswith("Prob001"))
    monkeypatch.setattr(local_sandbox, "BASE_PATH", _path_without(tmp_path, "vvp"))
    cache = ResultCache(tmp_path / "cache")
    with Engine("shaped", executor=_plain_executor(), cache=cache) as engine:
        reward = engine.score(task, Candidate(files=dict(task.reference)))
    assert reward.stages["tests"].status is Status.ERROR and not reward.passed
    assert "tests" not in cache.stats().get("by_stage", {})


def test_cocotb_without_its_simulator_is_an_error(tmp_path, monkeypatch):
    from rtlreward.integration import load_tasks

    (task,) = load_tasks(str(EXAMPLES / "counter"))
    monkeypatch.setattr(local_sandbox, "BASE_PATH", _path_without(tmp_path, "iverilog", "vvp"))
    # compile needs Icarus too: here the tests stage runs after safety alone, so cocotb meets the missing tool
    profile = {
        "extends": "strict",
        "stages": ["format", "safety", "tests"],
        "stage": {"tests": {"requires": ["safety"]}},
    }
    with Engine(profile, executor=_plain_executor(), cache=False) as engine:
        reward = engine.score(task, Candidate(files=dict(task.reference)))
    tests = reward.stages["tests"]
    assert tests.status is Status.ERROR and tests.score == 0.0, tests
    assert "iverilog" in tests.feedback or any("iverilog" in d.message for d in tests.diagnostics)


@pytest.mark.parametrize("tool", ["iverilog"])
def test_the_compile_stage_without_icarus_is_an_error(tmp_path, monkeypatch, tool):
    from rtlreward.integration import load_tasks

    (task,) = load_tasks(str(EXAMPLES / "counter"))
    monkeypatch.setattr(local_sandbox, "BASE_PATH", _path_without(tmp_path, tool))
    with Engine("strict", executor=_plain_executor(), cache=False) as engine:
        reward = engine.score(task, Candidate(files=dict(task.reference)))
    assert reward.stages["compile"].status is Status.ERROR, reward.stages["compile"]


def test_cvdp_harness_without_its_simulator_is_an_error(tmp_path, monkeypatch):
    """The harness's pytest runs, but cocotb finds no simulator: every case fails with cocotb's "iverilog
    executable not found" before any simulation started. That used to score the reference `failed`, 0."""
    from cvdp_adapter.tasks import load

    task = next(t for t in load(None) if "lfsr" in t.id)
    monkeypatch.setattr(local_sandbox, "BASE_PATH", _path_without(tmp_path, "iverilog", "vvp"))
    profile = {
        "extends": "strict",
        "stages": ["format", "safety", "tests"],
        "stage": {"tests": {"requires": ["safety"]}},
    }
    with Engine(profile, executor=_plain_executor(), cache=False) as engine:
        reward = engine.score(task, Candidate(files=dict(task.reference)))
    tests = reward.stages["tests"]
    assert tests.status is Status.ERROR and tests.score == 0.0, tests
    assert "iverilog (not installed where it runs)" in tests.diagnostics[0].message


def test_a_design_cannot_pass_its_failure_off_as_a_missing_tool():
    """Only a case failure that STARTS with cocotb's words counts, and only when every failed case says so."""
    from cvdp_adapter.harness import CaseFailure, _missing_tool

    said = CaseFailure("t", "SystemExit: ERROR: iverilog executable not found!\n  at runner.py")
    assert _missing_tool([said]) == "iverilog"
    assert (
        _missing_tool([CaseFailure("t", "E   ModuleNotFoundError: No module named 'cocotb_tools'")])
        == "cocotb_tools"
    )
    quoted = CaseFailure("t", "AssertionError: got 'ERROR: iverilog executable not found!' from the design")
    assert _missing_tool([quoted]) is None
    assert _missing_tool([said, CaseFailure("u", "AssertionError: 3 != 4")]) is None
    assert _missing_tool([CaseFailure("t", "E   ModuleNotFoundError: No module named 'numpy'")]) is None
