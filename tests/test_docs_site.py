"""The documentation site: `mkdocs build --strict` passes (every page in the nav, every link and anchor
resolves, no warning), and the CLI reference it generates from the typer app has every command, sub-command
and option, with help text that survives Markdown."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
HOOK = ROOT / "docs" / "hooks" / "cli_reference.py"

LIST_COMMANDS = """
import sys, typer._click as click
from typer.main import get_command
from rtlreward import cli
cli._register_plugin_commands()
root = get_command(cli.app)
ctx = click.Context(root, info_name="rtlreward")
def walk(cmd, ctx, path):
    for name in cmd.list_commands(ctx):
        sub = cmd.get_command(ctx, name)
        if sub is None or sub.hidden:
            continue
        print(" ".join([*path, name]), *[o for p in sub.params if not p.hidden for o in p.opts if o.startswith("--")])
        if hasattr(sub, "list_commands"):
            walk(sub, click.Context(sub, info_name=name, parent=ctx), [*path, name])
walk(root, ctx, ["rtlreward"])
"""


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        list(args),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


@pytest.fixture(scope="module")
def reference() -> str:
    res = _run(sys.executable, str(HOOK))
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_cli_reference_has_every_command_and_option(reference):
    res = _run(sys.executable, "-c", LIST_COMMANDS)
    assert res.returncode == 0, res.stderr
    commands = [line.split() for line in res.stdout.splitlines() if line.strip()]
    paths = {" ".join(w for w in words if not w.startswith("--")) for words in commands}
    assert {"rtlreward sample", "rtlreward prompts", "rtlreward eval", "rtlreward cvdp prompts"} <= paths
    assert len(commands) >= 20
    for words in commands:
        path = [w for w in words if not w.startswith("--")]
        heading = f"`{' '.join(path)}` {{#{'-'.join(path)}}}"
        assert heading in reference, f"no section for {' '.join(path)}"
        section = reference.split(heading, 1)[1].split("\n#", 1)[0]
        for opt in (w for w in words if w.startswith("--") and w != "--help"):
            assert opt in section, f"{' '.join(path)}: option {opt} missing from its table"


def test_help_text_survives_markdown():
    sys.path.insert(0, str(HOOK.parent))
    try:
        import cli_reference
    finally:
        sys.path.remove(str(HOOK.parent))
    assert cli_reference.md_text("strips <think> and a*b, keeps `<think>` and `a*b`") == (
        r"strips &lt;think&gt; and a\*b, keeps `<think>` and `a*b`"
    )
    assert cli_reference._cell("a | b") == r"a \| b"


def test_mkdocs_config_covers_the_pages_and_generates_the_reference():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["hooks"] == ["docs/hooks/cli_reference.py"]

    def pages(nav):
        for item in nav:
            if isinstance(item, str):
                yield item
            elif isinstance(item, dict):
                for v in item.values():
                    yield from pages(v) if isinstance(v, list) else [v]

    listed = set(pages(config["nav"]))
    on_disk = {
        str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md") if "hooks" not in p.parts
    }
    assert on_disk | {"cli.md"} == listed
    for page in (
        "getting-started.md",
        "concepts.md",
        "stages.md",
        "profiles.md",
        "writing-a-plugin.md",
        "datasets.md",
        "security.md",
        "performance.md",
        "reports.md",
        "task-health.md",
        "equivalence.md",
        "sampling.md",
        "trainers/tinker-rl.md",
    ):
        assert page in listed


def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")  # the theme; `pip install -e '.[docs]'`
    site = tmp_path / "site"
    res = _run(sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "WARNING" not in res.stderr, res.stderr
    cli = (site / "cli.html").read_text()
    assert 'id="rtlreward-sample"' in cli and "--api-key-env" in cli
    assert (site / "sampling.html").exists() and (site / "getting-started.html").exists()
