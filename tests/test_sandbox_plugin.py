"""Executor registration and the `rtlreward sandbox` commands."""

from __future__ import annotations

import subprocess
import sys

import typer
from typer.testing import CliRunner


def test_executors_registered_without_importing_docker_or_ray():
    code = (
        "import sys\n"
        "from rtlreward.plugins import get_registry\n"
        "ex = get_registry().executors()\n"
        "print(sorted(n for n in ('local', 'docker', 'ray') if n in ex))\n"
        "print('docker' in sys.modules, 'ray' in sys.modules, 'rtlreward.sandbox.docker' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert lines[0] == "['docker', 'local', 'ray']"
    assert lines[1] == "False False False"


def test_local_factory_builds_a_working_executor(tmp_path):
    from rtlreward.plugins import get_registry
    from rtlreward.sandbox import Limits

    ex = get_registry().executors()["local"]()
    r = ex.run(["sh", "-c", "echo $HOME"], workspace=tmp_path, limits=Limits(timeout=10))
    assert r.ok and r.stdout.strip() == str(tmp_path.resolve())


def _app() -> typer.Typer:
    from rtlreward.sandbox.commands import add_commands

    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """test app"""

    add_commands(app)
    return app


def test_status_command_reports_bubblewrap_and_docker():
    r = CliRunner().invoke(_app(), ["sandbox", "status"])
    assert r.exit_code == 0, r.output
    assert "bubblewrap" in r.output and "docker" in r.output


def test_build_image_without_root_or_docker_fails_with_a_fix(monkeypatch):
    import rtlreward.sandbox.image as image

    monkeypatch.setattr(image.os, "geteuid", lambda: 1000)
    r = CliRunner().invoke(_app(), ["sandbox", "build-image"])
    assert r.exit_code == 1
    assert "sudo rtlreward sandbox build-image" in r.output
    assert "Traceback" not in r.output
