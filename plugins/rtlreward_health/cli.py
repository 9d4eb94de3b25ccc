"""The `rtlreward tasks check` command: a table (and JSON) of every task's health."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

STYLE = {"ok": "green", "weak": "yellow", "flaky": "yellow", "broken": "red", "unchecked": "dim"}


def add_commands(app: typer.Typer) -> None:
    from rtlreward.cli import command_group

    group = command_group(
        app, "tasks", help="Task health: broken references, weak harnesses, calibrated limits."
    )

    @group.command("check")
    def check(
        dataset: Annotated[
            str, typer.Argument(help="A dataset name (verilog-eval, rtllm, cvdp, ...) or a path.")
        ],
        source: Annotated[
            str | None, typer.Option("--source", help="Where a named dataset reads its files.")
        ] = None,
        filters: Annotated[
            list[str] | None,
            typer.Option(
                "--filter",
                "-f",
                help="key=value passed to the dataset loader (repeatable), as in eval: ids=a,b, limit=N, ...",
            ),
        ] = None,
        ids: Annotated[
            list[str], typer.Option("--id", help="Only this task id (repeatable; same as --filter ids=...).")
        ] = [],  # noqa: B006
        limit: Annotated[int | None, typer.Option("--limit", help="Only the first N tasks.")] = None,
        seeds: Annotated[int, typer.Option("--seeds", help="Reference runs, each with its own seed.")] = 3,
        n_mutants: Annotated[
            int, typer.Option("--mutants", help="Mutants of the reference to grade the harness.")
        ] = 8,
        floor: Annotated[float, typer.Option("--floor", help="Least calibrated time limit, seconds.")] = 3.0,
        factor: Annotated[
            float, typer.Option("--factor", help="Time limit = factor x the median reference run.")
        ] = 5.0,
        executor: Annotated[str, typer.Option("--executor", "-x", help="local | docker | ray")] = "local",
        jobs: Annotated[int | None, typer.Option("--jobs", "-j", help="Candidates in flight.")] = None,
        out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the JSON report here.")] = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print the JSON report instead of the table.")
        ] = False,
        no_cache: Annotated[
            bool, typer.Option("--no-cache", help="Measure again even if a report is cached.")
        ] = False,
        stubs: Annotated[
            bool,
            typer.Option(
                "--stubs/--no-stubs",
                help="Score do-nothing stubs under shaped and equiv (a harness run each).",
            ),
        ] = True,
        audit_profiles: Annotated[
            list[str],
            typer.Option(
                "--audit",
                help="Also run `rtlreward audit` under this profile (repeatable): each task's unearned reward "
                "beside the stub's, in the table and the JSON report (docs/audit.md).",
            ),
        ] = [],  # noqa: B006
        audit_budget: Annotated[
            int, typer.Option("--audit-budget", help="Search evaluations per task for --audit.")
        ] = 4,
        audit_attacks: Annotated[
            list[str],
            typer.Option(
                "--audit-attack", help="Only these audit attacks or classes (repeatable; default all)."
            ),
        ] = [],  # noqa: B006
    ) -> None:
        """Check that each task's reference passes its harness here and that the harness fails real bugs."""
        from rich.markup import escape
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        from rich.table import Table

        from rtlreward.cli import _load_tasks, console, fail
        from rtlreward.engine import EngineError
        from rtlreward_health.check import CheckSettings, check_tasks, default_cache_path, report

        if filters:
            from rtlreward.evaluate.command import parse_filters

            try:
                parsed = parse_filters(filters)
            except ValueError as exc:
                raise fail(str(exc)) from None
            wanted_ids = parsed.pop("ids", None)
            if wanted_ids:
                ids = [*ids, *(i.strip() for i in str(wanted_ids).split(",") if i.strip())]
            if "limit" in parsed:
                limit = int(parsed.pop("limit"))
        else:
            parsed = {}
        tasks = (
            _load_tasks(dataset) if source is None and not parsed else _load_source(dataset, source, **parsed)
        )
        if ids:
            wanted = set(ids)
            tasks = [t for t in tasks if t.id in wanted]
            missing = wanted - {t.id for t in tasks}
            if missing:
                raise fail(f"unknown task id(s): {', '.join(sorted(missing))}")
        if limit is not None:
            tasks = tasks[:limit]
        if not tasks:
            raise fail(f"{dataset} has no tasks to check")
        settings = CheckSettings(
            seeds=max(1, seeds),
            mutants=max(0, n_mutants),
            floor=floor,
            factor=factor,
            executor=executor,
            jobs=jobs,
            stubs=stubs,
        )
        from rtlreward.config import quiet

        err = console(stderr=True)
        # a log (stderr not a terminal) gets a line per tenth of each phase instead of a bar, as eval and sample
        lines = not err.is_terminal and not quiet()
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=True,
            disable=quiet() or not err.is_terminal,
        ) as bar:
            bars: dict[str, int] = {}
            shown: dict[str, int] = {}

            def progress(what: str, done: int, total: int) -> None:
                if lines:
                    tenth = 10 * done // max(1, total)
                    if shown.get(what) != tenth:
                        shown[what] = tenth
                        print(f"tasks check: {what} {done}/{total}", file=sys.stderr, flush=True)
                    return
                if what not in bars:
                    bars[what] = bar.add_task(what, total=total)
                bar.update(bars[what], completed=done, total=total)

            try:
                tools, entries = check_tasks(
                    tasks,
                    settings,
                    cache_path=default_cache_path(),
                    use_cache=not no_cache,
                    progress=progress,
                )
            except EngineError as exc:
                raise fail(str(exc)) from None
        if audit_profiles:
            from rtlreward_health.audit import audit_tasks

            with _fail_on_audit_error():
                audits = audit_tasks(
                    tasks,
                    entries,
                    audit_profiles,
                    budget=audit_budget,
                    attacks=audit_attacks,
                    executor=executor,
                    jobs=jobs,
                )
        doc = report(dataset, tools, entries)
        if audit_profiles:
            doc["audit"] = audits
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(doc, indent=2))
        if as_json:
            typer.echo(json.dumps(doc, indent=2))
            return
        table = Table(
            "task",
            "status",
            "reference",
            "time (s)",
            "limit (s)",
            "harness",
            "formal",
            "stubs (shaped)",
            "cause / surviving mutant",
            title=f"task health: {dataset}",
        )
        synthesised = any("synthesis" in e for e in entries)
        if synthesised:
            table.add_column("synthesis")
        if audit_profiles:
            from rtlreward_health.audit import audit_cell

            table.add_column("audit: unearned/stub")
        for e in entries:
            strength = ""
            if e.get("mutants_not_equivalent"):
                strength = f"{e['mutants_killed']}/{e['mutants_not_equivalent']} killed"
            style = STYLE.get(e["status"], "")
            table.add_row(
                escape(e["id"]),
                f"[{style}]{e['status']}[/]",
                e.get("reference_passes", ""),
                "" if e.get("reference_seconds") is None else f"{e['reference_seconds']:.2f}",
                _limit(e.get("time_limits") or {}),
                strength,
                e.get("formal", ""),
                _stubs(e),
                escape(e.get("cause", "")),
                *([_synthesis(e)] if synthesised else []),
                *([audit_cell(e)] if audit_profiles else []),
            )
        out_console = console()
        out_console.print(table)
        counts: dict[str, int] = {}
        for e in entries:
            counts[e["status"]] = counts.get(e["status"], 0) + 1
        out_console.print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())), markup=False)
        out_console.print(
            "toolchain: " + ", ".join(f"{k}={v}" for k, v in sorted(tools.items())), markup=False
        )


@contextlib.contextmanager
def _fail_on_audit_error() -> Iterator[None]:
    """Engine, profile and plugin errors of an audit as a CLI failure with their message (exit 1, no traceback)."""
    from rtlreward.cli import fail
    from rtlreward.engine import EngineError
    from rtlreward.plugins import PluginError
    from rtlreward.profiles import ProfileError

    try:
        yield
    except (EngineError, ProfileError, PluginError) as exc:
        raise fail(str(exc)) from None


def _synthesis(entry: dict) -> str:
    """`clean` with the reference's cells and area, or what keeps it from synthesising cleanly."""
    from rich.markup import escape

    state = entry.get("synthesis", "")
    if state == "clean":
        fig = entry.get("synthesis_figures") or {}
        parts = [f"{fig[k]:g} {name}" for k, name in (("cells", "cells"), ("area", "area")) if k in fig]
        return "clean" + (f" ({', '.join(parts)})" if parts else "")
    if not state:
        return ""
    problems = entry.get("synthesis_problems") or []
    style = "red" if state == "not clean" else "yellow"
    return f"[{style}]{escape(state)}[/]" + (f": {escape(str(problems[0]))[:120]}" if problems else "")


def _stubs(entry: dict) -> str:
    """The best stub's `shaped` total, and a warning when a stub earns correctness credit."""
    totals = (entry.get("stub_rewards") or {}).get("shaped") or {}
    if not totals:
        return ""
    text = f"{max(totals.values()):.2f}"
    return text + (" [red]credit![/]" if entry.get("stub_credit") else "")


def _limit(limits: dict) -> str:
    """The slowest stage's calibrated limit (the harness run, in practice)."""
    return f"{max(limits.values()):g}" if limits else ""


def _load_source(dataset: str, source: str | None, **filters):
    from rtlreward.cli import fail
    from rtlreward.integration import load_tasks

    try:
        return load_tasks(dataset, source=source, **filters)
    except (ValueError, OSError, KeyError) as exc:
        raise fail(str(exc)) from None
