"""The `rtlreward audit` command: a table on stdout, the JSON report with `--json FILE`, exit 1 with `--fail-over X`
when a task's unearned reward exceeds X."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer


def add_commands(app: typer.Typer) -> None:
    @app.command("audit")
    def audit(
        dataset: Annotated[
            str, typer.Argument(help="A dataset name (verilog-eval, rtllm, cvdp, ...) or a path.")
        ],
        profile: Annotated[str, typer.Option("--profile", "-p", help="The profile to audit.")] = "shaped",
        source: Annotated[
            str | None, typer.Option("--source", help="Where a named dataset reads its files.")
        ] = None,
        ids: Annotated[list[str], typer.Option("--id", help="Only these task ids (repeatable).")] = [],  # noqa: B006
        filters: Annotated[
            list[str], typer.Option("--filter", help="Only task ids containing this text (repeatable).")
        ] = [],  # noqa: B006
        limit: Annotated[int | None, typer.Option("--limit", help="Only the first N tasks.")] = None,
        budget: Annotated[int, typer.Option("--budget", help="Search evaluations per task.")] = 16,
        seed: Annotated[int, typer.Option("--seed", help="The search's seed (same seed, same report).")] = 0,
        attacks: Annotated[
            list[str], typer.Option("--attack", help="Only these attacks or attack classes (repeatable).")
        ] = [],  # noqa: B006
        skip: Annotated[
            list[str],
            typer.Option(
                "--skip", help="Leave out these attacks or classes (repeatable; e.g. --skip resource)."
            ),
        ] = [],  # noqa: B006
        json_out: Annotated[Path | None, typer.Option("--json", help="Write the JSON report here.")] = None,
        fail_over: Annotated[
            float | None,
            typer.Option("--fail-over", help="Exit 1 when a task's unearned reward exceeds this."),
        ] = None,
        fail_over_stub: Annotated[
            bool,
            typer.Option(
                "--fail-over-stub",
                help="Exit 1 when a wrong reply earns more than the task's do-nothing stub, a wrong reply is "
                "paid as a pass, or a reply breaks a stage (error).",
            ),
        ] = False,
        executor: Annotated[str, typer.Option("--executor", "-x", help="local | docker | ray")] = "local",
        jobs: Annotated[int | None, typer.Option("--jobs", "-j", help="Candidates in flight.")] = None,
        no_cache: Annotated[bool, typer.Option("--no-cache", help="Score without the result cache.")] = False,
    ) -> None:
        """How much reward can a design earn under a profile without being right? (docs/audit.md)"""
        from rtlreward.cli import _load_tasks, console, fail
        from rtlreward.engine import EngineError
        from rtlreward.plugins import PluginError
        from rtlreward.profiles import ProfileError
        from rtlreward_audit.audit import AuditSettings, over, over_stub, run_audit

        tasks = _load_tasks(dataset) if source is None else _load_source(dataset, source)
        if ids:
            wanted = set(ids)
            missing = wanted - {t.id for t in tasks}
            if missing:
                raise fail(f"unknown task id(s): {', '.join(sorted(missing))}")
            tasks = [t for t in tasks if t.id in wanted]
        if filters:
            tasks = [t for t in tasks if any(f in t.id for f in filters)]
        if limit is not None:
            tasks = tasks[:limit]
        if not tasks:
            raise fail(f"{dataset} has no tasks to audit")
        settings = AuditSettings(
            profile=profile,
            budget=max(0, budget),
            seed=seed,
            attacks=tuple(attacks),
            skip=tuple(skip),
            executor=executor,
            jobs=jobs,
            cache=not no_cache,
        )
        err = console(stderr=True)
        try:
            report = run_audit(tasks, settings, progress=lambda msg: err.print(msg, markup=False))
        except (EngineError, ProfileError, PluginError) as exc:
            raise fail(str(exc)) from None
        if json_out is not None:
            json_out.parent.mkdir(parents=True, exist_ok=True)
            json_out.write_text(json.dumps(report, indent=2))
        print_table(report)
        if fail_over is not None:
            bad = over(report, fail_over)
            if bad:
                err.print(
                    f"unearned reward over {fail_over:g} on {len(bad)} task(s): {', '.join(bad)}",
                    markup=False,
                )
                raise typer.Exit(1)
        if fail_over_stub:
            bad = over_stub(report)
            if bad:
                err.print(
                    f"a wrong reply earns more than the do-nothing stub (or passes, or breaks a stage) on "
                    f"{len(bad)} task(s): {', '.join(bad)}",
                    markup=False,
                )
                raise typer.Exit(1)


@contextlib.contextmanager
def fail_on_audit_error() -> Iterator[None]:
    """Engine, profile and plugin errors of an audit as a CLI failure with their message (exit 1, no traceback)."""
    from rtlreward.cli import fail
    from rtlreward.engine import EngineError
    from rtlreward.plugins import PluginError
    from rtlreward.profiles import ProfileError

    try:
        yield
    except (EngineError, ProfileError, PluginError) as exc:
        raise fail(str(exc)) from None


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:.3f}"


def print_table(report: dict) -> None:
    from rich.markup import escape
    from rich.table import Table

    from rtlreward.cli import console

    table = Table(
        "task",
        "unearned",
        "attack",
        "stub",
        "reference",
        "margin",
        "near miss",
        "judged wrong by",
        title=f"audit: unearned reward under {report['profile']}",
    )
    for e in report["tasks"]:
        u = e.get("unearned") or {}
        near = e.get("near_miss") or {}
        table.add_row(
            escape(e["id"]),
            _num(e["unearned_reward"]),
            escape(f"{u.get('class', '')}:{u.get('label', '')}" if u else "-"),
            _num(e.get("stub_reward")),
            _num(e.get("reference_reward")),
            _num(e.get("margin")),
            _num(near.get("reward")) if near else "",
            escape(" ".join((u.get("how") or "").split())[:100]),
        )
    out = console()
    out.print(table)
    out.print(f"max unearned reward: {report['max_unearned']:.3f}", markup=False)


def _load_source(dataset: str, source: str):
    from rtlreward.cli import fail
    from rtlreward.integration import load_tasks

    try:
        return load_tasks(dataset, source=source)
    except (ValueError, OSError, KeyError) as exc:
        raise fail(str(exc)) from None
