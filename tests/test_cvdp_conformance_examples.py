"""Conformance (a): the official CVDP v1.1.0 examples pass with their reference answer and fail with an empty
answer, on the local runner (bubblewrap binds and the path-rewrite fallback) and on the Docker runner."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cvdp_harness_helpers import EXAMPLE_AGENTIC, EXAMPLE_NONAGENTIC, problem, run_harness

from rtlreward.model import Status
from rtlreward.sandbox.local import LocalExecutor

pytestmark = pytest.mark.skipif(shutil.which("iverilog") is None, reason="needs Icarus Verilog")

EXAMPLES = [
    pytest.param(EXAMPLE_NONAGENTIC, id="nonagentic-lfsr"),
    pytest.param(EXAMPLE_AGENTIC, id="agentic-arbiter"),
]


@pytest.mark.parametrize("path", EXAMPLES)
@pytest.mark.parametrize("bwrap", [True, False], ids=["bind", "rewrite"])
def test_example_reference_passes_empty_fails_locally(path: Path, bwrap: bool, tmp_path: Path):
    ex = LocalExecutor(use_bwrap=bwrap)
    if bwrap and not ex.supports_binds:
        pytest.skip("bubblewrap is not usable here")
    task, reference = problem(path)
    assert reference and set(reference) == set(task.expected_files)
    good = run_harness(task, reference, tmp_path / "ref", executor=ex)
    assert good.status is Status.PASSED and good.score == 1.0, good.feedback
    assert good.metrics["tests_passed"] == good.metrics["tests_total"] >= 1
    empty = run_harness(task, {}, tmp_path / "empty", executor=ex)
    assert empty.status is Status.FAILED and empty.score == 0.0
    assert empty.diagnostics and "failed" in empty.feedback


def test_agentic_patch_reconstructs_the_reference():
    """The agentic example's answer is a header-less unified-diff hunk applied to the context."""
    task, reference = problem(EXAMPLE_AGENTIC)
    ((path, text),) = reference.items()
    assert path == "rtl/fixed_priority_arbiter.sv"
    assert text.startswith("`timescale 1ns / 1ps\nmodule fixed_priority_arbiter(")
    assert "@@" not in text and not any(line.startswith("+") for line in text.splitlines()[:3])
    assert task.harness.options == {"category": "cid003", "agentic": True}


def test_cli_conformance_examples_command():
    import typer
    from typer.testing import CliRunner

    from cvdp_adapter.cli import register_harness_commands

    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        pass

    register_harness_commands(app)
    res = CliRunner().invoke(app, ["cvdp", "conformance", "--check", "examples"])
    assert res.exit_code == 0, res.output
    assert res.output.count("(ok)") == 4 and "MISMATCH" not in res.output


def _docker_executor():
    try:
        import docker

        docker.from_env().ping()
    except Exception as exc:
        pytest.skip(f"no Docker engine: {exc}")
    from cvdp_adapter.runner_docker import DEFAULT_IMAGE, image_available

    image = image_available()
    if image is None:
        pytest.skip(f"no CVDP sim image ({DEFAULT_IMAGE}); build it with `rtlreward sandbox build-image`")

    class DockerCtxExecutor:
        """The docker executor when the sandbox plugin provides one, else a stand-in naming the image."""

        name = "docker"
        python = "python3"

        def __init__(self, image: str) -> None:
            self.image = image

    try:  # the sandbox plugin's executor when it is there (registered, or at least importable)
        from rtlreward.plugins import get_registry

        factory = get_registry().executors().get("docker")
        if factory is None:
            from rtlreward.sandbox.docker import DockerExecutor as factory
        return factory(image=image)
    except Exception:
        pass
    return DockerCtxExecutor(image)


@pytest.mark.docker
@pytest.mark.parametrize("path", EXAMPLES)
def test_example_reference_passes_empty_fails_in_docker(path: Path, tmp_path: Path):
    ex = _docker_executor()
    task, reference = problem(path)
    good = run_harness(task, reference, tmp_path / "ref", executor=ex)
    assert good.status is Status.PASSED, good.feedback + str(good.artifacts.get("outputs"))
    assert good.metrics["cvdp_runner"] == "docker"
    empty = run_harness(task, {}, tmp_path / "empty", executor=ex)
    assert empty.status is Status.FAILED


@pytest.mark.parametrize("path", EXAMPLES)
def test_example_through_the_strict_engine(path: Path):
    """What a trainer gets: Engine(profile="strict") with the reference as a model reply passes (1.0), an empty
    reply and a reply with the wrong design get 0."""
    from cvdp_adapter.conformance import engine_verdict, strict_engine
    from rtlreward.model import Candidate

    task, reference = problem(path)
    engine = strict_engine(LocalExecutor())
    try:
        ((rel, text),) = reference.items()
        good = engine.score(task, Candidate(text=f"Here is the design.\n```verilog\n{text}\n```\n"))
        assert good.passed and good.total == 1.0, good.feedback()
        assert good.stages["tests"].metrics["cvdp_runner"] == "local"
        assert not engine.score(task, Candidate(text="I cannot do that.")).passed
        broken = text + "\nmodule oops(input a; endmodule\n"  # a syntax error: stopped before the harness
        assert engine_verdict(engine, task, {rel: broken}).status is not Status.PASSED
        assert engine_verdict(engine, task, {}).status is Status.FAILED
    finally:
        engine.close()
