"""The core CLI fits its ecosystem: --version, -h, shell completion, -v/-q, a project config whose values the
flags override, -x for the executor, `score --feedback` with every diagnostic in full, status and score shown
apart, error messages printed as written (no markup eaten), and groups whose help says what they are for."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rtlreward.cli import app

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
COUNTER = EXAMPLES / "counter"
ARBITER = EXAMPLES / "fixed_priority_arbiter"


@pytest.fixture
def run(monkeypatch, tmp_path):
    monkeypatch.setenv("RTLREWARD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RTLREWARD_CONFIG", "")  # no rtlreward.toml of the machine's leaks in
    monkeypatch.setenv("COLUMNS", "80")
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, list(args), catch_exceptions=False)

    return invoke


def cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """The installed entry point (plugins' commands included), as a user runs it."""
    import os

    full_env = {**os.environ, "RTLREWARD_CONFIG": "", "COLUMNS": "80", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "rtlreward", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_version_and_short_help(run):
    from rtlreward.version import __version__

    res = run("--version")
    assert res.exit_code == 0 and res.stdout.strip() == f"rtlreward {__version__}"
    for args in (["-h"], ["score", "-h"], ["eval", "-h"], ["cache", "-h"]):
        res = run(*args)
        assert res.exit_code == 0 and "Usage:" in res.stdout, args


def test_shell_completion_is_offered(run):
    res = run("--help")
    assert "--install-completion" in res.stdout and "--show-completion" in res.stdout


def test_verbose_and_quiet_are_root_options(run):
    import logging

    assert run("-q", "profiles", "--json").exit_code == 0
    assert logging.getLogger("rtlreward").level == logging.ERROR
    assert run("-vv", "profiles", "--json").exit_code == 0
    assert logging.getLogger("rtlreward").level == logging.DEBUG
    run("profiles", "--json")
    assert logging.getLogger("rtlreward").level == logging.WARNING


def test_group_help_says_what_the_group_is_for():
    res = cli("train", "-h")
    assert res.returncode == 0, res.stderr
    assert "train commands" not in res.stdout and "Train a model" in res.stdout
    res = cli("sandbox", "-h")
    assert "sandbox commands" not in res.stdout and "isolation" in res.stdout


def test_executor_flag_is_x(run):
    res = run("score", str(COUNTER), "--reference", "-x", "teleport")
    assert res.exit_code == 2 and "unknown executor 'teleport'" in res.output
    res = run("score", str(COUNTER), "--reference", "-e", "local")
    assert res.exit_code == 2  # one short flag per concept: -e is no longer an alias


def test_project_config_sets_defaults_and_flags_win(run, tmp_path, monkeypatch):
    proj = tmp_path / "proj"
    (proj / "sub").mkdir(parents=True)
    monkeypatch.delenv("RTLREWARD_CONFIG")
    monkeypatch.chdir(proj / "sub")  # found in a parent folder
    (proj / "nosim.toml").write_text(NO_SIM_PROFILE)
    (proj / "rtlreward.toml").write_text(f'profile = "{proj / "nosim.toml"}"\n')
    res = run("score", str(COUNTER), "--reference", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["profile"] == "nosim"
    res = run("score", str(COUNTER), "--reference", "--json", "-x", "teleport")
    assert res.exit_code == 2 and "unknown executor" in res.output  # the flag, not the file's default


def test_pyproject_tool_table_is_read_and_mistakes_are_one_line(run, tmp_path, monkeypatch):
    monkeypatch.delenv("RTLREWARD_CONFIG")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.rtlreward]\nexecutor = "teleport"\n'
    )
    res = run("score", str(COUNTER), "--reference", "--json")
    assert res.exit_code == 2 and "unknown executor 'teleport'" in res.output
    (tmp_path / "pyproject.toml").write_text('[tool.rtlreward]\nprofil = "strict"\n')
    res = run("score", str(COUNTER), "--reference", "--json")
    assert res.exit_code == 2 and "unknown key(s) profil" in res.output
    assert len([ln for ln in res.output.splitlines() if ln.strip()]) == 1


NO_SIM_PROFILE = """
name = "nosim"
description = "the static stages only (no simulation: fast and independent of the machine's load)"
combiner = "weighted"
stages = ["format", "safety", "interface", "lint", "compile"]
gates = ["safety"]
partial = ["interface"]

[weights]
format = 0.1
interface = 0.2
"""


@pytest.fixture
def nosim(tmp_path) -> str:
    path = tmp_path / "nosim.toml"
    path.write_text(NO_SIM_PROFILE)
    return str(path)


def test_score_feedback_shows_every_diagnostic_in_full(run, nosim):
    """On 80 columns the table used to show one of renamed_ports' six port errors; --feedback shows all six,
    each whole, with its stable code and the port as fields."""
    reply = ARBITER / "completions" / "renamed_ports.txt"
    res = run("score", str(ARBITER), "-c", str(reply), "-p", nosim, "--feedback")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    missing = [ln for ln in lines if "interface.port_missing" in ln]
    extra = [ln for ln in lines if "interface.port_extra" in ln]
    assert len(missing) == 3 and len(extra) == 3
    for port, near in (("clk", "clock"), ("rst_n", "reset_n"), ("req", "request")):
        (line,) = [ln for ln in missing if f"port={port}," in ln]
        assert f"(the answer has {near})" in line and f"near={near}" in line and "…" not in line
    assert any(ln.startswith("[interface] Interface of fixed_priority_arbiter") for ln in lines)


def test_demo_shows_status_and_score_apart(run, tmp_path, nosim):
    """`FAIL 1.00` (failed with full credit) and `ok` for a lint score of 0.8 misled: each cell is now the
    status word and the score."""
    examples = tmp_path / "examples"
    keep = ("correct.txt", "renamed_ports.txt")
    shutil.copytree(
        ARBITER,
        examples / ARBITER.name,
        ignore=lambda d, names: [n for n in names if d.endswith("completions") and n not in keep],
    )
    res = run("demo", "--examples", str(examples), "--no-cvdp", "-p", nosim)
    assert res.exit_code == 0, res.output
    assert "passed 1.00" in res.stdout and "failed 0.25" in res.stdout  # renamed_ports: 1 of 4 ports
    assert " ok " not in res.stdout and "FAIL 0" not in res.stdout


def test_error_messages_keep_square_brackets(run):
    res = run("score", "/nonexistent/[metadata]/task", "-c", "/etc/hostname")
    assert res.exit_code == 2 and "/nonexistent/[metadata]/task does not exist" in res.output


def test_train_takes_dataset_positionally_with_the_common_defaults(tmp_path):
    """`train rl|distill` read DATASET as every other command does, default to the shaped profile and take
    -p/-x; the old `--dataset` still works."""
    res = cli("train", "rl", "cvdp", "--dry-run", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    conf = json.loads(res.stdout)
    assert (conf["dataset"], conf["profile"], conf["executor"]) == ("cvdp", "shaped", "local")
    res = cli("train", "rl", "verilog-eval", "-p", "seed", "-x", "docker", "--dry-run", cwd=tmp_path)
    conf = json.loads(res.stdout)
    assert (conf["dataset"], conf["profile"], conf["executor"]) == ("verilog-eval", "seed", "docker")
    assert (
        json.loads(cli("train", "rl", "--dataset", "cvdp", "--dry-run", cwd=tmp_path).stdout)["dataset"]
        == "cvdp"
    )
    res = cli("train", "rl", "--dry-run", cwd=tmp_path)
    assert res.returncode == 2 and "give the DATASET" in res.stderr


def test_help_texts_show_their_defaults(run):
    """Rich reads `[...]` in a help text as markup: the defaults must survive into the printed help."""
    text = " ".join(run("eval", "-h").stdout.replace("│", " ").split())
    assert "(default: shaped, or the config's)" in text and "(default: local, or the config's)" in text
