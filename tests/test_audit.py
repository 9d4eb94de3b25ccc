"""`rtlreward audit` (issue 21): how much reward a design earns without being right. Real tools, no mocks: the real
Engine under `shaped` (Icarus, Verilator, cocotb / the VerilogEval testbench) and `equiv` (Yosys + ABC, Icarus),
on the bundled arbiter and a VerilogEval problem; a small budget and a shared result cache keep it to about a minute."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner
from verilog_eval_helpers import VE_DATA, needs_verilog_eval

import rtlreward_audit
from rtlreward import Stage, Status, hookimpl
from rtlreward.integration import load_tasks
from rtlreward.plugins import make_plugin_manager
from rtlreward_audit.attacks import Attack, Seed, interface, module_text
from rtlreward_audit.audit import AuditSettings, run_audit
from rtlreward_audit.cli import add_commands

ROOT = Path(__file__).resolve().parents[1]
ARBITER = ROOT / "examples" / "fixed_priority_arbiter"
VE_TASK = "Prob011_norgate"
# every built-in attack but the resource blow-ups (each costs a stage its time limit; test_audit_forges.py)
CHEAP = tuple(a.name for a in rtlreward_audit.attacks.BUILTIN_ATTACKS if a.name != "resource")


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory):
    """One result cache for the module: a reply scored in one test is a hit in the next (same verdicts)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RTLREWARD_CACHE_DIR", str(tmp_path_factory.mktemp("audit-cache")))
        mp.setenv("RTLREWARD_CONFIG", "")
        yield


def _registry(**extra):
    """The installed plugins, with this plugin registered in-process where its entry point is not installed yet."""
    installed = {ep.name for ep in importlib.metadata.entry_points(group="rtlreward")}
    mine = {} if "audit" in installed else {"audit": rtlreward_audit}
    return make_plugin_manager(extra_plugins={**mine, **extra})


@pytest.fixture(scope="module")
def registry():
    return _registry()


@pytest.fixture(scope="module")
def arbiter():
    return load_tasks(str(ARBITER))


@pytest.fixture(scope="module")
def ve_task():
    if not (VE_DATA / "dataset_spec-to-rtl").is_dir():
        pytest.skip("VerilogEval data not at ../shared/data/verilog-eval")
    from rtlreward_verilog_eval.dataset import VerilogEvalDataset

    return VerilogEvalDataset().load(VE_DATA, ids=VE_TASK)


def _check_entry(entry: dict) -> None:
    """What every report entry says about its best unearned reply."""
    u = entry["unearned"]
    assert u is not None and u["judged"] == "wrong" and u["how"]
    assert u["reward"] == entry["unearned_reward"]
    assert entry["margin"] == pytest.approx(entry["reference_reward"] - entry["unearned_reward"], abs=1e-3)
    assert entry["reference_passed"] is True


def test_shaped_pays_a_stub_on_the_arbiter_and_the_audit_reports_it(registry, arbiter):
    report = run_audit(
        arbiter, AuditSettings(profile="shaped", budget=0, attacks=("stub",)), registry=registry
    )
    (entry,) = report["tasks"]
    _check_entry(entry)
    # format + syntax + interface credit for a design that does nothing: unearned, and found
    assert entry["unearned_reward"] > 0 and entry["stub_reward"] > 0
    assert entry["unearned"]["class"] == "stub"
    assert entry["unearned"]["stages"]["tests"][0] == "failed"
    assert "refuted" in entry["unearned"]["how"]
    assert entry["reference_reward"] == pytest.approx(1.6)


@needs_verilog_eval
def test_shaped_pays_a_stub_on_verilog_eval(registry, ve_task):
    report = run_audit(ve_task, AuditSettings(profile="shaped", budget=4, attacks=CHEAP), registry=registry)
    (entry,) = report["tasks"]
    _check_entry(entry)
    assert entry["unearned_reward"] > 0
    assert entry["judge"] == "equivalence"
    # every blind attack class was tried, and the near miss (a mutant of the reference) is reported apart
    assert {
        "stub",
        "names",
        "one_tool_view",
        "extra_port",
        "sim_control",
        "pass_lines",
        "format",
        "prompt_position",
    } <= set(entry["by_class"])
    assert entry["near_miss"] is None or entry["near_miss"]["class"] == "mutant"


@needs_verilog_eval
def test_under_equiv_no_blind_attack_beats_the_do_nothing_stub(registry, arbiter, ve_task):
    report = run_audit(
        arbiter + ve_task, AuditSettings(profile="equiv", budget=4, attacks=CHEAP), registry=registry
    )
    assert len(report["tasks"]) == 2
    for entry in report["tasks"]:
        _check_entry(entry)
        assert entry["stub_reward"] == pytest.approx(0.1)  # format credit only
        assert entry["unearned_reward"] <= entry["stub_reward"] + 1e-9, entry["unearned"]
        assert entry["search_evaluations"] > 0
    assert report["max_unearned"] <= 0.1 + 1e-9


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test app"""

    add_commands(app)
    return app


def test_cli_table_json_and_fail_over(arbiter, tmp_path):
    runner = CliRunner()
    args = ["audit", str(ARBITER), "-p", "equiv", "--budget", "0", "--attack", "stub", "--attack", "names"]
    out = tmp_path / "audit.json"
    res = runner.invoke(_app(), [*args, "--json", str(out), "--fail-over", "0.5"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "fixed_priority_arbiter" in res.stdout and "max unearned reward: 0.100" in res.stdout
    doc = json.loads(out.read_text())
    assert doc["schema"] == "rtlreward-audit/1" and doc["tasks"][0]["unearned_reward"] == pytest.approx(0.1)
    res = runner.invoke(_app(), [*args, "--fail-over", "0.05"], env={"COLUMNS": "200"})
    assert res.exit_code == 1
    assert "over 0.05" in res.stderr


def _strip(report: dict) -> str:
    return json.dumps(report, sort_keys=True)


def test_the_search_is_deterministic_for_a_seed(registry, arbiter):
    settings = AuditSettings(profile="equiv", budget=6, seed=7, attacks=("stub", "sim_control"))
    first = run_audit(arbiter, settings, registry=registry)
    again = run_audit(arbiter, settings, registry=registry)
    assert _strip(first) == _strip(again)
    assert first["tasks"][0]["search_evaluations"] == 6


class _MyStageAttacks:
    """A third party's attack aimed at its own stage, registered through the hook."""

    @hookimpl
    def rtlreward_register_attacks(self, register):
        def seeds(task):
            iface = interface(task)
            body = "".join(f"  assign {p.name} = '1;\n" for p in iface.outputs)
            return [Seed("mine", "all_ones", module_text(iface, body))]

        register(Attack("mine", "third_party", seeds, description="outputs all ones"))


def test_a_plugin_registers_an_attack_through_the_hook(arbiter):
    reg = _registry(mine=_MyStageAttacks())
    report = run_audit(arbiter, AuditSettings(profile="equiv", budget=0, attacks=("mine",)), registry=reg)
    assert report["settings"]["attacks"] == ["mine"]
    (entry,) = report["tasks"]
    assert entry["by_class"] == {"third_party": pytest.approx(0.1)}
    assert entry["unearned"]["attack"] == "mine" and entry["unearned"]["judged"] == "wrong"


class _GullibleStage(Stage):
    """A deliberately weak third-party stage: it pays for simulation-control words in the design's text."""

    name = "gullible"
    version = "1"
    requires = ("format",)
    WORDS = ("$display", "$finish", "initial", "final", "PASS")

    def run(self, ctx):
        text = "\n".join(ctx.files.values())
        hits = sum(w in text for w in self.WORDS)
        return self.result(
            Status.PASSED if hits == len(self.WORDS) else Status.FAILED, hits / len(self.WORDS)
        )


class _GulliblePlugin:
    @hookimpl
    def rtlreward_register_stages(self, register):
        register(_GullibleStage())


GULLIBLE = {
    "name": "gullible",
    "combiner": "weighted",
    "stages": ["format", "safety", "gullible"],
    "gates": ["safety"],
    "partial": ["gullible"],
    "weights": {"format": 0.1, "gullible": 1.0},
}


def test_the_search_climbs_a_weak_reward_from_the_stubs(arbiter):
    """From the stubs alone (no pass-line seeds), text mutations that raise the reward of a still-wrong design
    are kept: the search finds the weak stage's price without being told the words."""
    reg = _registry(gullible=_GulliblePlugin())
    settings = AuditSettings(profile=GULLIBLE, budget=16, seed=1, attacks=("stub",))
    (entry,) = run_audit(arbiter, settings, registry=reg)["tasks"]
    assert entry["stub_reward"] == pytest.approx(0.1)
    assert entry["search_improvements"] >= 1
    assert entry["unearned_reward"] > entry["stub_reward"]
    assert "<-" in entry["unearned"]["origin"] and entry["unearned"]["judged"] == "wrong"
