"""The core knows no stage: stages declare what they provide and need, the profile says which stage is the
verdict and where the flat metrics come from, and a third-party extractor under another name replaces `format`."""

from __future__ import annotations

import ast
import json
import re
import threading
from pathlib import Path
from typing import ClassVar

import engine_helpers as h
import pytest

from rtlreward import Candidate, Stage, Status, hookimpl
from rtlreward.engine import Engine, EngineError
from rtlreward.plugins import get_registry, make_plugin_manager
from rtlreward.profiles import ProfileError, load_profile

ROOT = Path(__file__).resolve().parents[1]
BUILTIN_STAGES = {"format", "safety", "interface", "lint", "compile", "tests"}


def _row_fields(tree: ast.AST) -> set[int]:
    """ids of the constants used as `row[...]` keys: fields of a results-file row (docs/evaluate.md)."""
    return {
        id(n.slice)
        for n in ast.walk(tree)
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == "row"
    }


def test_no_core_module_names_a_built_in_stage():
    """String constants in rtlreward/**/*.py never equal a built-in stage's name (docstrings are whole texts, so
    they do not match). Two kinds of constant spell like a stage but are data fields, not stages: `Task`'s own
    field `interface` in its dict form (model.py), and the `tests: [passed, total]` field of a results row."""
    found = []
    for path in sorted((ROOT / "rtlreward").rglob("*.py")):
        tree = ast.parse(path.read_text())
        row_keys = _row_fields(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and node.value in BUILTIN_STAGES):
                continue
            if (path.name, node.value) == ("model.py", "interface") or id(node) in row_keys:
                continue
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert found == []


class Grab(Stage):
    """A third-party extractor: the answer is whatever sits between <answer> and </answer>."""

    name = "grab"
    version = "1"
    provides = ("files",)
    needs = ()

    def run(self, ctx):
        m = re.search(r"<answer>\n?(.*?)</answer>", ctx.candidate.text or "", re.S)
        if not m:
            return self.result(Status.FAILED, 0.0, feedback="put the design between <answer> and </answer>")
        (path,) = ctx.task.expected_files
        return self.result(Status.PASSED, 1.0, artifacts={"files": {path: m.group(1)}})


class GrabPlugin:
    @hookimpl
    def rtlreward_register_stages(self, register):
        register(Grab())


GRAB_SHAPED = {
    "name": "grab-shaped",
    "combiner": "weighted",
    "stages": ["grab", "safety", "interface", "lint", "compile", "tests"],
    "gates": ["safety"],
    "verdict": "tests",
    "partial": ["interface", "tests"],
    "weights": {"grab": 0.1, "syntax": 0.3, "interface": 0.2, "tests": 1.0},
    "terms": {"syntax": {"all": ["lint", "compile"]}},
    "metrics": {
        "format_valid": {"passed": ["grab"]},
        "syntax_valid": {"passed": ["lint", "compile"]},
        "tests_passed": {"stage": "tests", "metric": "tests_passed"},
        "tests_total": {"stage": "tests", "metric": "tests_total"},
    },
}


def test_a_third_party_extractor_replaces_format_and_scores_full_reward():
    task = get_registry().datasets()["folder"].load(str(ROOT / "examples"), id="fixed_priority_arbiter")[0]
    (design,) = task.reference.values()
    registry = make_plugin_manager(extra_plugins={"grab": GrabPlugin()})
    with Engine(GRAB_SHAPED, registry=registry, cache=False) as engine:
        assert engine.providers == {"files": "grab"}
        assert "grab" in engine.waits_for("lint") and "grab" in engine.waits_for("tests")
        good = engine.score(task, Candidate(text=f"Here it is.\n<answer>\n{design}</answer>\n"))
        bad = engine.score(task, Candidate(text=f"```verilog\n{design}```"))
    assert "format" not in good.stages
    assert {n: r.status for n, r in good.stages.items()} == {n: Status.PASSED for n in GRAB_SHAPED["stages"]}
    assert good.total == pytest.approx(1.6) and good.passed, good.feedback()
    assert good.files == {task.expected_files[0]: design}
    assert good.metrics["format_valid"] == 1 and good.metrics["syntax_valid"] == 1
    assert good.metrics["tests_passed"] == good.metrics["tests_total"] == 7
    assert good.metrics["term/grab"] == 1.0 and good.metrics["term/tests"] == 1.0
    # Not in the extractor's format: nothing downstream runs (they require safety, which needs the files).
    assert bad.stages["grab"].status is Status.FAILED and bad.total == 0 and not bad.passed
    assert bad.metrics["format_valid"] == 0 and bad.metrics["tests_total"] == 0


class Net(Stage):
    name = "net"
    provides = ("netlist",)

    def run(self, ctx):
        return self.result(Status.PASSED, 1.0, artifacts={"netlist": f"cells of {sorted(ctx.files)}"})


class UsesNet(Stage):
    name = "usesnet"
    needs = ("files", "netlist")

    def run(self, ctx):
        return self.result(Status.PASSED, 1.0, metrics={"netlist": ctx.products["netlist"]})


class Raw(Stage):
    """Reads only the raw reply: needs nothing, so it waits for no extractor."""

    name = "raw"
    needs = ()
    started: ClassVar[threading.Event] = threading.Event()

    def run(self, ctx):
        type(self).started.set()
        return self.result(
            Status.PASSED, 1.0, metrics={"files_seen": len(ctx.files), "chars": len(ctx.candidate.text)}
        )


class SlowFormat(h.FormatStage):
    name = "slowformat"

    def run(self, ctx):
        assert Raw.started.wait(10), (
            "the stage that needs nothing did not start before the extractor finished"
        )
        return super().run(ctx)


class Second(h.FormatStage):
    name = "second"


class NeedsGhost(Stage):
    name = "needsghost"
    needs = ("ghost",)

    def run(self, ctx):
        return self.result(Status.PASSED, 1.0)


class ProductPlugin:
    @hookimpl
    def rtlreward_register_stages(self, register):
        for s in (Net(), UsesNet(), Raw(), SlowFormat(), Second(), NeedsGhost()):
            register(s)


def reg():
    return h.registry({"products": ProductPlugin()})


def test_a_stage_waits_for_the_provider_of_what_it_needs_and_reads_it():
    # `usesnet` is listed first and requires nothing: only its `needs` make it wait for `net`.
    prof = {
        "name": "n",
        "stages": ["usesnet", "format", "net"],
        "weights": {"usesnet": 1},
        "verdict": "usesnet",
    }
    with Engine(prof, registry=reg(), cache=False) as e:
        assert list(e.stages) == ["format", "net", "usesnet"]
        assert e.waits_for("usesnet") == ("format", "net") and e.requirements("usesnet") == ()
        r = e.score(h.task(), h.cand("module top; endmodule"))
    assert r.stages["usesnet"].metrics["netlist"] == "cells of ['rtl/top.sv']" and r.passed


def test_a_stage_that_needs_nothing_runs_beside_the_extractor_and_is_keyed_on_the_raw_reply(tmp_path):
    Raw.started.clear()
    prof = {"name": "r", "stages": ["slowformat", "raw"], "weights": {"raw": 1}, "verdict": "raw"}
    with Engine(prof, registry=reg(), cache=tmp_path / "c.sqlite") as e:
        assert e.waits_for("raw") == () and e.needs("raw") == ()
        a = e.score(h.task(), h.cand("module top; endmodule"))
        b = e.score(h.task(), h.cand("module top; endmodule   "))
    assert a.stages["raw"].metrics == {"files_seen": 0, "chars": 21}
    assert not b.stages["raw"].cached  # another reply, even if it extracted to the same files
    assert b.stages["slowformat"].cached is False


def test_two_providers_or_a_missing_product_are_setup_errors():
    with pytest.raises(EngineError, match="'format' and 'second' both provide 'files'"):
        Engine({"name": "x", "stages": ["format", "second"]}, registry=reg(), cache=False)
    with pytest.raises(EngineError, match="needs 'ghost', which no stage enabled"):
        Engine({"name": "x", "stages": ["format", "needsghost"]}, registry=reg(), cache=False)


def test_the_verdict_comes_from_the_profile_only():
    prof = {"name": "nv", "stages": ["format", "safety", "compile", "tests"], "weights": {"tests": 1}}
    assert load_profile(prof).verdict is None
    with Engine(prof, registry=h.registry(), cache=False) as e:
        r = e.score(h.task(), h.cand("module top; endmodule"))
    assert r.stages["tests"].passed and r.total == 1 and not r.passed  # no verdict: never a pass
    assert all(load_profile(p).verdict for p in ("seed", "shaped", "strict", "normalized"))


def test_flat_metrics_come_from_the_profile():
    prof = {
        "extends": "shaped",
        "metrics": {
            "lint_ok": {"passed": ["lint"]},
            "iface": {"score": "interface"},
            "total_tests": {"stage": "tests", "metric": "tests_total"},
            "syntax_credit": {"term": "syntax"},
        },
    }
    with Engine(prof, registry=h.registry(), cache=False) as e:
        r = e.score(h.task(), h.cand("module top; endmodule TESTS_HALF LINT_FAIL"))
    m = r.metrics
    assert (m["lint_ok"], m["iface"], m["total_tests"], m["syntax_credit"]) == (0, 1.0, 4, 0.0)
    assert m["format_valid"] == 1 and m["tests_passed"] == 2  # the preset's table is merged, not replaced
    assert m["term/tests"] == 0.5 and m["term/format"] == 1.0 and "term/safety" not in m
    without = {"name": "bare", "stages": ["format", "tests"], "weights": {"tests": 1}, "verdict": "tests"}
    with Engine(without, registry=h.registry(), cache=False) as e:
        m2 = e.score(h.task(), h.cand("module top; endmodule")).metrics
    assert "format_valid" not in m2 and "tests_total" not in m2 and m2["stage/tests/passed"] == 1


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ({"x": {"passed": []}}, "metrics.x.passed is empty"),
        ({"x": {"score": "a", "term": "b"}}, "give exactly one source"),
        ({"x": {"metric": "tests_total"}}, "give exactly one source"),
        ({"x": {"avg": "a"}}, "unknown key 'avg'"),
        ({"x": {"term": "nope"}}, "term 'nope' is not a term"),
        ({"reward/x": {"score": "tests"}}, "the engine's own"),
    ],
)
def test_bad_metrics_tables_name_the_key(metrics, message):
    with pytest.raises(ProfileError, match=re.escape(message)):
        load_profile({"extends": "shaped", "metrics": metrics})


def test_presets_round_trip_their_metrics():
    for name in ("seed", "shaped", "strict", "normalized"):
        p = load_profile(name)
        assert {m.name for m in p.metrics} == {
            "format_valid",
            "syntax_valid",
            "interface_score",
            "tests_passed",
            "tests_total",
        }
        assert load_profile(p.to_dict()).metrics == p.metrics


def test_stage_weight_is_gone_and_the_listing_shows_products():
    assert not hasattr(Stage, "weight")
    from typer.testing import CliRunner

    from rtlreward.cli import app

    res = CliRunner().invoke(app, ["plugins", "--json"])
    assert res.exit_code == 0, res.output
    stages = {
        r["name"]: r
        for p in json.loads(res.stdout)["plugins"]
        for r in p["registers"]
        if r["kind"] == "stage"
    }
    assert stages["format"]["provides"] == ["files"] and stages["format"]["needs"] == []
    assert all("weight" not in r for r in stages.values())
