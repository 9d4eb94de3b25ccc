"""The audit run on ourselves (issue 21): `rtlreward audit --fail-over-stub` over the bundled examples, both CVDP
examples, a VerilogEval and an RTLLM task. The CI gate: under `equiv` and `trusted` no wrong reply earns more than
the do-nothing stub, none is paid as a pass, and none breaks a stage. Every other preset is audited on the counter
(its figure is in docs/audit.md; `shaped` pays stubs by design, so it has no gate here).

A small budget and one result cache for the module (the presets share most stage results) keep it to minutes; the
resource blow-ups are exercised in test_audit_forges.py (they cost each stage its time limit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from cvdp_harness_helpers import EXAMPLE_AGENTIC, EXAMPLE_NONAGENTIC
from typer.testing import CliRunner
from verilog_eval_helpers import RTLLM_DATA, VE_DATA

from rtlreward_audit.cli import add_commands

ROOT = Path(__file__).resolve().parents[1]
PRESETS = sorted(p.stem for p in (ROOT / "rtlreward" / "presets").glob("*.toml"))
GATED = ("equiv", "trusted")
# `equiv`: every attack but the resource blow-ups (test_audit_forges.py), the mutants included (a refuted one paid as
# a pass is a forge); `trusted`: the forge classes, since its every harness run is a simulation
SELECT = {
    "equiv": ["--skip", "resource"],
    "trusted": [f"--attack={a}" for a in ("stub", "names", "one_tool_view", "extra_port")],
}


def _datasets() -> dict[str, list[str]]:
    """name -> the audit command's dataset arguments (skipped where ../shared data is absent)."""
    out = {"examples": [str(ROOT / "examples")]}
    if EXAMPLE_NONAGENTIC.is_file():
        out["cvdp-nonagentic"] = [str(EXAMPLE_NONAGENTIC)]
    if EXAMPLE_AGENTIC.is_file():
        out["cvdp-agentic"] = [str(EXAMPLE_AGENTIC)]
    if (VE_DATA / "dataset_spec-to-rtl").is_dir():
        out["verilog-eval"] = ["verilog-eval", "--source", str(VE_DATA), "--id", "Prob011_norgate"]
    if RTLLM_DATA.is_dir():
        out["rtllm"] = ["rtllm", "--source", str(RTLLM_DATA), "--id", "adder_8bit"]
    return out


DATASETS = _datasets()


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RTLREWARD_CACHE_DIR", str(tmp_path_factory.mktemp("audit-presets-cache")))
        mp.setenv("RTLREWARD_CONFIG", "")
        yield


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test app"""

    add_commands(app)
    return app


def audit(args: list[str], profile: str, select: list[str], out: Path, *extra: str):
    cmd = ["audit", *args, "-p", profile, *select, "--json", str(out), *extra]
    return CliRunner().invoke(_app(), cmd, env={"COLUMNS": "200"})


@pytest.mark.parametrize("dataset", list(DATASETS))
@pytest.mark.parametrize("profile", GATED)
def test_the_gate_no_wrong_reply_beats_the_stub(profile, dataset, tmp_path):
    out = tmp_path / "audit.json"
    budget = "2" if profile == "equiv" else "0"
    res = audit(DATASETS[dataset], profile, SELECT[profile], out, "--budget", budget, "--fail-over-stub")
    doc = json.loads(out.read_text()) if out.is_file() else None
    assert res.exit_code == 0, (res.output, doc and [(e["id"], e["unearned"]) for e in doc["tasks"]])
    assert doc is not None and doc["tasks"]
    for entry in doc["tasks"]:
        assert entry["reference_passed"] is True, entry[
            "id"
        ]  # the figure means something: the reference passes
        assert entry["stub_reward"] is not None
        assert entry["unearned_reward"] <= entry["stub_reward"] + 1e-9
        assert not entry["forged_pass"] and entry["errors"] == []
        assert {"stub", "names", "one_tool_view", "extra_port"} <= set(entry["by_class"])
    if profile == "equiv":
        assert (
            "resource" not in doc["settings"]["attacks"] and "prompt_position" in doc["settings"]["attacks"]
        )
    if profile == "trusted":
        assert doc["max_unearned"] == 0.0  # a gate on equivalence: a refuted design earns nothing


@pytest.mark.parametrize("profile", [p for p in PRESETS if p not in GATED])
def test_every_other_preset_is_audited_and_reports_its_figure(profile, tmp_path):
    out = tmp_path / "audit.json"
    select = ["--attack=stub", "--attack=names"]
    res = audit([str(ROOT / "examples" / "counter")], profile, select, out, "--budget", "0")
    assert res.exit_code == 0, res.output
    (entry,) = json.loads(out.read_text())["tasks"]
    assert entry["reference_passed"] is True and entry["stub_reward"] is not None
    if entry["unearned"] is None:  # nothing wrong earned anything (strict pays passes only)
        assert entry["unearned_reward"] == 0.0 and entry["stub_reward"] == 0.0
    else:
        assert entry["unearned"]["judged"] == "wrong"
        assert entry["margin"] == pytest.approx(
            entry["reference_reward"] - entry["unearned_reward"], abs=1e-3
        )
    assert "max unearned reward" in res.stdout


def test_fail_over_stub_fails_a_reward_that_pays_a_stub_above_the_stub(tmp_path):
    """The gate's own check: a report where a wrong reply earns more than the stub, is paid as a pass, or broke
    a stage is flagged (over_stub); the clean one is not."""
    from rtlreward_audit.audit import over_stub

    clean = {
        "id": "a",
        "unearned_reward": 0.1,
        "stub_reward": 0.1,
        "over_stub": 0.0,
        "forged_pass": False,
        "errors": [],
    }
    assert over_stub({"tasks": [clean]}) == []
    assert over_stub({"tasks": [{**clean, "unearned_reward": 0.5, "over_stub": 0.4}]}) == ["a"]
    assert over_stub({"tasks": [{**clean, "forged_pass": True}]}) == ["a"]
    assert over_stub({"tasks": [{**clean, "errors": [{"stage": "lint"}]}]}) == ["a"]
