"""Plugin loading: allow/deny lists, tracing, broken plugins (warning, never a traceback), duplicate names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import engine_helpers as h
import pytest

from rtlreward import hookimpl
from rtlreward.plugins import PluginError, make_plugin_manager


def names(registry) -> set[str]:
    return {p.name for p in registry.plugins()}


def test_allow_list_loads_only_the_named_entry_points_and_the_core(monkeypatch):
    monkeypatch.setenv("RTLREWARD_PLUGINS", "folder, format")
    reg = make_plugin_manager()
    assert names(reg) == {"core", "folder", "format"}
    assert set(reg.stages()) == {"format"} and set(reg.datasets()) == {"folder"}
    # What the core needs to run is not an entry point, so no allow-list can take it away.
    assert set(reg.combiners()) == {"weighted", "strict", "normalized"}
    assert {"local", "docker", "ray"} <= set(reg.executors())


def test_deny_list_drops_entry_points_but_never_the_core(monkeypatch):
    monkeypatch.delenv("RTLREWARD_PLUGINS", raising=False)
    full = names(make_plugin_manager())
    assert {"core", "folder", "format"} <= full
    monkeypatch.setenv("RTLREWARD_DISABLE_PLUGINS", "folder,core")
    reg = make_plugin_manager()
    assert names(reg) == full - {"folder"}
    assert "folder" not in reg.datasets() and "weighted" in reg.combiners()


def test_allow_list_without_the_optional_stages_still_scores(tmp_path):
    """`RTLREWARD_PLUGINS=folder,format,safety rtlreward score ...` works with the core's executor and combiners:
    the profile names only the loaded stages."""
    profile = tmp_path / "small.toml"
    profile.write_text(
        'name = "small"\ncombiner = "weighted"\nstages = ["format", "safety"]\ngates = ["safety"]\n'
        'verdict = "format"\n[weights]\nformat = 1.0\n'
    )
    example = Path(__file__).resolve().parents[1] / "examples" / "fixed_priority_arbiter"
    env = {**os.environ, "RTLREWARD_PLUGINS": "folder,format,safety", "RTLREWARD_CACHE_DIR": str(tmp_path)}
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtlreward",
            "score",
            str(example),
            "--completion",
            str(example / "completions" / "correct.txt"),
            "--profile",
            str(profile),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["total"] == pytest.approx(1.0) and set(data["stages"]) == {"format", "safety"}


def test_tracing_prints_hook_calls_and_registrations(monkeypatch, capsys):
    monkeypatch.setenv("RTLREWARD_TRACE_PLUGINS", "1")
    reg = h.registry({"rec": h.Recorder()})
    reg.combiners()
    reg.reward_computed(h.task(), h.cand("x"), None)
    err = capsys.readouterr().err
    assert "[rtlreward trace] call rtlreward_register_combiners of core" in err
    assert "register combiner 'weighted'" in err
    assert "rtlreward_reward_computed" in err
    monkeypatch.delenv("RTLREWARD_TRACE_PLUGINS")
    h.registry().combiners()
    assert "[rtlreward trace]" not in capsys.readouterr().err


def test_plugin_raising_in_a_register_hook_loses_only_its_own_registrations():
    class Broken:
        @hookimpl
        def rtlreward_register_stages(self, register):
            raise RuntimeError("half-installed dependency")

    reg = h.registry({"broken": Broken()})
    with pytest.warns(UserWarning, match="'broken' failed in rtlreward_register_stages"):
        stages = reg.stages()
    assert set(stages) == {s.name for s in h.STAGES}
    assert "half-installed" in reg.load_errors["broken"]


def test_duplicate_stage_names_both_plugins():
    class Dup:
        @hookimpl
        def rtlreward_register_stages(self, register):
            register(h.LintStage())

    with pytest.raises(PluginError, match="'lint' is registered by both") as exc:
        h.registry({"dup": Dup()}).stages()
    assert "dup" in str(exc.value) and "test-stages" in str(exc.value)


@pytest.fixture
def broken_dist(tmp_path):
    """An installed-looking distribution (dist-info on PYTHONPATH) whose plugin module fails to import."""
    (tmp_path / "rtlreward_broken_testplugin.py").write_text("raise ImportError('needs libfoo')\n")
    info = tmp_path / "rtlreward_broken_testplugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rtlreward-broken-testplugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[rtlreward]\nbroken_test = rtlreward_broken_testplugin\n")
    return tmp_path


def test_cli_with_a_broken_plugin_warns_without_a_traceback(broken_dist):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(broken_dist), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(
        [sys.executable, "-m", "rtlreward", "plugins", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 0
    assert "Traceback" not in res.stderr
    assert "warning:" in res.stderr and "broken_test" in res.stderr and "needs libfoo" in res.stderr
    data = json.loads(res.stdout)
    assert "needs libfoo" in data["errors"]["broken_test"]
    assert "core" in {p["name"] for p in data["plugins"]}


def test_a_plugin_failing_to_add_commands_does_not_stop_the_others():
    import typer
    from typer.testing import CliRunner

    class Broken:
        @hookimpl
        def rtlreward_register_commands(self, app):
            raise RuntimeError("bad typer usage")

    class Good:
        @hookimpl
        def rtlreward_register_commands(self, app):
            @app.command("hello")
            def hello() -> None:
                print("hello from a plugin")

    app = typer.Typer()

    @app.command("noop")
    def noop() -> None:  # pragma: no cover - makes `app` a group
        pass

    reg = h.registry({"broken": Broken(), "good": Good()})
    with pytest.warns(UserWarning, match="'broken' failed to add its commands"):
        reg.register_commands(app)
    assert CliRunner().invoke(app, ["hello"]).stdout.strip() == "hello from a plugin"
    assert "bad typer usage" in reg.load_errors["broken"]
