"""`rtlreward report RUN [RUN2]`: the page a run's analysis used to be written by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["add_command", "write_report"]


def _labels(paths: list[Path]) -> list[str]:
    """A short, distinct name per run: the file name (the folder's for a metrics.jsonl), with the parent folder
    added when two would read the same."""

    def name(p: Path, depth: int) -> str:
        if p.name == "metrics.jsonl" or p.is_dir():
            p = p if p.is_dir() else p.parent
        parts = p.resolve().parts
        return "/".join(parts[-depth:]) if parts else str(p)

    labels = [name(p, 1) for p in paths]
    depth = 1
    while len(set(labels)) < len(labels) and depth < 4:
        depth += 1
        labels = [name(p, depth) for p in paths]
    if len(set(labels)) < len(labels):
        labels = [f"{chr(65 + i)}: {lab}" for i, lab in enumerate(labels)]
    return labels


def write_report(
    runs: list[Path],
    out: Path | None,
    *,
    fmt: str = "html",
    dataset: str | None = None,
    source: str | None = None,
    completions: list[Path] | None = None,
    title: str | None = None,
    max_samples: int = 200,
    plots: bool = True,
    audits: list[Path] | None = None,
) -> Path | None:
    """Read the runs, build the report, write it; returns where it went (None: standard output). Raises
    ValueError with a message for the user. Audit reports (`rtlreward audit --json`) given as the runs make a
    page of their own; given as `audits`, a section of the run's report."""
    from rtlreward_report import audit_section
    from rtlreward_report.analysis import build_report
    from rtlreward_report.runs import load_run, task_map

    if fmt not in ("html", "md"):
        raise ValueError(f"--format {fmt!r}: use html or md")
    audit_docs = audit_section.load_audits(list(audits or []))
    if runs and all(audit_section.is_audit_file(p) for p in runs):
        audit_docs = audit_section.load_audits(runs) + audit_docs
        page_title = title or "rtlreward audit"
        text = (
            audit_section.render_audit_page(audit_docs, page_title)
            if fmt == "html"
            else f"# {page_title}\n\n" + audit_section.render_audit_markdown(audit_docs)
        )
        return _write(text, runs, out, fmt)
    if not 1 <= len(runs) <= 2:
        raise ValueError("give one run, or two to compare (RUN RUN2)")
    completions = list(completions or [])
    if len(completions) > len(runs):
        raise ValueError("more --completions files than runs: give at most one per run, in the runs' order")
    tasks = None
    if dataset:
        from rtlreward.integration import load_tasks

        try:
            tasks = task_map(load_tasks(dataset, source))
        except (OSError, KeyError) as exc:
            raise ValueError(f"--dataset {dataset}: {exc}") from None
    loaded = [
        load_run(p, label, tasks=tasks, completions=completions[i] if i < len(completions) else None)
        for i, (p, label) in enumerate(zip(runs, _labels(runs), strict=True))
    ]
    report = build_report(loaded, tasks, title=title or "rtlreward report", max_samples=max_samples)
    if fmt == "md":
        from rtlreward_report.markdown import render_markdown

        text = render_markdown(report)
    else:
        from rtlreward_report.html import render_html

        text = render_html(report, plots=plots)
    if audit_docs:
        text = (
            audit_section.add_to_page(text, audit_docs)
            if fmt == "html"
            else text + "\n" + audit_section.render_audit_markdown(audit_docs)
        )
    return _write(text, runs, out, fmt)


def _write(text: str, runs: list[Path], out: Path | None, fmt: str) -> Path | None:
    if out is not None and str(out) == "-":
        typer.echo(text, nl=False)
        return None
    if out is None:
        first = runs[0] if not runs[0].is_dir() else runs[0] / "metrics.jsonl"
        stem = first.name
        for suffix in (".jsonl", ".json"):
            stem = stem[: -len(suffix)] if stem.endswith(suffix) else stem
        out = first.with_name(f"{stem}.report.{fmt}")
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder: give a file name, e.g. {out / ('report.' + fmt)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out


def add_command(app: typer.Typer) -> None:
    @app.command("report")
    def report(
        runs: Annotated[
            list[Path],
            typer.Argument(
                help="A results JSONL of `rtlreward eval` or a training run (tinker-cookbook metrics.jsonl, or "
                "its folder); a second one to compare with the first. Or audit reports (`rtlreward audit --json`): "
                "a page of audits.",
                show_default=False,
            ),
        ],
        out: Annotated[
            Path | None,
            typer.Option(
                "--out", "-o", help="Where to write it ('-': standard output). Default: beside RUN."
            ),
        ] = None,
        fmt: Annotated[
            str, typer.Option("--format", help="html (self-contained page) or md (tables).")
        ] = "html",
        dataset: Annotated[
            str | None,
            typer.Option(
                "--dataset",
                help="The dataset the run was scored on (name or path): categories, difficulties and expected "
                "interfaces for rows that lack them.",
            ),
        ] = None,
        source: Annotated[
            str | None, typer.Option("--source", help="Where a named --dataset reads its files from.")
        ] = None,
        completions: Annotated[
            list[Path] | None,
            typer.Option(
                "--completions",
                "-c",
                help="The completions JSONL a run scored (repeat for RUN2): the replies, for rows without them.",
            ),
        ] = None,
        title: Annotated[str | None, typer.Option("--title", help="The page's title.")] = None,
        max_samples: Annotated[
            int,
            typer.Option("--max-samples", help="Failing samples given a section each (examples always are)."),
        ] = 200,
        audits: Annotated[
            list[Path] | None,
            typer.Option(
                "--audit",
                help="An `rtlreward audit --json` report to add as a section (repeat: one per profile). An audit "
                "report given as RUN makes a page of audits alone.",
            ),
        ] = None,
    ) -> None:
        """Write a report of one evaluation or training run, or compare two: pass@k, stage funnel, rewards,
        categories, top failure causes, interfaces of failing tasks, training curves."""
        from rtlreward.cli import fail
        from rtlreward.plugins import PluginError

        try:
            where = write_report(
                runs,
                out,
                fmt=fmt,
                dataset=dataset,
                source=source,
                completions=completions,
                title=title,
                max_samples=max_samples,
                audits=audits,
            )
        except (ValueError, PluginError) as exc:
            raise fail(str(exc)) from None
        except OSError as exc:
            raise fail(f"{exc.filename or ''}: {exc.strerror or exc}") from None
        if where is not None:
            typer.echo(f"report: {where}")
