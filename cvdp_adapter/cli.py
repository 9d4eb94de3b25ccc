"""The `rtlreward cvdp ...` commands: `list | show | prompts | eval` (registered by the `cvdp` plugin) and
`setup-envs | conformance` (registered by the `cvdp_harness` plugin, since they exercise the harness runner).

DATASET is a CVDP .jsonl (either shape) or a folder of them; omitted, the two vendored v1.1.0 examples.
`cvdp eval` is the generic `rtlreward eval` with CVDP's filters as options (`rtlreward.evaluate.command`).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from cvdp_adapter import records as R

GROUP_HELP = "NVIDIA CVDP benchmark: tasks, harness, conformance."


def _cvdp_group(app: Any) -> Any:
    """The `cvdp` sub-command group, shared by both CVDP plugins (whichever registers first creates it)."""
    from rtlreward.cli import command_group

    return command_group(app, "cvdp", GROUP_HELP)


def row_facts(rec: R.Record, excluded: str = "") -> dict[str, Any]:
    """What `cvdp list` shows for a record (also its --json shape)."""
    return {
        "id": rec.id,
        "category": rec.category,
        "difficulty": rec.difficulty,
        "agentic": rec.agentic,
        "files": list(rec.expected_files),
        "simulators": R.simulators(rec.harness),
        "cocotb": R.cocotb_generation(rec.harness),
        "has_reference": rec.has_reference(),
        "excluded": excluded,
    }


_COCOTB_LABEL = {"cocotb2": "cocotb_tools.runner (2.x)", "cocotb1": "cocotb.runner (1.x)", "": "-"}


def list_records(
    dataset: str | None,
    *,
    category: str | None = None,
    difficulty: str | None = None,
    id: str | None = None,
    open_source: bool = False,
    as_json: bool = False,
    console: Any = None,
) -> R.Selection:
    from rich.console import Console
    from rich.table import Table

    from cvdp_adapter.tasks import default_source

    console = console or Console()
    sel = R.select(
        R.read_records(dataset or default_source()),
        category=category,
        difficulty=difficulty,
        id=id,
        open_source_only=open_source,
    )
    if as_json:
        rows = [row_facts(r) for r in sel.kept] + [row_facts(r, why) for r, why in sel.excluded]
        print(json.dumps(rows, indent=2))
        return sel
    t = Table(title=f"CVDP problems in {dataset or 'the vendored examples'}", title_justify="left")
    for col in ("id", "category", "difficulty", "files", "simulator", "cocotb API", "ref", "excluded"):
        t.add_column(col, overflow="fold")
    rows = [(rec, "") for rec in sel.kept] + list(sel.excluded)
    for rec, why in rows:
        f = row_facts(rec, why) if why else row_facts(rec)
        t.add_row(
            rec.id,
            rec.category,
            rec.difficulty,
            "\n".join(f["files"]) or "-",
            ",".join(f["simulators"]) or "-",
            _COCOTB_LABEL[f["cocotb"]],
            "yes" if f["has_reference"] else "-",
            why,
            style="dim" if why else None,
        )
    console.print(t)
    line = f"{len(sel.kept)} problems listed"
    if open_source:
        line += f"; {len(sel.excluded)} excluded (need Cadence Xcelium)"
    console.print(line)
    return sel


def _find(recs: list[R.Record], wanted: str) -> R.Record:
    exact = [r for r in recs if r.id == wanted]
    if exact:
        return exact[0]
    match = R.id_matcher(wanted)
    found = [r for r in recs if match(r.id)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise ValueError(f"no record with id {wanted!r}; `rtlreward cvdp list DATASET` shows the ids")
    names = ", ".join(r.id for r in found[:10])
    raise ValueError(
        f"{wanted!r} matches {len(found)} records ({names}{', ...' if len(found) > 10 else ''}); "
        "give the full id"
    )


def show_record(
    dataset: str | None, wanted: str, *, style: str = "auto", as_json: bool = False, console: Any = None
) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table

    from cvdp_adapter.prompts import build_messages
    from cvdp_adapter.tasks import default_source, record_to_task

    console = console or Console()
    rec = _find(R.read_records(dataset or default_source()), wanted)
    task = record_to_task(rec, style=style)
    messages = build_messages(rec, style=style)
    ref_error = ""
    try:
        rec.reference()
    except R.PatchError as exc:
        ref_error = str(exc)
    services = R.parse_compose(rec.harness.get("docker-compose.yml", ""))
    if as_json:
        payload = {
            **row_facts(rec, "; ".join(R.commercial_reasons(rec))),
            "source": f"{rec.source}:{rec.line}",
            "messages": messages,
            "context": {p: len(t) for p, t in rec.context.items()},
            "toplevel": task.toplevel,
            "compile_sources": list(task.compile_sources),
            "harness": {"files": sorted(rec.harness), "services": services},
            "interface": task.interface.to_dict() if task.interface else None,
            "reference": sorted(task.reference) if task.reference else None,
            "reference_error": ref_error or None,
            "metadata": {k: v for k, v in task.metadata.items() if k not in ("request", "system_message")},
        }
        print(json.dumps(payload, indent=2))
        return
    reasons = R.commercial_reasons(rec)
    console.rule(f"[bold]{rec.id}")
    console.print(
        f"{rec.category} {rec.difficulty}, {'agentic' if rec.agentic else 'non-agentic'} record "
        f"({rec.source}:{rec.line}); prompt style {style}"
    )
    if reasons:
        console.print(f"[red]needs Cadence Xcelium:[/red] {escape('; '.join(reasons))}")
    for m in messages:
        console.print(Panel(m["content"], title=m["role"], title_align="left", expand=True), markup=False)
    files = Table(title="Files", title_justify="left")
    for col in ("path", "role", "lines"):
        files.add_column(col)
    for p, text in rec.context.items():
        files.add_row(p, "context", str(text.count("\n") + 1))
    ref = task.reference or {}
    for p in rec.expected_files:
        note = "answer" + (
            " (reference available)" if p in ref else " (reference redacted)" if not ref_error else ""
        )
        files.add_row(p, note, str(ref[p].count("\n") + 1) if p in ref else "-")
    console.print(files)
    if ref_error:
        console.print(f"[red]reference patch does not apply:[/red] {escape(ref_error)}")
    h = Table(title="Harness", title_justify="left")
    for col in ("service", "image", "env file", "command"):
        h.add_column(col, overflow="fold")
    for name, svc in services.items():
        image = svc.get("image") or ("build: Dockerfile" if "build" in svc else "-")
        h.add_row(name, image, svc.get("env_file", "-"), svc.get("command", "-"))
    console.print(h)
    console.print(f"harness files: {', '.join(sorted(rec.harness))}")
    console.print(
        f"TOPLEVEL {task.toplevel or '-'}; compile sources {', '.join(task.compile_sources) or '-'}; "
        f"cocotb API {_COCOTB_LABEL[R.cocotb_generation(rec.harness)]}; "
        f"simulators {', '.join(R.simulators(rec.harness)) or '-'}"
    )
    if task.interface is not None:
        console.print(f"interface: module {task.interface.module} (from {task.interface.source or '?'})")
        it = Table()
        for col in ("port", "direction", "width"):
            it.add_column(col)
        for p in task.interface.ports:
            it.add_row(p.name, p.direction, "?" if p.width is None else str(p.width))
        console.print(it)
    else:
        console.print("interface: unknown (nothing in the reference, spec or harness to derive it from)")


def export_prompts(dataset: str | None, out: Path, *, style: str = "auto", **filters: Any) -> int:
    """Write `{"id", "messages", "expected_files"}` per task: what a sampler needs to produce completions. The
    generic `rtlreward prompts cvdp` writes them (`rtlreward.prompts`): one place builds every dataset's prompts
    file, this is its CVDP front door with CVDP's filters."""
    from rtlreward.prompts import export_prompts as export

    return export("cvdp", out, source=dataset, filters={**filters, "interface": False}, style=style)


def register_commands(app: Any) -> None:
    import typer

    cvdp = _cvdp_group(app)
    dataset_arg = typer.Argument(
        None,
        help="CVDP .jsonl (agentic or non-agentic) or a folder of them; "
        "default: the vendored v1.1.0 examples.",
    )
    cat_opt = typer.Option(None, "--category", help="cid003, 3, or a comma list.")
    diff_opt = typer.Option(None, "--difficulty", help="easy | medium | hard (comma list).")
    id_opt = typer.Option(None, "--id", help="Glob (*fifo*), re:REGEX or a substring; commas for several.")

    def fail(exc: Exception) -> None:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2)

    @cvdp.command("list")
    def list_cmd(
        dataset: str = dataset_arg,
        category: str = cat_opt,
        difficulty: str = diff_opt,
        id: str = id_opt,
        open_source: bool = typer.Option(
            True,
            "--open-source/--include-commercial",
            help="Exclude records that need Cadence Xcelium (listed, dimmed, with the reason), as `cvdp eval` "
            "does (default); --include-commercial lists them as selectable.",
        ),
        as_json: bool = typer.Option(False, "--json", help="JSON instead of a table."),
    ) -> None:
        """List the problems of a CVDP file: id, category, difficulty, answer files, simulator, cocotb API."""
        try:
            list_records(
                dataset,
                category=category,
                difficulty=difficulty,
                id=id,
                open_source=open_source,
                as_json=as_json,
            )
        except (ValueError, R.RecordError) as exc:
            fail(exc)

    @cvdp.command("show")
    def show_cmd(
        dataset: str = typer.Argument(..., help="CVDP .jsonl file or folder."),
        id: str = typer.Argument(..., help="Record id (or a unique part of it)."),
        style: str = typer.Option("auto", "--style", help="Prompt style: auto | copilot | agentic."),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """One problem: the prompt the model sees, its files, harness and expected interface."""
        try:
            show_record(dataset, id, style=style, as_json=as_json)
        except (ValueError, R.RecordError) as exc:
            fail(exc)

    @cvdp.command("prompts")
    def prompts_cmd(
        dataset: str = dataset_arg,
        out: Path = typer.Option(..., "--out", "-o", help='JSONL of {"id", "messages", "expected_files"}.'),
        style: str = typer.Option("auto", "--style", help="auto | copilot (single-turn) | agentic."),
        category: str = cat_opt,
        difficulty: str = diff_opt,
        id: str = id_opt,
        open_source: bool = typer.Option(True, "--open-source/--include-commercial"),
    ) -> None:
        """Export the chat prompts of a CVDP file (alias of `rtlreward prompts cvdp`), for `rtlreward sample`."""
        try:
            n = export_prompts(
                dataset,
                out,
                style=style,
                category=category,
                difficulty=difficulty,
                id=id,
                open_source_only=open_source,
            )
        except (ValueError, R.RecordError) as exc:
            fail(exc)
        typer.echo(f"{n} prompts written to {out}")

    @cvdp.command("eval")
    def eval_cmd(
        dataset: str = dataset_arg,
        completions: Path = typer.Option(
            None, "--completions", "-c", help='JSONL: {"id", "completion"} or {"id", "files": {path: text}}.'
        ),
        profile: str = typer.Option(
            None,
            "--profile",
            "-p",
            help="Reward profile name or TOML file (default: shaped, or the config's).",
        ),
        executor: str = typer.Option(
            None, "--executor", "-x", help="local | docker | ray (default: local, or the config's)."
        ),
        ray_address: str = typer.Option(
            None, "--ray-address", help="With --executor ray: the cluster's head, HOST:PORT."
        ),
        out: Path = typer.Option(
            None,
            "--out",
            "-o",
            help="Results JSONL (appended; rerun to resume). Default: "
            "<out-dir>/<completions stem>.<dataset>.<profile>.jsonl.",
        ),
        out_dir: Path = typer.Option(
            None, "--out-dir", help="Folder of the default results file (default: results, or the config's)."
        ),
        jobs: int = typer.Option(
            None, "--jobs", "-j", help="Completions scored at once (default: CPU cores)."
        ),
        rescore: bool = typer.Option(
            False,
            "--rescore",
            help="Results of other settings in --out: keep them as FILE.prev, score again.",
        ),
        keep_replies: bool = typer.Option(
            False, "--keep-replies", help="Write each reply into its result row (for reports)."
        ),
        fail_under: float = typer.Option(
            None, "--fail-under", help="Exit 1 when the pass rate (0..1) is below this (CI)."
        ),
        fail_under_reward: float = typer.Option(
            None, "--fail-under-reward", help="Exit 1 when the mean reward is below this (CI)."
        ),
        reference: bool = typer.Option(
            False, "--reference", help="Score the records' own reference solutions."
        ),
        empty: bool = typer.Option(False, "--empty", help="Score an empty answer per problem (sanity)."),
        category: str = cat_opt,
        difficulty: str = diff_opt,
        id: str = id_opt,
        open_source: bool = typer.Option(
            True,
            "--open-source/--include-commercial",
            help="Skip records that need Cadence Xcelium (default).",
        ),
        style: str = typer.Option("auto", "--style", help="Prompt style the completions answered."),
        json_out: Path = typer.Option(None, "--summary-json", help="Also write the summary as JSON here."),
    ) -> None:
        """Score completions for CVDP problems (pass@k, per-category and per-stage rates); resumable."""
        from rtlreward.evaluate import run_eval_command

        def explain_empty() -> str | None:
            """Nothing selected because every match needs Xcelium: say how to score them anyway."""
            if not open_source:
                return None
            from cvdp_adapter.tasks import CvdpDataset

            matches = R.select(
                CvdpDataset().records(dataset), category=category, difficulty=difficulty, id=id
            )
            if not matches.kept:
                return None
            return (
                f"all {len(matches.kept)} selected records need Cadence Xcelium; add --include-commercial to "
                "score them anyway (they cannot pass without it)"
            )

        run_eval_command(
            "cvdp",
            source=dataset,
            filters={
                "category": category,
                "difficulty": difficulty,
                "id": id,
                "open_source_only": open_source,
                "style": style,
            },
            completions=completions,
            reference=reference,
            empty=empty,
            profile=profile,
            executor=executor,
            out=out,
            jobs=jobs,
            summary_json=json_out,
            explain_empty=explain_empty,
            ray_address=ray_address,
            out_dir=out_dir,
            rescore=rescore,
            keep_replies=keep_replies,
            fail_under=fail_under,
            fail_under_reward=fail_under_reward,
        )


@contextlib.contextmanager
def _progress(label: str) -> Any:
    """A progress bar on stderr for a long check: yields (started(total), advance(item)); `-q` hides it, and a
    non-terminal stderr gets a line every 10% instead of a bar."""
    import sys

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn, TimeRemainingColumn

    from rtlreward.config import quiet

    if quiet():
        yield (lambda n: None), (lambda item: None)
        return
    err = Console(stderr=True)
    if not err.is_terminal:
        state = {"total": 0, "done": 0, "shown": -1}

        def started(n: int) -> None:
            state["total"] = n
            print(f"{label}: {n} to run", file=sys.stderr, flush=True)

        def advance(item: Any) -> None:
            state["done"] += 1
            tenth = 10 * state["done"] // max(1, state["total"])
            if tenth != state["shown"]:
                state["shown"] = tenth
                print(f"{label}: {state['done']}/{state['total']}", file=sys.stderr, flush=True)

        yield started, advance
        return
    bar = Progress(
        "[bold]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        "eta",
        TimeRemainingColumn(),
        console=err,
    )
    job = bar.add_task(label, total=None)
    with bar:
        yield (lambda n: bar.update(job, total=n)), (lambda item: bar.advance(job))


def register_harness_commands(app: Any) -> None:
    """`rtlreward cvdp setup-envs` and `rtlreward cvdp conformance`."""
    import attrs
    import typer

    from cvdp_adapter.conformance import DEFAULT_SHARED

    cvdp = _cvdp_group(app)

    @cvdp.command("setup-envs")
    def setup_envs(
        name: list[str] = typer.Option(None, "--name", help="Only these envs (default: all)."),
    ) -> None:
        """Create the managed Python envs CVDP harnesses need (cocotb 1.9.2; cocotb + cocotb-bus) once, ahead
        of evaluation (needs PyPI)."""
        from cvdp_adapter import cocotb_envs

        for env_name, python in cocotb_envs.setup_all(list(name) if name else None).items():
            typer.echo(f"{env_name}: {python}")

    @cvdp.command("conformance")
    def conformance(
        check: str = typer.Option("all", help="examples | reconstructed | all"),
        executor: list[str] = typer.Option(
            ["local"], "--executor", "-x", help="Executors to check (local, docker); repeat for several."
        ),
        data: Path = typer.Option(DEFAULT_SHARED, help="The CVDP data folder (../shared/data/cvdp)."),
        jobs: int = typer.Option(2, "--jobs", "-j", help="Candidates run in parallel."),
        ids: list[str] = typer.Option(None, "--id", help="Only these task ids (reconstructed check)."),
        limit: int = typer.Option(0, help="Only the first N candidates (reconstructed check)."),
        out: Path | None = typer.Option(
            None, "--out", "-o", help="Write the per-candidate comparison as JSON here."
        ),
        mode: str = typer.Option(
            "engine", help="engine: the strict Engine's verdict (all stages); harness: the cvdp runner alone."
        ),
    ) -> None:
        """Check our CVDP verdicts against the benchmark's: the official examples (reference passes, empty
        answer fails) and recorded verdicts of real LLM candidates (every disagreement with its cause)."""
        import time

        from cvdp_adapter.conformance import check_examples, compare_reconstructed, render_report, summarise

        failed = False
        report: dict[str, Any] = {}
        if check in ("examples", "all"):
            # Each check prints as it ends: a harness run takes a minute or more, never silent that long.
            def said(r: Any) -> None:
                mark = "ok" if r.ok else "MISMATCH"
                typer.echo(f"example {r.task_id} [{r.executor}] {r.answer}: {r.status} ({mark})")

            rows = check_examples(data, executor, mode=mode, progress=said)
            failed |= not all(r.ok for r in rows)
            report["examples"] = [{**attrs.asdict(r), "ok": r.ok} for r in rows]
        if check in ("reconstructed", "all"):
            for name in executor:
                start = time.monotonic()
                with _progress(f"[{name}] recorded candidates") as (started, advance):
                    comps = compare_reconstructed(
                        name,
                        root=data / "reconstructed",
                        jobs=jobs,
                        ids=ids or None,
                        limit=limit or None,
                        mode=mode,
                        started=started,
                        progress=advance,
                    )
                typer.echo(f"[{name}] " + render_report(comps) + f"\n({time.monotonic() - start:.0f} s)")
                report[f"reconstructed/{name}"] = {
                    "summary": summarise(comps),
                    "candidates": [c.to_dict() for c in comps],
                }
        if out:
            out.write_text(json.dumps(report, indent=1))
        if failed:
            raise typer.Exit(1)
